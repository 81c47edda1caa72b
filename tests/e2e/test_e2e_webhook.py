"""The webhook end to end: a real kube-apiserver calls `gpuclass-webhook` over TLS.

The webhook runs in cluster mode (`--kubeconfig`), so its catalog is the
store kept by list+watch of the real API server; the API server calls it with the
caBundle of its self-signed CA and applies its JSON patches. Assertions are on
the stored objects and on what the client receives.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuclass.webhook import paths
from tests.builders import World, api_gpuclass
from tests.builders import selecting_vmi as vmi
from tests.chart_helpers import render_objects, webhook_for
from tests.controlplane.api import Api, ApiError, RawObject
from tests.controlplane.cluster import ControlPlane, eventually, unique_name
from tests.controlplane.kubevirt_parts import install_kubevirt_cr
from tests.controlplane.plugin import WebhookRegistry
from tests.controlplane.webhooks import gpuclass_webhooks
from tests.webhook_process import WebhookProcess

ANN = "gpu.cozystack.io/classes"
CONTROLLER = "system:serviceaccount:cozy-kubevirt:kubevirt-controller"


@pytest.fixture(scope="module")
def world(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[World, WebhookProcess]]:
    api = control_plane.admin
    w = World()
    for ns, labels in (
        ("tenant-root", {}),
        ("tenant-e2e", {"gpu.cozystack.io/vgpu": "true"}),
        ("tenant-nolabel", {}),
        ("cozy-kubevirt", {}),
        ("cozy-system", {}),
    ):
        api.apply(
            [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}}]
        )
    install_kubevirt_cr(
        api,
        "cozy-kubevirt",
        "kubevirt",
        {
            "permittedHostDevices": {
                "pciHostDevices": [
                    {"pciVendorSelector": "10DE:0001", "resourceName": w.whole_resource}
                ],
                "mediatedDevices": [
                    {"mdevNameSelector": "X", "resourceName": w.licensed_resource},
                    {"mdevNameSelector": "Y", "resourceName": w.byol_resource},
                ],
            }
        },
    )
    api.create(api_gpuclass(w.whole, w.whole_resource, tolerations=[w.toleration]))
    api.create(
        api_gpuclass(
            w.licensed,
            w.licensed_resource,
            mode="vgpu",
            profile="p",
            license={"secretName": "e2e-license"},
        )
    )
    api.create(api_gpuclass(w.byol, w.byol_resource, mode="vgpu", profile="p"))
    server = WebhookProcess(
        ["--kubeconfig", str(control_plane.admin_kubeconfig), "--vgpu-entitled"],
        tls_dir=tmp_path_factory.mktemp("e2e-tls"),
    )
    configurations = gpuclass_webhooks(
        server.url, Path(server.ca).read_bytes(), prefix="gpuclass-e2e"
    )
    _route_as_the_chart_does(configurations)
    WebhookRegistry(api).register(configurations)
    try:
        probe = vmi("tenant-e2e", [{"className": w.byol}])
        eventually(
            lambda: _dry_run_allowed(api, probe),
            timeout=30,
            what="webhook registered and catalog synced",
        )
        yield w, server
    finally:
        WebhookRegistry(control_plane.admin).remove(
            configurations
        )  # admin may be new after a restart
        server.stop()


def _route_as_the_chart_does(configurations: list[RawObject]) -> None:
    """Give our VMI hook the chart's own matchConditions, so the API server routes as in a cluster."""
    chart_hook = webhook_for(render_objects(), "virtualmachineinstances", paths.MUTATE_VMIS)
    for configuration in configurations:
        for hook in configuration["webhooks"]:
            if hook["name"].startswith("virtualmachineinstances."):
                hook["matchConditions"] = chart_hook["matchConditions"]


def _dry_run_allowed(api: Api, obj: RawObject) -> bool:
    try:
        stored = api.create(obj, dryRun="All")
    except ApiError:
        return False
    return bool(stored["spec"]["domain"]["devices"].get("gpus"))


def _dry_run_stored(api: Api, obj: RawObject) -> RawObject | None:
    """The object a server-side dry-run create would store, None when admission refuses it."""
    try:
        return api.create(obj, dryRun="All")
    except ApiError:
        return None


def refusal(api: Api, obj: RawObject) -> ApiError:
    with pytest.raises(ApiError) as info:
        api.create(obj)
    return info.value


def test_whole_gpu_selection_is_resolved_in_the_stored_vmi(
    control_plane: ControlPlane, world: tuple[World, WebhookProcess]
) -> None:
    w, _ = world
    stored = control_plane.admin.create(vmi("tenant-e2e", [{"className": w.whole, "count": 2}]))
    assert stored["spec"]["domain"]["devices"]["gpus"] == [
        {"name": "gpu1", "deviceName": w.whole_resource},
        {"name": "gpu2", "deviceName": w.whole_resource},
    ]
    assert stored["spec"]["tolerations"] == [w.toleration]
    assert stored["spec"]["domain"]["devices"]["disks"] == [
        {"name": "root", "disk": {"bus": "virtio"}}
    ]


def test_licensed_vgpu_gets_the_license_volume_and_disk(
    control_plane: ControlPlane, world: tuple[World, WebhookProcess]
) -> None:
    w, _ = world
    stored = control_plane.admin.create(vmi("tenant-e2e", [{"className": w.licensed}]))
    assert {
        "name": "gpulicense",
        "secret": {"secretName": f"gpuclass-license-{w.licensed}", "volumeLabel": "GPULICENSE"},
    } in stored["spec"]["volumes"]
    assert {"name": "gpulicense", "serial": "GPULICENSE", "disk": {"bus": "virtio"}} in stored[
        "spec"
    ]["domain"]["devices"]["disks"]


@pytest.mark.parametrize(
    ("selection", "namespace", "code", "text"),
    [
        pytest.param(
            [{"className": "no-such-class"}],
            "tenant-e2e",
            403,
            "is not in the catalog",
            id="class-not-found-403",
        ),
        pytest.param(
            [{"className": "BYOL", "count": 0}], "tenant-e2e", 422, "count", id="invalid-count-422"
        ),
        pytest.param(
            None, "tenant-nolabel", 403, "lacks the vGPU entitlement label", id="not-entitled-403"
        ),
    ],
)
def test_refusals_reach_the_client_with_code_and_message(
    control_plane: ControlPlane,
    world: tuple[World, WebhookProcess],
    selection: Any,
    namespace: str,
    code: int,
    text: str,
) -> None:
    w, _ = world
    chosen = selection if selection is not None else [{"className": w.byol}]
    error = refusal(control_plane.admin, vmi(namespace, chosen))
    assert error.status_code == code
    assert text in error.body["message"]
    assert (
        'admission webhook "virtualmachineinstances.gpu.cozystack.io" denied the request'
        in error.body["message"]
    )


def test_dry_run_of_the_largest_legal_selection_is_refused_by_the_cap(
    control_plane: ControlPlane, world: tuple[World, WebhookProcess]
) -> None:
    """Issue 20: a free `--dry-run=server` create with a 256 KiB selection costs one cheap refusal.

    The API server allows 256 KiB of annotations, keys included; this one fills it, with a
    class that exists. docs/contract.md 4.1 caps the selection at 2048 bytes: 422, one cause.
    """
    w, _ = world
    entry = json.dumps({"className": w.whole, "count": 1})
    room = 256 * 1024 - len(ANN)
    body = ", ".join([entry] * ((room - 2) // (len(entry) + 2)))
    raw = "[" + body + " " * (room - len(body) - 2) + "]"
    assert len(raw) + len(ANN) == 256 * 1024
    obj = vmi("tenant-e2e")
    obj["metadata"]["annotations"] = {ANN: raw}
    with pytest.raises(ApiError) as info:
        control_plane.admin.create(obj, dryRun="All")
    error = info.value
    assert error.status_code == 422
    message = error.body["message"]
    assert 'admission webhook "virtualmachineinstances.gpu.cozystack.io" denied the request' in (
        message
    )
    assert f"metadata.annotations[{ANN}]: is {len(raw)} bytes; at most 2048 are read" in message
    assert [c["reason"] for c in error.body["details"]["causes"]] == ["SelectionTooLarge"]


def test_vmi_without_selection_is_untouched(
    control_plane: ControlPlane, world: tuple[World, WebhookProcess]
) -> None:
    obj = vmi("tenant-e2e")
    stored = control_plane.admin.create(obj)
    assert stored["spec"] == obj["spec"]


def test_reinvoked_chain_does_not_double_patch(
    control_plane: ControlPlane, world: tuple[World, WebhookProcess]
) -> None:
    """Our VMI hook registered twice: the second call sees the first's result and must add nothing."""
    w, server = world
    api = control_plane.admin
    registry = WebhookRegistry(api)
    twice = gpuclass_webhooks(server.url, Path(server.ca).read_bytes(), prefix="gpuclass-e2e-again")
    mutating = [c for c in twice if c["kind"] == "MutatingWebhookConfiguration"]
    for configuration in mutating:
        configuration["webhooks"] = [
            h for h in configuration["webhooks"] if "virtualmachineinstances" in h["name"]
        ]
    registry.register(mutating)
    try:

        def second_hook_called() -> bool:
            before = len([e for e in server.logs() if e.get("msg") == "admission"])
            stored = api.create(vmi("tenant-e2e", [{"className": w.whole}]), dryRun="All")
            after = len([e for e in server.logs() if e.get("msg") == "admission"])
            assert stored["spec"]["domain"]["devices"]["gpus"] == [
                {"name": "gpu1", "deviceName": w.whole_resource}
            ]
            assert stored["spec"]["tolerations"] == [w.toleration]
            return after - before >= 2

        eventually(second_hook_called, timeout=30, what="both hooks invoked")
    finally:
        registry.remove()

        def second_hook_gone() -> bool:
            def mutations() -> int:
                return sum(
                    1
                    for e in server.logs()
                    if e.get("msg") == "admission" and e.get("webhook") == "virtualmachineinstances"
                )

            before = mutations()
            api.create(vmi("tenant-e2e", [{"className": w.whole}]), dryRun="All")
            time.sleep(0.2)  # the decision line follows the answer
            return mutations() - before == 1

        # The API server drops a deleted configuration a little later (its informer): a test after
        # this one would otherwise have its calls made twice.
        eventually(second_hook_gone, timeout=30, what="the second hook no longer invoked")


def _vmi_updates(server: WebhookProcess, name: str) -> int:
    return sum(
        1
        for e in server.logs()
        if e.get("msg") == "admission" and e.get("operation") == "UPDATE" and e.get("name") == name
    )


def _ssh_key_from(secret: str) -> Any:
    def change(spec: RawObject) -> None:
        spec["accessCredentials"] = [
            {
                "sshPublicKey": {
                    "source": {"secret": {"secretName": secret}},
                    "propagationMethod": {"noCloud": {}},
                }
            }
        ]

    return change


def _pull_secret_from(secret: str) -> Any:
    def change(spec: RawObject) -> None:
        spec["volumes"][0]["containerDisk"]["imagePullSecret"] = secret

    return change


@pytest.mark.parametrize(
    ("change", "field"),
    [
        pytest.param(
            _ssh_key_from,
            "spec.accessCredentials[0].sshPublicKey.source.secret.secretName",
            id="ssh-key",
        ),
        pytest.param(
            _pull_secret_from, "spec.volumes[0].containerDisk.imagePullSecret", id="pull-secret"
        ),
    ],
)
def test_chart_match_conditions_send_secret_reference_updates_to_the_webhook(
    control_plane: ControlPlane, world: tuple[World, WebhookProcess], change: Any, field: str
) -> None:
    """The chart's matchConditions, evaluated by the real API server: a metadata-only UPDATE is
    not sent to the webhook, an UPDATE naming a license copy outside spec.volumes is, and refused."""
    w, server = world
    api = control_plane.admin
    stored = api.create(vmi("tenant-e2e", [{"className": w.byol}]))
    name = stored["metadata"]["name"]

    labelled = copy.deepcopy(stored)
    labelled["metadata"]["labels"] = {"kubevirt.io/nodeName": "node-a"}
    stored = api.call("PUT", api.object_path(labelled), body=labelled)

    hand = copy.deepcopy(stored)
    change(f"gpuclass-license-{w.licensed}")(hand["spec"])
    with pytest.raises(ApiError) as info:
        api.call("PUT", api.object_path(hand), body=hand)
    assert info.value.status_code == 403
    assert field in info.value.body["message"]
    # Log lines arrive in order and a little after the answer: once the refused UPDATE is
    # logged, an earlier call for the metadata-only UPDATE would be logged too.
    eventually(lambda: _vmi_updates(server, name) >= 1, timeout=10, what="refused UPDATE logged")
    assert _vmi_updates(server, name) == 1, "the metadata-only UPDATE reached the webhook"
    current = api.get("kubevirt.io/v1", "VirtualMachineInstance", name, namespace="tenant-e2e")
    assert current is not None and "accessCredentials" not in current["spec"]


def test_launcher_pod_gets_class_tolerations_only_from_kubevirt(
    control_plane: ControlPlane, world: tuple[World, WebhookProcess]
) -> None:
    w, _ = world
    pod: RawObject = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": unique_name("virt-launcher"),
            "namespace": "tenant-e2e",
            "labels": {"kubevirt.io": "virt-launcher"},
            "annotations": {ANN: json.dumps([{"className": w.whole}])},
        },
        "spec": {"containers": [{"name": "compute", "image": "example.org/virt-launcher:1"}]},
    }
    controller = control_plane.user(CONTROLLER, ["system:masters"]).api()
    try:
        stored = controller.create(pod)
    finally:
        controller.close()
    assert w.toleration in stored["spec"].get("tolerations", [])
    other = copy.deepcopy(pod)
    other["metadata"]["name"] = unique_name("virt-launcher")
    stored_other = control_plane.admin.create(other)
    assert w.toleration not in stored_other["spec"].get("tolerations", [])
    plain = copy.deepcopy(pod)
    plain["metadata"]["name"] = unique_name("plain")
    plain["metadata"]["labels"] = {"app": "x"}
    assert w.toleration not in control_plane.admin.create(plain)["spec"].get("tolerations", [])


def test_gpuclass_validation_and_immutability(
    control_plane: ControlPlane, world: tuple[World, WebhookProcess]
) -> None:
    api = control_plane.admin
    bad = api_gpuclass(
        unique_name("bad"), "example.com/x", mode="vgpu", license={"secretName": "Bad Name"}
    )
    error = refusal(api, bad)
    assert error.status_code == 422
    assert "spec.profile" in error.body["message"]
    name = unique_name("good")
    api.create(api_gpuclass(name, f"{name}.example.com/gpu"))
    current = api.get("cozystack.io/v1alpha1", "GPUClass", name)
    assert current is not None
    changed = copy.deepcopy(current)
    changed["spec"]["model"] = "other"
    with pytest.raises(ApiError) as info:
        api.call("PUT", api.object_path(changed), body=changed)
    assert info.value.status_code == 422
    assert "immutable" in info.value.body["message"]


def test_new_class_reaches_the_webhook_cache(
    control_plane: ControlPlane, world: tuple[World, WebhookProcess]
) -> None:
    api = control_plane.admin
    name = unique_name("late")
    resource = f"{name}.example.com/gpu"
    kubevirt = api.get("kubevirt.io/v1", "KubeVirt", "kubevirt", namespace="cozy-kubevirt")
    assert kubevirt is not None
    kubevirt["spec"]["configuration"]["permittedHostDevices"]["pciHostDevices"].append(
        {"pciVendorSelector": "10DE:0009", "resourceName": resource}
    )
    api.call("PUT", api.object_path(kubevirt), body=kubevirt)
    api.create(api_gpuclass(name, resource))
    # Until the watch brings the class, the webhook refuses it (4.3, ClassNotFound); once it is
    # cached, the VMI is resolved with the class's entries (4.6).
    stored = eventually(
        lambda: _dry_run_stored(api, vmi("tenant-e2e", [{"className": name, "count": 2}])),
        timeout=20,
        what="new class selectable",
    )
    assert stored["spec"]["domain"]["devices"]["gpus"] == [
        {"name": "gpu1", "deviceName": resource},
        {"name": "gpu2", "deviceName": resource},
    ]


def test_webhook_cache_survives_apiserver_restart(
    control_plane: ControlPlane, world: tuple[World, WebhookProcess]
) -> None:
    _, server = world
    control_plane.restart_apiserver()
    api = control_plane.admin
    name = unique_name("after-restart")
    resource = f"{name}.example.com/gpu"
    kubevirt = api.get("kubevirt.io/v1", "KubeVirt", "kubevirt", namespace="cozy-kubevirt")
    assert kubevirt is not None
    kubevirt["spec"]["configuration"]["permittedHostDevices"]["pciHostDevices"].append(
        {"pciVendorSelector": "10DE:000A", "resourceName": resource}
    )
    api.call("PUT", api.object_path(kubevirt), body=kubevirt)
    eventually(
        lambda: _create_class(api, api_gpuclass(name, resource)),
        timeout=30,
        what="class created after restart",
    )
    eventually(
        lambda: _dry_run_allowed(api, vmi("tenant-e2e", [{"className": name}])),
        timeout=60,
        what="webhook cache reconnected",
    )
    assert server.proc.poll() is None


def _create_class(api: Api, obj: RawObject) -> bool:
    try:
        api.create(obj)
    except ApiError as exc:
        return exc.status_code == 409
    return True
