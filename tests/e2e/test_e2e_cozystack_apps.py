"""Cozystack's application charts, changed as docs/operations.md says, on a real API server.

The stand-ins of tests/fixtures/cozystack-apps/ are rendered by the real Helm engine; their
VirtualMachines are created on the API server, where KubeVirt's own VM controller code
(`kubevirt-parts`, tests/controlplane/kubevirt/) makes each VMI of its VM's template, and our
webhooks (the chart's configurations) and KubeVirt's judge it. A worker pool's VM is the one
Cluster API and cluster-api-provider-kubevirt v0.11.2 make of the rendered
KubevirtMachineTemplate (tests/cozystack_apps.py follows their code step by step; no CAPI
controller runs here).

Expected values come from the contract (section 2: the tenant's list reaches the VMI as the
annotation, unchanged; 4.6: what the class resolves to, from the class files; 4.5 and 4.10:
a worker pool takes passthrough classes only), never from our code.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.builders import ANN
from tests.chart_helpers import chart_webhook_configurations, render
from tests.conftest import OBJECTS
from tests.controlplane.api import Api, ApiError, RawObject
from tests.controlplane.cluster import ControlPlane, eventually, unique_name
from tests.controlplane.components import Component
from tests.controlplane.kubevirt_parts import golden_objects, remove_labelled
from tests.cozystack_apps import (
    CAPK_MACHINE_NAME,
    TEMPLATES,
    app_chart,
    capk_virtual_machine,
    kubevirt_machine,
)
from tests.webhook_process import WebhookProcess

pytestmark = pytest.mark.controlplane

NAMESPACE = "tenant-a"
MINE = ("gpuclass-tests/module", "e2e-cozystack-apps")
CLEANED = (
    "/apis/kubevirt.io/v1/virtualmachines",
    "/apis/kubevirt.io/v1/virtualmachineinstances",
    "/api/v1/pods",
)


GOLDEN_OBJECTS = golden_objects(OBJECTS)
CLASS_FILES = {
    o["metadata"]["name"]: o["spec"] for o in GOLDEN_OBJECTS if o.get("kind") == "GPUClass"
}


def _resource(class_name: str) -> str:
    resource: str = CLASS_FILES[class_name]["source"]["devicePlugin"]["resourceName"]
    return resource


@pytest.fixture(scope="module")
def kubevirt_configuration() -> dict[str, Any]:
    """KubeVirt permits every device the fixture world's KubeVirt CRs permit; no feature gates."""
    union: dict[str, list[RawObject]] = {"pciHostDevices": [], "mediatedDevices": []}
    for obj in GOLDEN_OBJECTS:
        if obj.get("kind") != "KubeVirt":
            continue
        permitted = obj["spec"]["configuration"].get("permittedHostDevices") or {}
        for key, entries in union.items():
            entries += [e for e in permitted.get(key) or [] if e not in entries]
    return {"permittedHostDevices": union}


@pytest.fixture(scope="module")
def api(
    control_plane: ControlPlane,
    kubevirt_parts: Component,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Api]:
    admin = control_plane.admin
    namespaces = [o for o in GOLDEN_OBJECTS if o.get("kind") == "Namespace"]
    admin.apply([{k: o[k] for k in ("apiVersion", "kind", "metadata")} for o in namespaces])
    arguments = [a for path in OBJECTS for a in ("--objects", path)]
    webhook = WebhookProcess(
        [*arguments, "--vgpu-entitled"], tls_dir=tmp_path_factory.mktemp("cozystack-apps-tls")
    )
    configurations = chart_webhook_configurations(webhook.url, Path(webhook.ca).read_bytes())
    try:
        admin.apply(configurations)
        eventually(lambda: _webhooks_answer(admin), timeout=30, what="our webhooks")
        yield admin
    finally:
        for configuration in configurations:
            admin.delete(configuration)
        webhook.stop()
        remove_labelled(admin, MINE, CLEANED)


def _webhooks_answer(api: Api) -> bool:
    probe = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {
            "name": unique_name("probe"),
            "namespace": NAMESPACE,
            "annotations": {ANN: json.dumps([{"className": "example-whole-gpu"}])},
        },
        "spec": {
            "domain": {"devices": {}, "memory": {"guest": "1Gi"}},
        },
    }
    try:
        stored = api.create(probe, dryRun="All")
    except ApiError:
        return False
    return bool(stored["spec"]["domain"]["devices"].get("gpus"))


@pytest.fixture(scope="module")
def charts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {name: app_chart(tmp_path_factory.mktemp(name), name) for name in TEMPLATES}


def _render(chart: Path, name: str, gpus: Any) -> RawObject:
    release = unique_name("app")
    manifests_ = render({"gpus": gpus}, chart=chart, release=release, namespace=NAMESPACE)
    obj: RawObject = yaml.safe_load(manifests_[f"{name}/templates/{TEMPLATES[name]}"])
    return obj


def _mine(vm: RawObject) -> RawObject:
    """Our cleanup label on the VM and its template (KubeVirt copies the template's labels to the
    VMI and the VMI's to its launcher Pod)."""
    vm["metadata"].setdefault("labels", {})[MINE[0]] = MINE[1]
    vm["spec"]["template"].setdefault("metadata", {}).setdefault("labels", {})[MINE[0]] = MINE[1]
    vm["metadata"]["namespace"] = NAMESPACE
    return vm


def _started_vmi(api: Api, vm: RawObject) -> RawObject:
    """Create the VM (runStrategy Always) and return the VMI KubeVirt's VM controller makes."""
    api.create(vm)
    name = vm["metadata"]["name"]
    vmi: RawObject = eventually(
        lambda: api.get("kubevirt.io/v1", "VirtualMachineInstance", name, namespace=NAMESPACE),
        timeout=30,
        what=f"the VMI of {name}",
    )
    return vmi


def _worker_vm(charts: dict[str, Path], gpus: Any) -> RawObject:
    template = _render(charts["kubernetes-nodes"], "kubernetes-nodes", gpus)
    machine = kubevirt_machine(template, name=unique_name("kubernetes-demo-gpu"))
    return capk_virtual_machine(machine, cluster="kubernetes-demo", bootstrap_secret="boot")


# -- vm-instance --------------------------------------------------------------------------------------


def test_a_vm_instance_class_selection_reaches_the_vmi_and_is_resolved(
    api: Api, charts: dict[str, Path]
) -> None:
    gpus = [{"className": "example-whole-gpu", "count": 2}]
    vm = _mine(_render(charts["vm-instance"], "vm-instance", gpus))
    vmi = _started_vmi(api, vm)
    assert json.loads(vmi["metadata"]["annotations"][ANN]) == gpus
    resource = _resource("example-whole-gpu")
    assert vmi["spec"]["domain"]["devices"]["gpus"] == [
        {"name": "gpu1", "deviceName": resource},
        {"name": "gpu2", "deviceName": resource},
    ]
    for toleration in CLASS_FILES["example-whole-gpu"]["tolerations"]:
        assert toleration in vmi["spec"]["tolerations"]


def test_a_vm_instance_raw_list_reaches_the_vmi_as_it_always_did(
    api: Api, charts: dict[str, Path]
) -> None:
    vm = _mine(_render(charts["vm-instance"], "vm-instance", [{"name": "example.com/whole-gpu"}]))
    vmi = _started_vmi(api, vm)
    assert ANN not in (vmi["metadata"].get("annotations") or {})
    assert vmi["spec"]["domain"]["devices"]["gpus"] == [
        {"name": "gpu1", "deviceName": "example.com/whole-gpu"}
    ]


# -- kubernetes-nodes ---------------------------------------------------------------------------------


def test_a_worker_pool_class_selection_reaches_each_worker_vmi_and_is_resolved(
    api: Api, charts: dict[str, Path]
) -> None:
    gpus = [{"className": "example-whole-gpu"}]
    vm = _mine(_worker_vm(charts, gpus))
    vmi = _started_vmi(api, vm)
    assert json.loads(vmi["metadata"]["annotations"][ANN]) == gpus
    # The VMI is a worker by what CAPK writes on the template (docs/contract.md section 1).
    assert vmi["metadata"]["labels"][CAPK_MACHINE_NAME] == vm["metadata"]["name"]
    assert vmi["spec"]["domain"]["devices"]["gpus"] == [
        {"name": "gpu1", "deviceName": _resource("example-whole-gpu")}
    ]


def test_a_worker_pool_selecting_a_vgpu_class_is_refused_when_capk_applies_the_vm(
    api: Api, charts: dict[str, Path]
) -> None:
    vm = _mine(_worker_vm(charts, [{"className": "example-byol-vgpu"}]))
    with pytest.raises(ApiError) as refused:
        api.create(vm)
    assert refused.value.status_code == 403
    message = refused.value.body["message"]
    assert 'admission webhook "virtualmachines.gpuclass.cozystack.io" denied the request' in message
    assert "gpus[0].className: class example-byol-vgpu is vGPU" in message
