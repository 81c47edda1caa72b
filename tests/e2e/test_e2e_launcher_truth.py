"""Free means a VM can start there: the status against KubeVirt's own launcher Pods.

The oracle is KubeVirt's code and kube-scheduler, not our reading of them: every probe is a
VMI whose launcher Pod virt-controller's TemplateService renders (kubevirt-parts, KubeVirt
v1.8.4), with its `kubevirt.io/schedulable` node selector and its `kvm`, `tun` and `vhost-net`
requests, and kube-scheduler places it on kwok nodes of every kind docs/contract.md 6.1
names: healthy KubeVirt nodes, nodes without virt-handler (no `kubevirt.io/schedulable`
label), nodes whose virt-handler went stale (`kubevirt.io/schedulable=false`), nodes without
the kvm device, cordoned, tainted and NotReady nodes (25 in all). `gpuclass-reconciler`
writes the class's status; then, as the contract promises:

- a VMI of `maxFreePerNode` GPUs gets its launcher bound, one of `maxFreePerNode + 1` does not;
- `free` one-GPU VMIs all get theirs bound, and one more does not.

Then the cluster churns (a handler's label flipped, a kvm device restored, a tun device
removed, virt-handler arriving on a node) and the probes run again. Every node carries the
arch and machine-type labels KubeVirt's node labeller writes, so only the kind under test
differs between them (arch and machine type are per-VM requirements: `explain`'s, not the
class figures').
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.builders import api_gpuclass, api_namespace
from tests.controlplane.api import Api, RawObject
from tests.controlplane.cluster import ControlPlane, eventually
from tests.controlplane.components import (
    KWOK_LABEL,
    MERGE,
    Component,
    kwok_node,
    node_ready,
    set_allocatable,
)
from tests.controlplane.kubevirt_parts import remove_labelled
from tests.e2e_reconciler_helpers import (
    FAST,
    GPUCLASSES,
    LICENSE_NAMESPACE,
    ReconcilerProcess,
    figures,
    force_delete,
    get_class,
    node_path,
    pod_scheduled,
    settled_figures,
)

pytestmark = pytest.mark.controlplane

SUFFIX = secrets.token_hex(3)
RESOURCE = f"launcher-{SUFFIX}.example.com/gpu"
CLASS = f"launcher-truth-{SUFFIX}"
NS = f"e2e-launcher-{SUFFIX}"
MINE = ("gpuclass-tests/module", f"launcher-truth-{SUFFIX}")
CLEANED = ("/apis/kubevirt.io/v1/virtualmachineinstances", "/api/v1/pods")
CREATED_BY = "kubevirt.io/created-by"
SCHEDULABLE = "kubevirt.io/schedulable"
KVM, TUN = "devices.kubevirt.io/kvm", "devices.kubevirt.io/tun"
# What KubeVirt's node labeller writes beside the schedulable label, on every node here.
VM_LABELS = {"kubernetes.io/arch": "amd64", "machine-type.node.kubevirt.io/q35": "true"}
DEDICATED = {"key": "gpu.example.com/dedicated", "value": "yes", "effect": "NoSchedule"}
SETTLE = 60.0
QUIET = 1.5
BIND_WAIT = 20.0


@dataclass
class NodeKind:
    """One kind of node: its name prefix, the units of each node, and how it differs."""

    name: str
    units: tuple[int, ...]
    handler: str | None = "true"  # the kubevirt.io/schedulable label; None: no virt-handler
    devices: dict[str, Any] = field(default_factory=dict)  # overrides (0: missing)
    cordoned: bool = False
    tainted: bool = False
    ready: bool = True


# The 25-node shape: 6 healthy nodes, and 19 a one-unit launcher can never land on.
KINDS = (
    NodeKind("healthy", (2, 1, 1, 1, 1, 1)),
    NodeKind("nohandler", (8, 4, 4, 4, 4), handler=None),
    NodeKind("stale", (4, 4, 4, 4), handler="false"),
    NodeKind("nokvm", (4, 4, 4, 4), devices={KVM: 0}),
    NodeKind("cordoned", (4, 4), cordoned=True),
    NodeKind("tainted", (4, 4), tainted=True),
    NodeKind("notready", (4, 4), ready=False),
)


def node_name(kind: str, index: int) -> str:
    return f"lt-{SUFFIX}-{kind}-{index}"


@pytest.fixture(scope="module")
def kubevirt_configuration() -> dict[str, Any]:
    """KubeVirt's defaults, permitting the one resource of this module."""
    device = {"pciVendorSelector": "10DE:00AA", "resourceName": RESOURCE}
    return {"permittedHostDevices": {"pciHostDevices": [device]}}


def _create_nodes(api: Api) -> list[str]:
    created = []
    for kind in KINDS:
        for index, units in enumerate(kind.units):
            name = node_name(kind.name, index)
            labels = dict(VM_LABELS)
            obj = kwok_node(
                name,
                {},
                labels=labels,
                taints=[DEDICATED] if kind.tainted else (),
                unschedulable=kind.cordoned,
                kubevirt=kind.handler is not None,
            )
            if kind.handler is not None:
                obj["metadata"]["labels"][SCHEDULABLE] = kind.handler
            if not kind.ready:  # no kubelet: it never reports Ready
                del obj["metadata"]["labels"][KWOK_LABEL]
            api.create(obj)
            created.append(name)
            set_allocatable(
                api, name, {RESOURCE: units, "ephemeral-storage": "100Gi", **kind.devices}
            )
    return created


@dataclass
class World:
    api: Api
    reconciler: ReconcilerProcess
    nodes: list[str]
    probes: int = 0


@pytest.fixture(scope="module")
def world(
    control_plane: ControlPlane,
    kubevirt_parts: Component,
    kube_scheduler: Component,
    node_lifecycle_controller: Component,
    kwok_kubelet: Component,
) -> Iterator[World]:
    api = control_plane.admin
    api.apply([api_namespace(LICENSE_NAMESPACE), api_namespace(NS)])
    api.create(api_gpuclass(CLASS, RESOURCE))
    nodes: list[str] = []
    process = ReconcilerProcess(
        control_plane.admin_kubeconfig,
        pod_name=f"launcher-truth-{SUFFIX}",
        timings=FAST,
        args=["--no-leader-elect"],
    )
    try:
        nodes = _create_nodes(api)
        ready = [n for n in nodes if "-notready-" not in n]
        eventually(
            lambda: all(_untainted_ready(api, n) for n in ready),
            timeout=SETTLE,
            what="kwok to make the managed nodes Ready",
        )
        # The node lifecycle controller taints a node that never reported Ready; until then
        # kube-scheduler may bind to it (the status counts it NotReady from the start).
        eventually(
            lambda: all(_lifecycle_tainted(api, n) for n in nodes if n not in ready),
            timeout=SETTLE,
            what="the NotReady nodes tainted by the node lifecycle controller",
        )
        eventually(process.ready, timeout=60, what="reconciler /readyz")
        yield World(api, process, nodes)
    finally:
        process.stop()
        remove_labelled(api, MINE, CLEANED)
        for name in nodes:
            force_delete(api, node_path(name))
        force_delete(api, f"{GPUCLASSES}/{CLASS}")
        api.request("DELETE", f"/api/v1/namespaces/{NS}")


def _untainted_ready(api: Api, name: str) -> bool:
    node = api.get("v1", "Node", name)
    taints = {t["key"] for t in ((node or {}).get("spec") or {}).get("taints") or []}
    return node_ready(node) and "node.kubernetes.io/not-ready" not in taints


def _lifecycle_tainted(api: Api, name: str) -> bool:
    """The node lifecycle controller has marked the node: Ready=Unknown and the `unreachable`
    NoSchedule taint. (The `not-ready` taint the API server puts on a new Node is not enough:
    the controller takes it off again while the node has no Ready condition at all, and
    kube-scheduler may bind to it until the grace period ends.)"""
    node = api.get("v1", "Node", name)
    taints = ((node or {}).get("spec") or {}).get("taints") or []
    conditions = ((node or {}).get("status") or {}).get("conditions") or []
    unknown = any(c.get("type") == "Ready" and c.get("status") == "Unknown" for c in conditions)
    return unknown and any(
        t["key"] == "node.kubernetes.io/unreachable" and t["effect"] == "NoSchedule" for t in taints
    )


def _probe(world: World, gpus: int) -> str:
    world.probes += 1
    name = f"probe-{world.probes}"
    vmi: RawObject = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": name, "namespace": NS, "labels": {MINE[0]: MINE[1]}},
        "spec": {
            "domain": {
                "devices": {
                    "disks": [{"name": "root", "disk": {"bus": "virtio"}}],
                    "gpus": [{"name": f"gpu{i}", "deviceName": RESOURCE} for i in range(gpus)],
                },
                "memory": {"guest": "1Gi"},
            },
            "volumes": [{"name": "root", "emptyDisk": {"capacity": "1Gi"}}],
        },
    }
    world.api.create(vmi)
    return name


def _verdicts(world: World) -> dict[str, bool | None]:
    """Each probe VMI's launcher: True once bound, False once Unschedulable, None before."""
    listed = world.api.call(
        "GET", f"/api/v1/namespaces/{NS}/pods", params={"labelSelector": f"{MINE[0]}={MINE[1]}"}
    )
    found: dict[str, bool | None] = {}
    for pod in listed.get("items") or []:
        vmi = (pod["metadata"].get("annotations") or {}).get("kubevirt.io/domain") or ""
        found[vmi] = pod_scheduled(pod)
    return found


def _bound(world: World, names: Sequence[str]) -> int:
    """How many of the probes' launchers kube-scheduler binds within BIND_WAIT."""
    deadline = time.monotonic() + BIND_WAIT
    while True:
        verdicts = _verdicts(world)
        bound = sum(verdicts.get(n) is True for n in names)
        if bound == len(names) or time.monotonic() > deadline:
            return bound
        time.sleep(0.2)


def _placed(world: World, name: str) -> str:
    """Where the probe's launcher was bound (for the failure message)."""
    return str(_launcher_of(world, name)["spec"].get("nodeName"))


def _refused(world: World, name: str) -> bool:
    verdict = eventually(
        lambda: (v,) if (v := _verdicts(world).get(name)) is not None else None,
        timeout=30,
        what=f"the scheduler's verdict on {name}'s launcher",
        every=0.2,
    )[0]
    if verdict:
        return False
    time.sleep(1.0)
    return _verdicts(world).get(name) is False


def _clear(world: World) -> None:
    remove_labelled(world.api, MINE, CLEANED)
    eventually(
        lambda: (
            not world.api.call(
                "GET",
                f"/api/v1/namespaces/{NS}/pods",
                params={"labelSelector": f"{MINE[0]}={MINE[1]}"},
            ).get("items")
        ),
        timeout=30,
        what="the probes gone",
    )


def _check(world: World) -> tuple[list[str], tuple[int, int, int], int]:
    """What kube-scheduler does with KubeVirt's launchers against the status: (problems,
    figures, launchers bound)."""
    [(free, max_free, units)] = settled_figures(world.api, [CLASS], quiet=QUIET, timeout=SETTLE)
    problems: list[str] = []
    bound = 0
    if not _refused(world, name := _probe(world, max_free + 1)):
        problems.append(
            f"a launcher of maxFreePerNode+1={max_free + 1} GPUs was bound on "
            + _placed(world, name)
        )
    _clear(world)
    if max_free:
        one = _bound(world, [_probe(world, max_free)])
        bound += one
        if one != 1:
            problems.append(f"a launcher of maxFreePerNode={max_free} GPUs was not bound")
        _clear(world)
    ones = _bound(world, [_probe(world, 1) for _ in range(free)])
    bound += ones
    if ones != free:
        problems.append(f"only {ones} of free={free} one-GPU launchers were bound")
    if not _refused(world, name := _probe(world, 1)):
        problems.append(
            f"one-GPU launcher number free+1={free + 1} was bound on " + _placed(world, name)
        )
    _clear(world)
    return problems, (free, max_free, units), bound


def _relabel(api: Api, name: str, value: str | None) -> None:
    body = {"metadata": {"labels": {SCHEDULABLE: value}}}
    api.call("PATCH", node_path(name), body=body, content_type=MERGE)


@pytest.mark.timeout(420)
def test_status_counts_what_kubevirts_launchers_get_from_kube_scheduler(world: World) -> None:
    api = world.api
    problems, seen, bound = _check(world)
    # The healthy nodes only (docs/contract.md 6.1): 2+1+1+1+1+1 free, 2 on one node; the
    # largest host that is a KubeVirt node: 4 (the 8 has no virt-handler).
    assert seen == (7, 2, 4), seen
    assert not problems, f"before churn, status {seen}: " + "; ".join(problems)
    assert bound == 1 + 7

    # Churn: virt-handler goes stale on one healthy node, a kvm device comes back, a tun
    # device goes, virt-handler arrives on the 8-unit node.
    _relabel(api, node_name("healthy", 0), "false")
    set_allocatable(api, node_name("nokvm", 0), {RESOURCE: 4, "ephemeral-storage": "100Gi"})
    set_allocatable(
        api, node_name("healthy", 1), {RESOURCE: 1, "ephemeral-storage": "100Gi", TUN: 0}
    )
    _relabel(api, node_name("nohandler", 0), "true")
    eventually(
        # healthy-2..5, nokvm-0 and nohandler-0: the 8-unit node is now the largest of all
        lambda: figures(get_class(api, CLASS)) == (4 + 4 + 8, 8, 8),
        timeout=SETTLE,
        what="the status to follow the node changes",
    )
    problems, seen, bound = _check(world)
    assert not problems, f"after churn, status {seen}: " + "; ".join(problems)
    assert bound == 1 + 16

    # And back: every figure returns.
    _relabel(api, node_name("healthy", 0), "true")
    _relabel(api, node_name("nohandler", 0), None)
    eventually(
        # healthy-0 again, healthy-2..5 and nokvm-0; healthy-1 still has no tun
        lambda: figures(get_class(api, CLASS)) == (2 + 4 + 4, 4, 4),
        timeout=SETTLE,
        what="the status to follow the labels back",
    )
    assert world.reconciler.alive


def test_a_node_label_kubevirt_does_not_read_changes_no_status(world: World) -> None:
    """Only virt-handler's label moves the figures: a zone label written on every node leaves
    the status (and its resourceVersion) as it was."""
    api = world.api
    before = get_class(api, CLASS)
    assert before is not None and figures(before) is not None
    for name in world.nodes:
        api.call(
            "PATCH",
            node_path(name),
            body={"metadata": {"labels": {"topology.kubernetes.io/zone": "z1"}}},
            content_type=MERGE,
        )
    time.sleep(2.0)  # several coalescing windows of the FAST timings
    after = get_class(api, CLASS)
    assert after is not None
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


# -- the rendering and the quota, against KubeVirt's and the API server's own --------------------

RENDERED = {
    "one-vcpu-guest-memory": {"domain": {"memory": {"guest": "1Gi"}}},
    "cores-request-and-gpus": {
        "domain": {
            "cpu": {"cores": 4},
            "resources": {"requests": {"memory": "3Gi"}},
            "devices": {"gpus": [{"name": "g1", "deviceName": RESOURCE}] * 1},
        }
    },
    "sockets-limits-two-gpus": {
        "domain": {
            "cpu": {"sockets": 2, "threads": 2},
            "resources": {"requests": {"cpu": "1500m", "memory": "2Gi"}},
            "memory": {"guest": "2Gi"},
            "devices": {
                "autoattachGraphicsDevice": False,
                "gpus": [
                    {"name": "g1", "deviceName": RESOURCE},
                    {"name": "g2", "deviceName": RESOURCE},
                ],
            },
        }
    },
    "no-console-log-no-pod-interface": {
        "domain": {
            "memory": {"guest": "512Mi"},
            "devices": {"logSerialConsole": False, "autoattachPodInterface": False},
        }
    },
}


def _pod_requests(pod: RawObject) -> dict[str, int]:
    """Kubernetes' rule for what a Pod holds, restated for CPU (millicores) and memory (bytes):
    its containers and sidecars (init containers that restart) together, or its largest plain init
    container, whichever is more."""
    from decimal import Decimal

    from gpuclass.shared.core.base.k8s import parse_quantity

    def read(container: RawObject) -> dict[str, Decimal]:
        requests = (container.get("resources") or {}).get("requests") or {}
        return {k: parse_quantity(str(v)) for k, v in requests.items() if k in ("cpu", "memory")}

    total: dict[str, Decimal] = {}
    peak: dict[str, Decimal] = {}
    for container in pod["spec"]["containers"]:
        for k, v in read(container).items():
            total[k] = total.get(k, Decimal(0)) + v
    for container in pod["spec"].get("initContainers") or []:
        for k, v in read(container).items():
            if container.get("restartPolicy") == "Always":
                total[k] = total.get(k, Decimal(0)) + v
            else:
                peak[k] = max(peak.get(k, Decimal(0)), v)
    merged = {k: max(total.get(k, Decimal(0)), peak.get(k, Decimal(0))) for k in ("cpu", "memory")}
    return {"cpu": int(merged["cpu"] * 1000), "memory": int(merged["memory"])}


def _launcher_of(world: World, name: str) -> RawObject:
    def found() -> RawObject | None:
        listed = world.api.call("GET", f"/api/v1/namespaces/{NS}/pods")
        for pod in listed.get("items") or []:
            if (pod["metadata"].get("annotations") or {}).get("kubevirt.io/domain") == name:
                return pod
        return None

    pod: RawObject = eventually(found, timeout=30, what=f"{name}'s launcher Pod")
    return pod


@pytest.mark.parametrize("case", sorted(RENDERED))
def test_the_launcher_we_render_is_the_one_kubevirt_renders(world: World, case: str) -> None:
    from gpuclass.shared.core.model.kubevirt import read_kubevirt
    from gpuclass.shared.core.model.launcher import launcher_ask

    api = world.api
    spec: RawObject = {
        "domain": {"devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]}},
        "volumes": [{"name": "root", "emptyDisk": {"capacity": "1Gi"}}],
    }
    for key, value in RENDERED[case]["domain"].items():
        spec["domain"][key] = {**spec["domain"][key], **value} if key == "devices" else value
    world.probes += 1
    name = f"render-{world.probes}"
    vmi = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": name, "namespace": NS, "labels": {MINE[0]: MINE[1]}},
        "spec": spec,
    }
    api.create(vmi)  # the tenant's manifest, before KubeVirt's defaults
    pod = _launcher_of(world, name)
    crs = api.call("GET", "/apis/kubevirt.io/v1/namespaces/cozy-kubevirt/kubevirts")["items"]
    ask = launcher_ask(vmi, read_kubevirt(crs))
    compute = next(c for c in pod["spec"]["containers"] if c["name"] == "compute")
    devices = {
        k: int(v)
        for k, v in compute["resources"]["requests"].items()
        if k not in ("cpu", "memory", "ephemeral-storage")
    }
    assert {"cpu": ask.cpu_millis, "memory": ask.memory} == _pod_requests(pod)
    assert dict(ask.devices) == devices
    assert dict(ask.node_selector) == pod["spec"]["nodeSelector"]
    _clear(world)


@pytest.fixture(scope="module")
def quota_controller(control_plane: ControlPlane) -> Iterator[Component]:
    """kube-controller-manager running only the resource quota controller (it writes a quota's
    `status.hard` and `status.used`; until then the API server refuses Pods under the quota)."""
    from tests.controlplane import components

    with components.controller_manager(
        control_plane,
        controllers=("resourcequota-controller",),
        roles=("system:controller:resourcequota-controller",),
    ) as process:
        yield process


def test_the_quota_explain_reports_is_the_one_the_api_server_enforces(
    world: World, control_plane: ControlPlane, quota_controller: Component, tmp_path: Any
) -> None:
    """A ResourceQuota of 2 units: a 2-GPU VM's launcher is created and bound; then `gpuclass
    explain` (live) says quota stops a 1-GPU VM, and the API server refuses that VM's launcher
    Pod (KubeVirt's rendering, created dry-run) for exceeding the quota."""
    import json
    import subprocess
    import sys

    import yaml

    api = world.api
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpus", "namespace": NS},
        "spec": {"hard": {f"requests.{RESOURCE}": "2"}},
    }
    api.create(quota)
    try:
        eventually(
            lambda: (
                (api.get("v1", "ResourceQuota", "gpus", namespace=NS) or {})
                .get("status", {})
                .get("hard")
            ),
            timeout=30,
            what="the quota controller to take the quota up",
        )
        first = _probe(world, 2)
        assert _bound(world, [first]) == 1
        eventually(
            lambda: (
                (api.get("v1", "ResourceQuota", "gpus", namespace=NS) or {})
                .get("status", {})
                .get("used", {})
                .get(f"requests.{RESOURCE}")
                == "2"
            ),
            timeout=30,
            what="the quota to count the launcher",
        )
        manifest = tmp_path / "vm.yaml"
        manifest.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kubevirt.io/v1",
                    "kind": "VirtualMachineInstance",
                    "metadata": {
                        "name": "wants-one",
                        "namespace": NS,
                        "annotations": {
                            "gpu.cozystack.io/classes": json.dumps([{"className": CLASS}])
                        },
                    },
                    "spec": {"domain": {"devices": {}, "memory": {"guest": "1Gi"}}},
                }
            )
        )
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "gpuclass.shared.cli.main",
                "explain",
                "--manifest",
                str(manifest),
                "--kubeconfig",
                str(control_plane.admin_kubeconfig),
                "-o",
                "json",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        answer = json.loads(done.stdout)
        assert done.returncode == 1, done.stderr
        assert answer["stoppedBy"] == "quota", answer["answer"]
        (line,) = [q for q in answer["launcher"]["quota"] if q["key"] == f"requests.{RESOURCE}"]
        assert (line["hard"], line["used"], line["wanted"], line["enough"]) == (
            "2",
            "2",
            "1",
            False,
        )
        # The API server's own verdict on KubeVirt's launcher for one more GPU.
        template = _launcher_of(world, first)
        second = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "second-launcher", "namespace": NS},
            "spec": {k: v for k, v in template["spec"].items() if k not in ("nodeName",)},
        }
        for container in second["spec"]["containers"]:
            for part in ("requests", "limits"):
                amounts = (container.get("resources") or {}).get(part) or {}
                if RESOURCE in amounts:
                    amounts[RESOURCE] = "1"
        refused = api.request(
            "POST", f"/api/v1/namespaces/{NS}/pods", body=second, params={"dryRun": "All"}
        )
        assert refused.status_code == 403, refused.text
        assert "exceeded quota: gpus" in refused.text
    finally:
        api.request("DELETE", f"/api/v1/namespaces/{NS}/resourcequotas/gpus")
        _clear(world)
