"""Our webhook and KubeVirt's own code, side by side on a real API server.

`kubevirt-parts` (tests/controlplane/kubevirt_parts.py) serves virt-api's admission webhooks
for VMIs, VMs and launcher Pods, registered with virt-operator's own configurations, and
renders launcher Pods with virt-controller's TemplateService, created as virt-controller's
ServiceAccount. Our webhook runs from the golden fixtures' world (`--objects`, the files
tests/test_golden.py answers from) behind the chart's own webhook configurations. The
KubeVirt CR that configures KubeVirt permits what those files permit.

So each VMI below goes through our mutation, KubeVirt's mutation (which replaces the
whole spec with its defaults, after ours: our hook is then reinvoked) and KubeVirt's
validation; its launcher Pod is KubeVirt's rendering of the stored VMI, and then passes
our Pod mutation. Expected values come from the contract (docs/contract.md sections 1, 3,
4.6) and from the class files, never from our code.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from tests.builders import ANN, selecting_vm
from tests.chart_helpers import chart_webhook_configurations
from tests.conftest import NOT_KUBEVIRT, OBJECTS, GoldenCase, golden_cases
from tests.controlplane.api import Api, ApiError, RawObject
from tests.controlplane.cluster import ControlPlane, eventually, unique_name
from tests.controlplane.components import (
    Component,
    kwok_node,
    node_ready,
    set_allocatable,
)
from tests.controlplane.kubevirt_parts import golden_objects, install_kubevirt_cr, remove_labelled
from tests.controlplane.plugin import KUBEVIRT_CR, KUBEVIRT_NAMESPACE
from tests.webhook_process import WebhookProcess

pytestmark = pytest.mark.controlplane

LICENSE_PREFIX = "gpuclass-license-"
# Every VMI, VM and migration this module creates carries this label (KubeVirt copies a VMI's
# labels to its launcher Pods), so the module removes all of them when it ends: no other
# module's reconciler ever sees them.
MINE = ("gpuclass-tests/module", "e2e-kubevirt")
CLEANED = (
    "/apis/kubevirt.io/v1/virtualmachineinstancemigrations",
    "/apis/kubevirt.io/v1/virtualmachines",
    "/apis/kubevirt.io/v1/virtualmachineinstances",
    "/api/v1/pods",
)
CREATED_BY = "kubevirt.io/created-by"
MIGRATION_JOB = "kubevirt.io/migrationJobUID"
# A class only the toleration test uses, in a file of its own that the test rewrites.
MOVING = "e2e-moving-gpu"
MOVING_RESOURCE = "example.com/moving-gpu"
BEFORE = {
    "key": "gpu.example.com/moving",
    "operator": "Equal",
    "value": "old",
    "effect": "NoSchedule",
}
AFTER = {
    "key": "gpu.example.com/moving",
    "operator": "Equal",
    "value": "new",
    "effect": "NoSchedule",
}


GOLDEN_OBJECTS = golden_objects(OBJECTS)
CLASSES = {o["metadata"]["name"]: o["spec"] for o in GOLDEN_OBJECTS if o.get("kind") == "GPUClass"}


def _moving_objects(toleration: RawObject) -> list[RawObject]:
    return [
        {
            "apiVersion": "cozystack.io/v1alpha1",
            "kind": "GPUClass",
            "metadata": {"name": MOVING},
            "spec": {
                "vendor": "example",
                "model": "moving",
                "mode": "passthrough",
                "source": {"devicePlugin": {"resourceName": MOVING_RESOURCE}},
                "tolerations": [toleration],
            },
        },
        # KubeVirt reads one deployed CR: this one takes the fixture world's place (the same
        # namespace and name, in a file read after theirs) and permits the moving class too.
        {
            "apiVersion": "kubevirt.io/v1",
            "kind": "KubeVirt",
            "metadata": {"name": "kubevirt", "namespace": "cozy-kubevirt"},
            "spec": {"configuration": _permitted_union(GOLDEN_OBJECTS, MOVING_DEVICE)},
            "status": {"phase": "Deployed"},
        },
    ]


MOVING_DEVICE = {"pciVendorSelector": "10DE:0009", "resourceName": MOVING_RESOURCE}


def _permitted_union(objects: list[RawObject], *pci: RawObject) -> RawObject:
    """One KubeVirt configuration permitting every device the files' KubeVirt CRs permit, and
    the PCI devices `pci`."""
    union: dict[str, list[RawObject]] = {"pciHostDevices": list(pci), "mediatedDevices": []}
    for obj in objects:
        if obj.get("kind") != "KubeVirt":
            continue
        permitted = obj["spec"]["configuration"].get("permittedHostDevices") or {}
        for key, entries in union.items():
            entries += [e for e in permitted.get(key) or [] if e not in entries]
    return {"permittedHostDevices": union}


def _mine(obj: RawObject) -> RawObject:
    labels = obj["metadata"].setdefault("labels", {})
    labels[MINE[0]] = MINE[1]
    return obj


@pytest.fixture(scope="module")
def kubevirt_configuration() -> dict[str, Any]:
    """No feature gates at all: what KubeVirt needs for a GPU VMI shows as a refusal."""
    return _permitted_union(GOLDEN_OBJECTS + _moving_objects(BEFORE))


@dataclass
class Cluster:
    api: Api
    webhook: WebhookProcess
    moving_file: Path


@pytest.fixture(scope="module")
def cluster(
    control_plane: ControlPlane,
    kubevirt_parts: Component,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Cluster]:
    api = control_plane.admin
    namespaces = [o for o in GOLDEN_OBJECTS if o.get("kind") == "Namespace"]
    api.apply([{k: o[k] for k in ("apiVersion", "kind", "metadata")} for o in namespaces])
    moving = tmp_path_factory.mktemp("moving-class") / "moving.yaml"
    moving.write_text(yaml.safe_dump_all(_moving_objects(BEFORE)))
    arguments = [a for path in [*OBJECTS, str(moving)] for a in ("--objects", path)]
    webhook = WebhookProcess(
        [*arguments, "--vgpu-entitled", "--objects-poll-seconds", "0.5"],
        tls_dir=tmp_path_factory.mktemp("kubevirt-e2e-tls"),
    )
    configurations = chart_webhook_configurations(webhook.url, Path(webhook.ca).read_bytes())
    try:
        api.apply(configurations)
        eventually(lambda: _both_mutate(api), timeout=30, what="our webhook and KubeVirt's")
        yield Cluster(api, webhook, moving)
    finally:
        for configuration in configurations:
            api.delete(configuration)
        webhook.stop()
        remove_labelled(api, MINE, CLEANED)


def _probe(namespace: str, annotation: list[RawObject] | None) -> RawObject:
    meta: RawObject = {"name": unique_name("probe"), "namespace": namespace}
    if annotation is not None:
        meta["annotations"] = {ANN: json.dumps(annotation)}
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": meta,
        "spec": {
            "domain": {
                "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]},
                "memory": {"guest": "1Gi"},
            },
            "volumes": [{"name": "root", "emptyDisk": {"capacity": "1Gi"}}],
        },
    }


def _both_mutate(api: Api) -> bool:
    try:
        stored = api.create(_probe("tenant-a", [{"className": "example-whole-gpu"}]), dryRun="All")
    except ApiError:
        return False
    return bool(stored["spec"]["domain"]["devices"].get("gpus")) and _kubevirt_mutated(stored)


def _kubevirt_mutated(stored: RawObject) -> bool:
    """KubeVirt's VMI mutator was in the chain: it alone sets the phase and its finalizer."""
    return (stored.get("status") or {}).get("phase") == "Pending" and (
        "kubevirt.io/foregroundDeleteVirtualMachine" in stored["metadata"].get("finalizers", [])
    )


def _launcher_pods(api: Api, vmi: RawObject) -> list[RawObject]:
    namespace, uid = vmi["metadata"]["namespace"], vmi["metadata"]["uid"]
    listed = api.call(
        "GET",
        f"/api/v1/namespaces/{namespace}/pods",
        params={"labelSelector": f"{CREATED_BY}={uid}"},
    )
    return list(listed.get("items") or [])


def _launcher_pod(api: Api, vmi: RawObject) -> RawObject:
    pods: list[RawObject] = eventually(
        lambda: _launcher_pods(api, vmi) or None,
        timeout=30,
        what=f"the launcher Pod of {vmi['metadata']['name']}",
    )
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    return pods[0]


def _compute(pod: RawObject) -> RawObject:
    return next(c for c in pod["spec"]["containers"] if c["name"] == "compute")


def _selection(obj: RawObject) -> list[RawObject]:
    text = (obj["metadata"].get("annotations") or {}).get(ANN)
    parsed = json.loads(text) if text else []
    return [e for e in parsed if isinstance(e, dict) and "className" in e]


def _units_by_resource(selection: list[RawObject]) -> dict[str, int]:
    units: dict[str, int] = {}
    for entry in selection:
        resource = CLASSES[entry["className"]]["source"]["devicePlugin"]["resourceName"]
        units[resource] = units.get(resource, 0) + int(entry.get("count", 1))
    return units


def _class_resources() -> set[str]:
    return {spec["source"]["devicePlugin"]["resourceName"] for spec in CLASSES.values()}


def _license_volumes(pod: RawObject) -> list[RawObject]:
    return [
        v
        for v in pod["spec"].get("volumes", [])
        if (v.get("secret") or {}).get("secretName", "").startswith(LICENSE_PREFIX)
    ]


def _allowed_vmi_creates() -> list[GoldenCase]:
    cases = []
    for case in golden_cases():
        request = case.request["request"]
        if (
            request["kind"]["kind"] == "VirtualMachineInstance"
            and request["operation"] == "CREATE"
            and case.expected()["response"]["allowed"]
        ):
            cases.append(case)
    return cases


ALLOWED = _allowed_vmi_creates()
# A raw `hostDevices` entry (allowed by rule 4.5 for an entitled tenant) needs KubeVirt's
# HostDevices feature gate; class selections write `gpus` only and need none.
NEEDS_HOST_DEVICES_GATE = "vmi-4.5-raw-unclassed-mdev-entitled"
REAL = [c for c in ALLOWED if c.name not in NOT_KUBEVIRT and c.name != NEEDS_HOST_DEVICES_GATE]


def test_the_cases_left_out_are_the_ones_kubevirt_could_never_receive() -> None:
    allowed = {c.name for c in ALLOWED}
    left_out = allowed - {c.name for c in REAL}
    # NOT_KUBEVIRT also holds refused cases (not in ALLOWED): only its allowed ones are left out.
    assert left_out == (set(NOT_KUBEVIRT) & allowed) | {NEEDS_HOST_DEVICES_GATE}
    assert all(c.vgpu_entitled for c in ALLOWED), "our webhook runs with --vgpu-entitled"
    assert len(REAL) >= 15


@pytest.mark.parametrize("case", REAL, ids=[c.name for c in REAL])
def test_golden_vmi_is_admitted_by_kubevirt_and_rendered_as_the_class_says(
    cluster: Cluster, case: GoldenCase
) -> None:
    vmi = copy.deepcopy(case.request["request"]["object"])
    vmi["metadata"]["name"] = unique_name(case.name[:40])
    stored = cluster.api.create(_mine(vmi))  # our mutation, KubeVirt's mutation and validation
    assert _kubevirt_mutated(stored)

    # KubeVirt's defaulting kept what our patch wrote (or our reinvocation would refuse).
    operations = (
        json.loads((case.folder / "patch.json").read_text())
        if (case.folder / "patch.json").exists()
        else []
    )
    ours = jsonpatch.apply_patch(case.request["request"]["object"], operations)
    assert stored["spec"]["domain"]["devices"].get("gpus") == ours["spec"]["domain"]["devices"].get(
        "gpus"
    )
    for toleration in ours["spec"].get("tolerations", []):
        assert toleration in stored["spec"]["tolerations"]

    pod = _launcher_pod(cluster.api, stored)
    compute = _compute(pod)
    selection = _selection(vmi)
    resources = compute["resources"]
    if selection:
        expected = {r: str(n) for r, n in _units_by_resource(selection).items()}
        for kind in ("requests", "limits"):
            requested = {k: v for k, v in resources[kind].items() if k in _class_resources()}
            assert requested == expected, kind
        for entry in selection:
            for toleration in CLASSES[entry["className"]].get("tolerations", []):
                assert toleration in pod["spec"]["tolerations"]
        assert pod["metadata"]["annotations"][ANN] == vmi["metadata"]["annotations"][ANN]

    licensed = sorted({e["className"] for e in selection if "license" in CLASSES[e["className"]]})
    volumes = _license_volumes(pod)
    assert [v["secret"]["secretName"] for v in volumes] == [LICENSE_PREFIX + c for c in licensed]
    mounted = {m["name"] for m in compute.get("volumeMounts", [])}
    assert all(v["name"] in mounted for v in volumes)


def test_a_class_toleration_changed_after_the_vmi_reaches_the_next_launcher_pod(
    cluster: Cluster,
) -> None:
    api = cluster.api
    vmi = api.create(_mine(_probe("tenant-a", [{"className": MOVING}])))
    first = _launcher_pod(api, vmi)
    assert BEFORE in first["spec"]["tolerations"]
    assert AFTER not in first["spec"]["tolerations"]

    cluster.moving_file.write_text(yaml.safe_dump_all(_moving_objects(AFTER)))

    def webhook_sees_the_change() -> bool:
        probe = api.create(_probe("tenant-a", [{"className": MOVING}]), dryRun="All")
        return AFTER in probe["spec"].get("tolerations", [])

    eventually(webhook_sees_the_change, timeout=30, what="our webhook to re-read the class")

    # The next launcher Pod of the same VMI: a migration target, rendered by KubeVirt from
    # the VMI (which still carries the old toleration), then mutated by us.
    migration = api.create(
        _mine(
            {
                "apiVersion": "kubevirt.io/v1",
                "kind": "VirtualMachineInstanceMigration",
                "metadata": {"name": unique_name("move"), "namespace": "tenant-a"},
                "spec": {"vmiName": vmi["metadata"]["name"]},
            }
        )
    )
    uid = migration["metadata"]["uid"]

    def target() -> RawObject | None:
        listed = api.call(
            "GET",
            "/api/v1/namespaces/tenant-a/pods",
            params={"labelSelector": f"{MIGRATION_JOB}={uid}"},
        )
        items = listed.get("items") or []
        return items[0] if items else None

    pod = eventually(target, timeout=30, what="the migration target Pod")
    assert AFTER in pod["spec"]["tolerations"]
    assert BEFORE in pod["spec"]["tolerations"]  # KubeVirt's copy of the VMI's own
    current = api.get(
        "kubevirt.io/v1", "VirtualMachineInstance", vmi["metadata"]["name"], namespace="tenant-a"
    )
    assert current is not None and current["spec"]["tolerations"] == [BEFORE]
    assert pod["metadata"]["annotations"][ANN] == vmi["metadata"]["annotations"][ANN]
    assert _compute(pod)["resources"]["limits"][MOVING_RESOURCE] == "1"


def test_kubevirt_refuses_to_render_a_gpu_missing_from_permitted_host_devices(
    cluster: Cluster,
) -> None:
    """KubeVirt checks permittedHostDevices when it renders the Pod, not at admission: a raw
    GPU entry no class names (which our webhook leaves alone) is admitted, then never gets a
    Pod. Rule 4.3 refuses a class in that state at admission, before KubeVirt would."""
    api = cluster.api
    vmi = _probe("tenant-c", None)
    vmi["spec"]["domain"]["devices"]["gpus"] = [
        {"name": "gpu1", "deviceName": "example.com/nobody-permits-this"}
    ]
    stored = api.create(_mine(vmi))

    def refusal() -> RawObject | None:
        listed = api.call(
            "GET",
            "/api/v1/namespaces/tenant-c/events",
            params={"fieldSelector": f"involvedObject.uid={stored['metadata']['uid']}"},
        )
        return next((e for e in listed.get("items") or [] if e["reason"] == "FailedCreate"), None)

    event = eventually(refusal, timeout=30, what="KubeVirt's FailedCreate event")
    assert "is not permitted in permittedHostDevices configuration" in event["message"]
    assert _launcher_pods(api, stored) == []


def test_a_raw_host_device_needs_kubevirts_host_devices_feature_gate(
    cluster: Cluster, kubevirt_configuration: dict[str, Any]
) -> None:
    """The one allowed golden VMI KubeVirt refuses with no feature gate: it asks for a vGPU as
    a raw `hostDevices` entry. With the HostDevices gate on, KubeVirt admits and renders it."""
    api = cluster.api
    case = next(c for c in ALLOWED if c.name == NEEDS_HOST_DEVICES_GATE)
    vmi = _mine(copy.deepcopy(case.request["request"]["object"]))
    vmi["metadata"]["name"] = unique_name("raw-hostdevice")
    with pytest.raises(ApiError) as refused:
        api.create(vmi)
    assert refused.value.status_code == 422
    assert "Host Devices feature gate is not enabled" in str(refused.value)

    gated = {**kubevirt_configuration, "developerConfiguration": {"featureGates": ["HostDevices"]}}
    install_kubevirt_cr(api, KUBEVIRT_NAMESPACE, KUBEVIRT_CR, gated)
    try:

        def admitted() -> RawObject | None:
            try:
                return api.create(vmi)
            except ApiError as exc:
                if "feature gate" in str(exc):
                    return None  # KubeVirt has not read the CR yet
                raise

        stored = eventually(admitted, timeout=30, what="KubeVirt to read the feature gate")
        device = vmi["spec"]["domain"]["devices"]["hostDevices"][0]["deviceName"]
        assert _compute(_launcher_pod(api, stored))["resources"]["limits"][device] == "1"
    finally:
        install_kubevirt_cr(api, KUBEVIRT_NAMESPACE, KUBEVIRT_CR, kubevirt_configuration)


ALLOWED_VMS = [
    c
    for c in golden_cases()
    if c.request["request"]["kind"]["kind"] == "VirtualMachine"
    and c.request["request"]["operation"] == "CREATE"
    and c.expected()["response"]["allowed"]
]


# Whether the VMI KubeVirt starts from each VM passes our VMI webhook: the VM webhook only
# warns at apply (rule 4.10), the VMI webhook decides at each start (rule 4.3 refuses a class
# that is missing, deleting or not permitted; a capacity shortage only warns, rule 4.7).
STARTS = {
    "vm-4.10-capacity-warns": True,
    "vm-4.10-class-deleting-warns": False,
    "vm-4.10-class-not-found-warns": False,
    "vm-4.10-no-selection-allowed": True,
    "vm-4.10-resource-not-permitted-warns": False,
    "vm-4.10-valid-selection-allowed-unpatched": True,
}


def test_every_allowed_golden_vm_has_its_start_verdict() -> None:
    assert {c.name for c in ALLOWED_VMS} == set(STARTS)


def _vm_events(api: Api, vm: RawObject) -> list[RawObject]:
    namespace, uid = vm["metadata"]["namespace"], vm["metadata"]["uid"]
    listed = api.call(
        "GET",
        f"/api/v1/namespaces/{namespace}/events",
        params={"fieldSelector": f"involvedObject.uid={uid}"},
    )
    return list(listed.get("items") or [])


@pytest.mark.parametrize("case", ALLOWED_VMS, ids=[c.name for c in ALLOWED_VMS])
def test_golden_vm_is_admitted_by_kubevirt_and_started_through_our_vmi_webhook(
    cluster: Cluster, case: GoldenCase
) -> None:
    api = cluster.api
    vm = copy.deepcopy(case.request["request"]["object"])
    vm["metadata"]["name"] = unique_name(case.name[:40])
    template_meta = vm["spec"]["template"].setdefault("metadata", {})
    template_meta.setdefault("labels", {})[MINE[0]] = MINE[1]
    stored = api.create(_mine(vm))  # KubeVirt's VM mutation and validation, then ours
    template = stored["spec"]["template"]
    assert template["spec"]["domain"]["firmware"]["uuid"]  # KubeVirt's VM mutator set it
    assert template["metadata"].get("annotations", {}).get(ANN) == template_meta.get(
        "annotations", {}
    ).get(ANN)

    # runStrategy Always: KubeVirt's VM controller code builds the VMI and creates it.
    event = eventually(
        lambda: next((e for e in _vm_events(api, stored) if "Create" in e["reason"]), None),
        timeout=30,
        what="the start of the VM",
    )
    if STARTS[case.name]:
        assert event["reason"] == "SuccessfulCreate", event["message"]
    else:
        assert event["reason"] == "FailedCreate"
        assert "virtualmachineinstances.gpuclass.cozystack.io" in event["message"]


def test_a_started_vm_reaches_its_launcher_pod_through_kubevirts_vm_controller_code(
    cluster: Cluster,
) -> None:
    """Contract section 2: KubeVirt copies the template's metadata to the VMI, the VMI's
    annotations to the Pod. The VMI here is the one virt-controller's VM controller builds
    (SetupVMIFromVM), created as virt-controller; then every webhook acts on it."""
    api = cluster.api
    selection = [{"className": "example-licensed-vgpu"}]
    vm = selecting_vm("tenant-a", selection)
    vm["spec"]["runStrategy"] = "Always"
    vm["spec"]["template"]["metadata"]["labels"] = {MINE[0]: MINE[1]}
    stored_vm = api.create(_mine(vm))
    name = vm["metadata"]["name"]

    vmi = eventually(
        lambda: api.get("kubevirt.io/v1", "VirtualMachineInstance", name, namespace="tenant-a"),
        timeout=30,
        what="the VMI KubeVirt starts",
    )
    assert vmi["metadata"]["annotations"][ANN] == json.dumps(selection)
    owner = vmi["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"]) == ("VirtualMachine", stored_vm["metadata"]["uid"])
    resource = CLASSES["example-licensed-vgpu"]["source"]["devicePlugin"]["resourceName"]
    assert [g["deviceName"] for g in vmi["spec"]["domain"]["devices"]["gpus"]] == [resource]

    pod = _launcher_pod(api, vmi)
    assert pod["metadata"]["annotations"][ANN] == json.dumps(selection)
    assert _compute(pod)["resources"]["limits"][resource] == "1"
    copy_name = LICENSE_PREFIX + "example-licensed-vgpu"
    assert [v["secret"]["secretName"] for v in _license_volumes(pod)] == [copy_name]


# What virt-handler puts on a node KubeVirt may run VMs on (its labeller and device plugins),
# and the ephemeral storage a kubelet reports: KubeVirt's launcher Pod selects these labels
# and requests these devices and 50M of ephemeral storage.
VIRT_HANDLER_LABELS = {
    "kubevirt.io/schedulable": "true",
    "machine-type.node.kubevirt.io/q35": "true",
    "kubernetes.io/arch": "amd64",
}
VIRT_HANDLER_DEVICES = {
    "devices.kubevirt.io/kvm": 110,
    "devices.kubevirt.io/tun": 110,
    "devices.kubevirt.io/vhost-net": 110,
    "ephemeral-storage": "100Gi",
}


def _schedulable(api: Api, name: str) -> bool:
    current = api.get("v1", "Node", name)
    taints = {t["key"] for t in (current or {}).get("spec", {}).get("taints") or []}
    return node_ready(current) and not taints & {"node.kubernetes.io/not-ready"}


def _scheduling(api: Api, pod: RawObject) -> RawObject | None:
    """The Pod once the scheduler has decided: bound, or PodScheduled=False."""
    current = api.get("v1", "Pod", pod["metadata"]["name"], namespace=pod["metadata"]["namespace"])
    if current is None:
        return None
    if current["spec"].get("nodeName"):
        return current
    conditions = (current.get("status") or {}).get("conditions") or []
    if any(c["type"] == "PodScheduled" and c["status"] == "False" for c in conditions):
        return current
    return None


def test_kube_scheduler_places_kubevirts_launcher_pod_on_a_tainted_gpu_node_by_the_class(
    cluster: Cluster,
    kube_scheduler: Component,
    kwok_kubelet: Component,
    node_lifecycle_controller: Component,
) -> None:
    """A node that only the class's toleration admits, advertising the class's resource: the
    launcher Pod KubeVirt renders for a class selection lands there; the same GPU asked for as
    a raw entry (no class, so no toleration) does not. (The node lifecycle controller lifts the
    `not-ready` taint the API server puts on every new Node once kwok reports it Ready.)"""
    api = cluster.api
    whole = CLASSES["example-whole-gpu"]
    resource = whole["source"]["devicePlugin"]["resourceName"]
    taint = {k: v for k, v in whole["tolerations"][0].items() if k in ("key", "effect")}
    node = unique_name("kubevirt-gpu-node")
    # Only this test's VMIs select the node and tolerate its second taint: every other
    # pending launcher Pod (other tests' ones tolerate the class taint too) stays off it.
    pin = {"gpuclass-tests/node": node}
    fence = {"key": "gpuclass-tests/node", "value": node, "effect": "NoSchedule"}
    tenant_side = {"nodeSelector": dict(pin), "tolerations": [{**fence, "operator": "Equal"}]}
    api.create(kwok_node(node, {}, labels={**VIRT_HANDLER_LABELS, **pin}, taints=[taint, fence]))
    try:
        set_allocatable(api, node, {resource: 2, **VIRT_HANDLER_DEVICES})
        eventually(lambda: _schedulable(api, node), timeout=60, what="node Ready, untainted")

        raw = _probe("tenant-c", None)
        raw["spec"].update(copy.deepcopy(tenant_side))
        raw["spec"]["domain"]["devices"]["gpus"] = [{"name": "gpu1", "deviceName": resource}]
        raw_vmi = api.create(_mine(raw))
        refused = eventually(
            lambda: _scheduling(api, _launcher_pod(api, raw_vmi)),
            timeout=60,
            what="the scheduler's verdict on the raw request",
        )
        assert not refused["spec"].get("nodeName")
        message = next(
            c["message"] for c in refused["status"]["conditions"] if c["type"] == "PodScheduled"
        )
        assert "1 node(s) had untolerated taint" in message  # the pinned node: only its taint

        selected = _probe("tenant-a", [{"className": "example-whole-gpu", "count": 2}])
        selected["spec"].update(copy.deepcopy(tenant_side))
        vmi = api.create(_mine(selected))
        placed = eventually(
            lambda: _scheduling(api, _launcher_pod(api, vmi)),
            timeout=60,
            what="the scheduler's verdict on the class selection",
        )
        assert placed["spec"].get("nodeName") == node, json.dumps(placed["status"])
    finally:
        api.request("DELETE", f"/api/v1/nodes/{node}")
