"""`gpuclass plan` against a real kube-apiserver: the live plan is the offline plan of the same objects.

The module creates a class, a node offering its resource, a VMI holding it and a VirtualMachine
asking for two units; the proposed catalog lowers the class's maxCount to 1. What the cluster
then holds is listed (as admin) into files, and `plan --kubeconfig` must print exactly what
`plan --objects FILES` prints. By hand, from the contract: the class is changed, not refused;
the VM's next start is refused (two units above maxCount 1); the VMI keeps its device.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuclass.shared.cli.main import main
from gpuclass.shared.core.base import names
from gpuclass.shared.kube import apicollections as api_collections
from tests.builders import api_gpuclass, api_namespace
from tests.controlplane.cluster import ControlPlane
from tests.e2e_reconciler_helpers import (
    KUBEVIRT_NAMESPACE,
    PermittedDevices,
    create_node,
    delete_created,
)

pytestmark = pytest.mark.controlplane


@pytest.fixture(scope="module")
def world(control_plane: ControlPlane) -> Iterator[dict[str, Any]]:
    admin = control_plane.admin
    suffix = secrets.token_hex(3)
    res = f"plan-{suffix}.example.com/gpu"
    ns = f"e2e-plan-{suffix}"
    name = f"plan-{suffix}"
    permitted = PermittedDevices()
    created: list[dict[str, Any]] = []
    selection = json.dumps([{"className": name, "count": 2}])
    try:
        admin.apply([api_namespace(KUBEVIRT_NAMESPACE), api_namespace(ns)])
        permitted.permit(admin, [res])
        created.append(admin.create(api_gpuclass(name, res)))
        node = f"plan-{suffix}"
        create_node(admin, node, {res: 4})
        created.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
        created.append(
            admin.create(
                {
                    "apiVersion": "kubevirt.io/v1",
                    "kind": "VirtualMachineInstance",
                    "metadata": {
                        "name": "holder",
                        "namespace": ns,
                        "annotations": {
                            names.SELECTION_ANNOTATION: json.dumps([{"className": name}])
                        },
                    },
                    "spec": {
                        "domain": {"devices": {"gpus": [{"name": "gpu1", "deviceName": res}]}}
                    },
                }
            )
        )
        created.append(
            admin.create(
                {
                    "apiVersion": "kubevirt.io/v1",
                    "kind": "VirtualMachine",
                    "metadata": {"name": "trainer", "namespace": ns},
                    "spec": {
                        "runStrategy": "Halted",
                        "template": {
                            "metadata": {"annotations": {names.SELECTION_ANNOTATION: selection}},
                            "spec": {"domain": {"devices": {}}},
                        },
                    },
                }
            )
        )
        yield {"class": name, "namespace": ns, "stored": created[0]}
    finally:
        delete_created(admin, created)
        permitted.restore(admin)


def dump_cluster(control_plane: ControlPlane, path: Path) -> None:
    """Every object the live plan reads, as the admin lists it, into one file."""
    c = api_collections
    objects: list[Any] = []
    for collection, namespace_ in (
        (c.GPUCLASSES, ""),
        (c.NODES, ""),
        (c.BOUND_PODS, ""),
        (c.NAMESPACES, ""),
        (c.VMIS, ""),
        (c.VMS, ""),
        (c.KUBEVIRTS, KUBEVIRT_NAMESPACE),
    ):
        listed = control_plane.admin.call(
            "GET", collection.at(namespace_), params=collection.params()
        )
        for item in listed.get("items", []):
            objects.append(
                {**item, "kind": collection.kind, "apiVersion": listed.get("apiVersion")}
            )
    path.write_text(yaml.safe_dump_all(objects))


def test_the_live_plan_is_the_offline_plan_of_the_same_objects(
    world: dict[str, Any],
    control_plane: ControlPlane,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    proposed = tmp_path / "catalog"
    proposed.mkdir()
    stored = world["stored"]
    change = {
        "apiVersion": stored["apiVersion"],
        "kind": stored["kind"],
        "metadata": {"name": world["class"]},
        "spec": {**stored["spec"], "maxCount": 1},
    }
    (proposed / "class.yaml").write_text(yaml.safe_dump(change))
    files = tmp_path / "cluster.yaml"
    dump_cluster(control_plane, files)
    args = ["plan", "-o", "json", "--fail-on", "none", str(proposed)]
    live = main([*args, "--kubeconfig", str(control_plane.admin_kubeconfig)], environ={})
    live_out = capsys.readouterr().out
    offline = main([*args, "--objects", str(files)], environ={})
    offline_out = capsys.readouterr().out
    assert (live, live_out) == (offline, offline_out)
    value = json.loads(live_out)
    ours = next(c for c in value["classes"] if c["name"] == world["class"])
    assert ours["change"] == "changed" and ours["fields"] == ["maxCount"] and not ours["refused"]
    assert ours["runningVMIs"] == [f"{world['namespace']}/holder"]
    refused = [v for v in value["vms"] if v["namespace"] == world["namespace"]]
    assert [(v["name"], v["impact"]) for v in refused] == [("trainer", "start-refused")]
