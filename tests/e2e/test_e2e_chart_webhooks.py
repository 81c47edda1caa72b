"""The chart's own webhook configurations route a real kube-apiserver's traffic.

`charts/gpuclass/templates/webhook-configurations.yaml` is rendered by the real Helm
engine with default values; only each webhook's `clientConfig` is replaced, by the
URL of a local `gpuclass-webhook` and its CA. Everything else the API server acts on
is the chart's: rules, namespaceSelector, objectSelector, matchConditions,
failurePolicy, admissionReviewVersions, timeouts. The webhook runs in cluster mode
as its own identity: the chart's webhook ServiceAccount, with only the rights of
`templates/rbac-webhook.yaml` (applied for real), never as cluster admin.

What reached the webhook is read from its own log (one `admission` line per call,
with operation, kind, namespace and name), what the client saw from the API server's
answers. Assertions follow the contract's intent (section 3): every VMI CREATE and
every UPDATE that section 4 can refuse outside kube-system reaches the VMI hook;
launcher Pods reach the Pod hook only when KubeVirt's controller creates them; a
plain Pod that asks for a vGPU reaches the vGPU Pod hook (rule 4.5), other Pods never.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.builders import World, api_gpuclass, api_namespace
from tests.builders import selecting_vm as vm
from tests.builders import selecting_vmi as vmi
from tests.chart_helpers import (
    NAMESPACE,
    chart_webhook_configurations,
    documents,
    render,
    webhook_identity,
)
from tests.controlplane.api import Api, ApiError, RawObject
from tests.controlplane.cluster import ControlPlane, eventually, unique_name
from tests.e2e_reconciler_helpers import PermittedDevices
from tests.webhook_process import WebhookProcess

pytestmark = pytest.mark.controlplane

ANN = "gpu.cozystack.io/classes"
CONTROLLER = "system:serviceaccount:cozy-kubevirt:kubevirt-controller"
KUBEVIRT_NS = "cozy-kubevirt"
TENANT, UNLABELLED = "tenant-chartroute", "tenant-chartroute-nolabel"
GPUCLASSES = "/apis/cozystack.io/v1alpha1/gpuclasses"


def webhook_rbac() -> list[RawObject]:
    return documents(render(), template="rbac-webhook.yaml")


def vgpu_pod(ns: str, resources: dict[str, str] | None = None) -> RawObject:
    """A plain Pod, as a tenant writes it, asking for `resources` as limits."""
    container: dict[str, Any] = {"name": "cuda", "image": "example.org/cuda:1"}
    if resources:
        container["resources"] = {"limits": resources}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": unique_name("vgpu-pod"), "namespace": ns},
        "spec": {"containers": [container]},
    }


def launcher_pod(ns: str, selection: Any) -> RawObject:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": unique_name("virt-launcher"),
            "namespace": ns,
            "labels": {"kubevirt.io": "virt-launcher"},
            "annotations": {ANN: json.dumps(selection)},
        },
        "spec": {"containers": [{"name": "compute", "image": "example.org/virt-launcher:1"}]},
    }


class Routing:
    """A gpuclass-webhook as the chart's ServiceAccount, behind the chart's configurations."""

    def __init__(self, plane: ControlPlane, tmp: pytest.TempPathFactory, classes: World) -> None:
        self.plane = plane
        self.tmp = tmp
        self.classes = classes
        name, groups = webhook_identity()
        self.identity = plane.user(name, groups)
        self.server: WebhookProcess | None = None
        self.configurations: list[RawObject] = []
        # A mediated device KubeVirt permits that no class names: a vGPU all the same (4.5).
        self.mdev = classes.byol_resource.replace("/byol", "/unclassed-mdev")

    def start(self) -> None:
        self.server = WebhookProcess(
            ["--kubeconfig", str(self.identity.kubeconfig), "--vgpu-entitled"],
            tls_dir=self.tmp.mktemp("chart-route-tls"),
        )
        self.configurations = chart_webhook_configurations(
            self.server.url, Path(self.server.ca).read_bytes()
        )
        self.plane.admin.apply(self.configurations)
        eventually(self._resolves, timeout=30, what="chart webhooks registered, catalog synced")

    def _resolves(self) -> bool:
        try:
            stored = self.plane.admin.create(
                vmi(TENANT, [{"className": self.classes.whole}]), dryRun="All"
            )
        except ApiError:
            return False
        return bool(stored["spec"]["domain"]["devices"].get("gpus"))

    def stop_server(self) -> None:
        if self.server is not None:
            self.server.stop()

    def remove(self) -> None:
        for configuration in self.configurations:
            self.plane.admin.delete(configuration)
        self.configurations = []

    def calls(self, *, operation: str, kind: str, name: str) -> int:
        """How many admission calls the webhook logged for this object and operation.

        The log reaches the test through a reader thread, a moment after the answer reached
        the API server: the count is taken once it has held still for 0.3 s (at most 3 s).
        """
        assert self.server is not None
        server = self.server

        def count() -> int:
            return sum(
                1
                for e in server.logs()
                if e.get("msg") == "admission"
                and e.get("operation") == operation
                and e.get("kind") == kind
                and e.get("name") == name
            )

        seen, since, deadline = count(), time.monotonic(), time.monotonic() + 3
        while time.monotonic() < deadline and time.monotonic() - since < 0.3:
            time.sleep(0.05)
            now = count()
            if now != seen:
                seen, since = now, time.monotonic()
        return seen


@pytest.fixture(scope="module")
def routing(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Routing]:
    api = control_plane.admin
    classes = World()
    api.apply(
        [
            api_namespace(NAMESPACE),
            api_namespace(KUBEVIRT_NS),
            api_namespace(TENANT, {"gpu.cozystack.io/vgpu": "true"}),
            api_namespace(UNLABELLED),
        ]
    )
    api.apply(webhook_rbac())
    permitted = PermittedDevices()  # the one KubeVirt CR in cozy-kubevirt, as in a cluster
    permitted.permit(
        api, [classes.whole_resource, classes.byol_resource, classes.licensed_resource]
    )
    route = Routing(control_plane, tmp_path_factory, classes)
    permitted.permit(api, [route.mdev], mediated=True)
    created = [
        api.create(
            api_gpuclass(classes.whole, classes.whole_resource, tolerations=[classes.toleration])
        ),
        api.create(api_gpuclass(classes.byol, classes.byol_resource, mode="vgpu", profile="p")),
        api.create(
            api_gpuclass(
                classes.licensed,
                classes.licensed_resource,
                mode="vgpu",
                profile="p",
                license={"secretName": "chart-route-license"},
            )
        ),
    ]
    route.start()
    try:
        yield route
    finally:
        route.remove()
        route.stop_server()
        for obj in created:
            control_plane.admin.delete(obj)
        permitted.restore(control_plane.admin)


def _refusal(api: Api, obj: RawObject, method: str = "POST") -> ApiError:
    with pytest.raises(ApiError) as info:
        if method == "POST":
            api.create(obj)
        else:
            api.call("PUT", api.object_path(obj), body=obj)
    return info.value


# -- the webhook as its own identity ---------------------------------------------------------------


def test_webhook_resolves_selections_with_only_the_charts_rbac(
    control_plane: ControlPlane, routing: Routing
) -> None:
    """Catalog, namespaces (entitlement) and the KubeVirt CR are read as the ServiceAccount."""
    api, c = control_plane.admin, routing.classes
    stored = api.create(vmi(TENANT, [{"className": c.whole, "count": 2}]))
    assert stored["spec"]["domain"]["devices"]["gpus"] == [
        {"name": "gpu1", "deviceName": c.whole_resource},
        {"name": "gpu2", "deviceName": c.whole_resource},
    ]
    assert stored["spec"]["tolerations"] == [c.toleration]
    assert api.create(vmi(TENANT, [{"className": c.byol}]))["spec"]["domain"]["devices"]["gpus"]
    refused = _refusal(api, vmi(UNLABELLED, [{"className": c.byol}]))
    assert refused.status_code == 403
    assert "entitlement" in refused.body["message"]


def test_webhook_identity_has_no_more_than_read_rights(
    control_plane: ControlPlane, routing: Routing
) -> None:
    """The identity the webhook ran with reads what it needs and writes nothing here (its only
    writes, to its certificate Secret and webhook configurations by name, are checked in
    tests/e2e/test_e2e_cert_rotation.py)."""
    reads = {
        GPUCLASSES: 200,
        "/api/v1/namespaces": 200,
        f"/apis/kubevirt.io/v1/namespaces/{KUBEVIRT_NS}/kubevirts": 200,
        "/apis/kubevirt.io/v1/kubevirts": 403,  # rbac.kubevirtScope=namespace by default
        "/api/v1/secrets": 403,
        f"/apis/kubevirt.io/v1/namespaces/{TENANT}/virtualmachineinstances": 403,
    }
    with routing.identity.api() as sa:
        assert {path: sa.request("GET", path).status_code for path in reads} == reads
        probe = api_gpuclass(unique_name("sa-write"), "sa.example.com/gpu")
        assert sa.request("POST", GPUCLASSES, body=probe).status_code == 403


# -- which requests the chart routes ---------------------------------------------------------------


def test_vmi_updates_admission_can_refuse_reach_the_webhook(
    control_plane: ControlPlane, routing: Routing
) -> None:
    """Section 4 on UPDATE: a changed, added or removed selection (422) and a hand-mounted
    license volume (403) must reach the webhook; an unrelated change passes untouched."""
    api, c = control_plane.admin, routing.classes
    stored = api.create(vmi(TENANT, [{"className": c.whole}]))
    name = stored["metadata"]["name"]

    changed = json.loads(json.dumps(stored))
    changed["metadata"]["annotations"][ANN] = json.dumps([{"className": c.whole, "count": 2}])
    assert _refusal(api, changed, "PUT").status_code == 422

    removed = json.loads(json.dumps(stored))
    del removed["metadata"]["annotations"][ANN]
    assert _refusal(api, removed, "PUT").status_code == 422

    copy_name = f"gpuclass-license-{c.licensed}"
    for volume in (
        {"name": "lic", "secret": {"secretName": copy_name}},
        {"name": "ci", "cloudInitNoCloud": {"secretRef": {"name": copy_name}}},
    ):
        mounted = json.loads(json.dumps(stored))
        mounted["spec"]["volumes"].append(volume)
        error = _refusal(api, mounted, "PUT")
        assert error.status_code == 403, volume
        assert copy_name in error.body["message"]
    assert routing.calls(operation="UPDATE", kind="VirtualMachineInstance", name=name) >= 4

    unrelated = json.loads(json.dumps(stored))
    unrelated["metadata"].setdefault("labels", {})["kubevirt.io/nodeName"] = "node-a"
    updated = api.call("PUT", api.object_path(unrelated), body=unrelated)
    assert updated["spec"] == stored["spec"]
    assert updated["metadata"]["annotations"][ANN] == stored["metadata"]["annotations"][ANN]

    plain = api.create(vmi(TENANT))
    added = json.loads(json.dumps(plain))
    added["metadata"]["annotations"] = {ANN: json.dumps([{"className": c.whole}])}
    assert _refusal(api, added, "PUT").status_code == 422
    assert (
        routing.calls(
            operation="UPDATE", kind="VirtualMachineInstance", name=plain["metadata"]["name"]
        )
        >= 1
    )


def test_launcher_pods_of_other_users_never_reach_the_webhook(
    control_plane: ControlPlane, routing: Routing
) -> None:
    c = routing.classes
    selection = [{"className": c.whole}]
    controller = control_plane.user(CONTROLLER, ["system:masters"]).api()
    try:
        theirs = controller.create(launcher_pod(TENANT, selection))
    finally:
        controller.close()
    assert c.toleration in theirs["spec"]["tolerations"]
    assert routing.calls(operation="CREATE", kind="Pod", name=theirs["metadata"]["name"]) == 1

    other = control_plane.admin.create(launcher_pod(TENANT, selection))
    assert c.toleration not in other["spec"].get("tolerations", [])
    assert routing.calls(operation="CREATE", kind="Pod", name=other["metadata"]["name"]) == 0


def test_a_tenant_pod_cannot_take_a_vgpu_without_entitlement(
    control_plane: ControlPlane, routing: Routing
) -> None:
    """Attack (rule 4.5): a plain Pod asks for a vGPU with no VM and no class, for a class's
    resource and for a mediated device KubeVirt permits that no class names. The API server
    refuses it in a namespace without the entitlement label, with the webhook's reasons."""
    api, c = control_plane.admin, routing.classes
    for resource in (c.byol_resource, routing.mdev):
        pod = vgpu_pod(UNLABELLED, {resource: "1"})
        error = _refusal(api, pod)
        assert error.status_code == 403, resource
        message = error.body["message"]
        assert 'admission webhook "vgpu-pods.gpuclass.cozystack.io" denied' in message
        assert resource in message and f"namespace {UNLABELLED}" in message
        assert "ask the platform to entitle it" in message
        assert routing.calls(operation="CREATE", kind="Pod", name=pod["metadata"]["name"]) == 1


def test_vgpu_pods_where_entitled_and_other_pods_pass(
    control_plane: ControlPlane, routing: Routing
) -> None:
    """The positive controls: the same Pod in an entitled tenant, a passthrough resource, and
    KubeVirt's controller (its launchers are judged through the VMI) are created; a Pod that
    asks for no extended resource never reaches the webhook."""
    api, c = control_plane.admin, routing.classes
    for pod in (
        vgpu_pod(TENANT, {c.byol_resource: "1"}),
        vgpu_pod(TENANT, {routing.mdev: "1"}),
        vgpu_pod(UNLABELLED, {c.whole_resource: "1"}),
    ):
        stored = api.create(pod, dryRun="All")
        limits = pod["spec"]["containers"][0]["resources"]["limits"]
        assert stored["spec"]["containers"][0]["resources"]["limits"] == limits
        assert routing.calls(operation="CREATE", kind="Pod", name=pod["metadata"]["name"]) == 1
    plain = vgpu_pod(UNLABELLED, {"cpu": "1", "memory": "1Gi"})
    api.create(plain, dryRun="All")
    assert routing.calls(operation="CREATE", kind="Pod", name=plain["metadata"]["name"]) == 0
    controller = control_plane.user(CONTROLLER, ["system:masters"]).api()
    try:
        theirs = vgpu_pod(UNLABELLED, {c.byol_resource: "1"})
        controller.create(theirs, dryRun="All")
    finally:
        controller.close()
    assert routing.calls(operation="CREATE", kind="Pod", name=theirs["metadata"]["name"]) == 0


def test_kube_system_is_excluded(control_plane: ControlPlane, routing: Routing) -> None:
    """A VMI the webhook would refuse (count 0) is stored as sent in kube-system."""
    obj = vmi("kube-system", [{"className": routing.classes.whole, "count": 0}])
    stored = control_plane.admin.create(obj)
    try:
        assert stored["spec"] == obj["spec"]
        assert stored["metadata"]["annotations"][ANN] == obj["metadata"]["annotations"][ANN]
        name = obj["metadata"]["name"]
        assert routing.calls(operation="CREATE", kind="VirtualMachineInstance", name=name) == 0
        control = vmi(TENANT, [{"className": routing.classes.whole, "count": 0}])
        assert _refusal(control_plane.admin, control).status_code == 422  # elsewhere: refused
    finally:
        control_plane.admin.delete(stored)


# -- the VirtualMachine webhook: the template judged at apply (docs/contract.md 4.10) --------------


def test_vm_refusals_reach_the_tenant_at_apply_in_their_terms(
    control_plane: ControlPlane, routing: Routing
) -> None:
    api, c = control_plane.admin, routing.classes
    error = _refusal(api, vm(TENANT, [{"className": c.whole, "count": 0}]))
    assert error.status_code == 422
    assert (
        'admission webhook "virtualmachines.gpuclass.cozystack.io" denied' in error.body["message"]
    )
    assert "gpus[0].count" in error.body["message"]
    assert "metadata.annotations" not in error.body["message"]
    # vGPU in a namespace without the entitlement label: a policy refusal, named by entry.
    error = _refusal(api, vm(UNLABELLED, [{"className": c.byol}]))
    assert error.status_code == 403
    assert "gpus[0].className" in error.body["message"]


def test_a_vm_whose_class_may_appear_later_is_stored_as_applied_with_a_warning(
    control_plane: ControlPlane, routing: Routing
) -> None:
    api = control_plane.admin
    obj = vm(TENANT, [{"className": unique_name("not-yet")}])
    response = api.request(
        "POST",
        f"/apis/kubevirt.io/v1/namespaces/{TENANT}/virtualmachines",
        body=obj,
        params={"fieldValidation": "Strict"},
    )
    assert response.status_code == 201, response.text
    try:
        warnings = response.headers.get_list("warning")
        assert any("gpus[0].className" in w and "not in the catalog" in w for w in warnings)
        assert any("checked again when the VM starts" in w for w in warnings), warnings
        stored = response.json()
        assert stored["spec"]["template"] == obj["spec"]["template"]  # never patched
    finally:
        api.delete(obj)


def test_vm_updates_reach_the_webhook_only_when_the_template_changes(
    control_plane: ControlPlane, routing: Routing
) -> None:
    api, c = control_plane.admin, routing.classes
    stored = api.create(vm(TENANT, [{"className": c.whole}]))
    name = stored["metadata"]["name"]
    try:
        assert routing.calls(operation="CREATE", kind="VirtualMachine", name=name) == 1
        relabelled = json.loads(json.dumps(stored))
        relabelled["metadata"]["labels"] = {"team": "ml"}
        relabelled["spec"]["runStrategy"] = "Always"
        stored = api.call("PUT", api.object_path(relabelled), body=relabelled)
        assert routing.calls(operation="UPDATE", kind="VirtualMachine", name=name) == 0
        broken = json.loads(json.dumps(stored))
        broken["spec"]["template"]["metadata"]["annotations"][ANN] = json.dumps(
            [{"className": c.whole, "count": 0}]
        )
        error = _refusal(api, broken, "PUT")
        assert error.status_code == 422
        assert "gpus[0].count" in error.body["message"]
        assert routing.calls(operation="UPDATE", kind="VirtualMachine", name=name) == 1
    finally:
        api.delete(stored)


# -- the GPUClass webhook's own effects ------------------------------------------------------------


def test_gpuclass_warnings_reach_the_client_as_warning_headers(
    control_plane: ControlPlane, routing: Routing
) -> None:
    api, c = control_plane.admin, routing.classes
    keyless = api_gpuclass(
        unique_name("keyless"),
        f"{unique_name('k')}.example.com/gpu",
        tolerations=[{"operator": "Exists"}],
    )
    shared = api_gpuclass(unique_name("shared"), c.whole_resource)
    for obj, text in ((keyless, "Exists"), (shared, c.whole)):
        response = api.request("POST", GPUCLASSES, body=obj, params={"fieldValidation": "Strict"})
        try:
            assert response.status_code == 201, response.text
            warnings = response.headers.get_list("warning")
            assert any(w.startswith("299 ") and text in w for w in warnings), warnings
        finally:
            api.delete(obj)


def _store_around_the_api(plane: ControlPlane, obj: RawObject) -> None:
    """Write a GPUClass straight into etcd, as a class stored under an older, laxer CRD
    would sit there (the API server reads it back like any other)."""
    name = obj["metadata"]["name"]
    stored = {
        **obj,
        "metadata": {
            **obj["metadata"],
            "uid": str(uuid.uuid4()),
            "generation": 1,
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
    }
    key = f"/registry/cozystack.io/gpuclasses/{name}"
    response = httpx.post(
        f"http://127.0.0.1:{plane.etcd_port}/v3/kv/put",
        json={
            "key": base64.b64encode(key.encode()).decode(),
            "value": base64.b64encode(json.dumps(stored).encode()).decode(),
        },
        timeout=10,
    )
    response.raise_for_status()


def test_a_refusal_only_the_gpuclass_webhook_makes(
    control_plane: ControlPlane, routing: Routing
) -> None:
    """The CRD repeats every rule it can (docs/cel-coverage.md), so on CREATE its CEL refuses
    before the webhook is asked. On UPDATE the API server ratchets: errors in fields the update
    leaves unchanged are forgiven. A class stored with an invalid memory (as under an older
    CRD) then gets a displayName change past the CRD, and the webhook still refuses it."""
    api = control_plane.admin
    name = unique_name("stored-invalid")
    invalid = api_gpuclass(name, f"{name}.example.com/gpu", memory="lots")
    _store_around_the_api(control_plane, invalid)
    try:
        current = eventually(
            lambda: api.get("cozystack.io/v1alpha1", "GPUClass", name),
            timeout=10,
            what="the stored class to be served",
        )
        current["spec"]["displayName"] = "renamed"
        error = _refusal(api, current, "PUT")
        assert error.status_code == 422
        assert (
            'admission webhook "gpuclasses.gpuclass.cozystack.io" denied' in error.body["message"]
        )
        assert "spec.memory" in error.body["message"]
        fresh = api_gpuclass(unique_name("fresh-invalid"), "fresh.example.com/gpu", memory="lots")
        first = _refusal(api, fresh)  # a new object with the same fault: the CRD refuses first
        assert first.status_code == 422
        assert "admission webhook" not in first.body["message"]
    finally:
        api.delete(invalid)


# -- failurePolicy with the webhook down (last: it stops and restarts the webhook) --------------


def test_failure_policy_with_the_webhook_stopped(
    control_plane: ControlPlane, routing: Routing
) -> None:
    """VMI hook Fail: creates are refused while nobody answers. Pod hook Ignore: launcher Pods
    are created (without tolerations) rather than blocking KubeVirt. vGPU Pod hook Fail, for
    Pods that ask for an extended resource only. VM hook Ignore: VMs are stored as applied."""
    api, c = control_plane.admin, routing.classes
    routing.stop_server()
    try:
        error = _refusal(api, vmi(TENANT, [{"className": c.whole}]))
        assert error.status_code >= 500
        assert "failed calling webhook" in error.body["message"]
        assert "virtualmachineinstances.gpuclass.cozystack.io" in error.body["message"]
        controller = control_plane.user(CONTROLLER, ["system:masters"]).api()
        try:
            pod = controller.create(launcher_pod(TENANT, [{"className": c.whole}]))
        finally:
            controller.close()
        assert c.toleration not in pod["spec"].get("tolerations", [])
        # vGPU Pod hook Fail: a Pod asking for an extended resource waits for the webhook, even
        # where it would be allowed; a Pod asking for none never depended on it.
        error = _refusal(api, vgpu_pod(TENANT, {c.byol_resource: "1"}))
        assert error.status_code >= 500
        assert "vgpu-pods.gpuclass.cozystack.io" in error.body["message"]
        api.create(vgpu_pod(UNLABELLED, {"cpu": "1"}), dryRun="All")
        # VM hook Ignore: applying a VM goes on (the VMI hook decides at start).
        stored = api.create(vm(TENANT, [{"className": c.whole, "count": 0}]))
        api.delete(stored)
    finally:
        routing.remove()
        routing.start()
