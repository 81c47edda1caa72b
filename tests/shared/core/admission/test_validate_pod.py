"""Pods requesting a vGPU (docs/contract.md rule 4.5 and section 3, `POST /validate/pods`).

Every expected answer below is read off the contract, not the code: a vGPU resource is
the resourceName of a `mode: vgpu` class or any `mediatedDevices` resourceName of the
KubeVirt CR (section 1, rule 4.5); entitlement is the platform setting, `tenant-root`
by it alone, other tenants with the label on themselves and every ancestor, nothing
outside `tenant-*`; KubeVirt's controller user is exempt (its launcher Pods carry the
vGPUs of a VMI judged by the same rule); a policy refusal is 403 (3.3).
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuclass.shared.core.admission.decisions import Allowed, Decision, Denied
from gpuclass.shared.core.admission.envelope import VMI, MalformedReview
from gpuclass.shared.core.admission.review import ENDPOINTS, review
from gpuclass.shared.core.admission.validate_pod import admit
from gpuclass.shared.core.model.snapshot import SnapshotBuilder
from gpuclass.shared.core.status.catalog import Catalog, Policy, build_catalog
from tests.builders import admission_request

POD_KIND = ("", "Pod")
CONTROLLER = "system:serviceaccount:cozy-kubevirt:kubevirt-controller"
LABEL = {"gpu.cozystack.io/vgpu": "true"}
BYOL = "example.com/byol-vgpu"  # a vgpu class's resource
BROKEN = "example.com/broken-vgpu"  # a vgpu class with an invalid spec: still a vGPU
MDEV = "example.com/unclassed-mdev"  # permitted by KubeVirt as a mediated device, no class
WHOLE = "example.com/whole"  # a passthrough class
PCI = "example.com/unclassed-pci"  # permitted as a PCI device, no class


def _class(name: str, resource: str, **spec: Any) -> dict[str, Any]:
    body = {
        "vendor": "example",
        "model": "m",
        "mode": "passthrough",
        "source": {"devicePlugin": {"resourceName": resource}},
        **spec,
    }
    return {"kind": "GPUClass", "metadata": {"name": name}, "spec": body}


def _namespace(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}


OBJECTS: list[dict[str, Any]] = [
    _class("whole", WHOLE),
    _class("byol", BYOL, mode="vgpu", profile="p"),
    _class("broken", BROKEN, mode="vgpu"),  # no profile: invalid
    {
        "kind": "KubeVirt",
        "status": {"phase": "Deployed"},
        "metadata": {"name": "kubevirt", "namespace": "cozy-kubevirt"},
        "spec": {
            "configuration": {
                "permittedHostDevices": {
                    "pciHostDevices": [{"resourceName": WHOLE}, {"resourceName": PCI}],
                    "mediatedDevices": [{"resourceName": BYOL}, {"resourceName": MDEV}],
                }
            }
        },
    },
    _namespace("tenant-root"),
    _namespace("tenant-a", LABEL),
    _namespace("tenant-a-b", LABEL),
    _namespace("tenant-c"),
    _namespace("tenant-c-d", LABEL),  # its parent tenant-c is not entitled
    _namespace("default", LABEL),  # not a tenant: a label does not help
]


def catalog(*, vgpu_entitled: bool = True) -> Catalog:
    return build_catalog(
        SnapshotBuilder().add_all(OBJECTS), Policy(vgpu_entitled=vgpu_entitled), figures="computed"
    )


def pod(
    *containers: dict[str, Any], init: tuple[dict[str, Any], ...] = (), labels: Any = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init:
        spec["initContainers"] = list(init)
    meta: dict[str, Any] = {"name": "p", "namespace": "tenant-c"}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def container(name: str = "c", **sections: dict[str, str]) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "image": "example.org/app:1"}
    if sections:
        body["resources"] = sections
    return body


def decide(
    obj: dict[str, Any] | None,
    namespace: str,
    *,
    user: str = "tenant-user",
    operation: str = "CREATE",
    vgpu_entitled: bool = True,
) -> Decision:
    request = admission_request(
        POD_KIND,
        operation=operation,
        namespace=namespace,
        object=obj,
        userInfo={"username": user},
    )
    return admit(request, catalog(vgpu_entitled=vgpu_entitled))


def causes_of(decision: Decision) -> list[tuple[str, str, str]]:
    assert isinstance(decision, Denied), decision
    return [(c.field, c.kind, c.code) for c in decision.causes]


C0_REQ = "spec.containers[0].resources.requests[{}]"
C0_LIM = "spec.containers[0].resources.limits[{}]"


@pytest.mark.parametrize(
    ("obj", "namespace", "vgpu_entitled", "refused_at"),
    [
        pytest.param(
            pod(container(requests={BYOL: "1"})),
            "tenant-c",
            True,
            [C0_REQ.format(BYOL)],
            id="class-vgpu-request-unlabelled-tenant",
        ),
        pytest.param(
            pod(container(limits={MDEV: "1"})),
            "tenant-c",
            True,
            [C0_LIM.format(MDEV)],
            id="unclassed-mdev-limit-unlabelled-tenant",
        ),
        pytest.param(
            pod(container(limits={BROKEN: "1"})),
            "tenant-c",
            True,
            [C0_LIM.format(BROKEN)],
            id="invalid-vgpu-class-resource",
        ),
        pytest.param(
            pod(container(), init=(container("init", requests={MDEV: "1"}),)),
            "tenant-c",
            True,
            ["spec.initContainers[0].resources.requests[example.com/unclassed-mdev]"],
            id="init-container",
        ),
        pytest.param(
            pod(container(limits={BYOL: "1"})),
            "tenant-c-d",
            True,
            [C0_LIM.format(BYOL)],
            id="labelled-child-of-unlabelled-parent",
        ),
        pytest.param(
            pod(container(limits={BYOL: "1"})),
            "default",
            True,
            [C0_LIM.format(BYOL)],
            id="outside-tenants-even-labelled",
        ),
        pytest.param(
            pod(container(limits={BYOL: "1"})),
            "tenant-root",
            False,
            [C0_LIM.format(BYOL)],
            id="platform-off-refuses-tenant-root",
        ),
        pytest.param(
            pod(
                container("a", requests={BYOL: "1"}, limits={BYOL: "1", "cpu": "1"}),
                container("b", limits={MDEV: "1"}),
                init=(container("i", limits={BYOL: "1"}),),
            ),
            "tenant-c",
            True,
            [
                "spec.initContainers[0].resources.limits[example.com/byol-vgpu]",
                C0_REQ.format(BYOL),
                C0_LIM.format(BYOL),
                "spec.containers[1].resources.limits[example.com/unclassed-mdev]",
            ],
            id="every-request-reported-at-once",
        ),
        pytest.param(
            pod(container(limits={BYOL: "1"}), labels={"kubevirt.io": "virt-launcher"}),
            "tenant-c",
            True,
            [C0_LIM.format(BYOL)],
            id="launcher-label-from-a-tenant-is-no-pass",
        ),
        pytest.param(
            pod(container(limits={MDEV: "1"})), "tenant-a", True, None, id="entitled-tenant"
        ),
        pytest.param(
            pod(container(limits={BYOL: "1"})), "tenant-a-b", True, None, id="entitled-grandchild"
        ),
        pytest.param(
            pod(container(limits={BYOL: "1"})), "tenant-root", True, None, id="tenant-root"
        ),
        pytest.param(
            pod(container(limits={WHOLE: "1"})), "tenant-c", True, None, id="passthrough-resource"
        ),
        pytest.param(
            pod(container(limits={PCI: "1"})), "tenant-c", True, None, id="unclassed-pci-device"
        ),
        pytest.param(
            pod(container(limits={"cpu": "1", "memory": "1Gi"})),
            "default",
            False,
            None,
            id="no-extended-resource",
        ),
        pytest.param(pod(container()), "tenant-c", True, None, id="no-resources"),
    ],
)
def test_vgpu_pods_need_entitlement(
    obj: dict[str, Any], namespace: str, vgpu_entitled: bool, refused_at: list[str] | None
) -> None:
    decision = decide(obj, namespace, vgpu_entitled=vgpu_entitled)
    if refused_at is None:
        assert decision == Allowed()
        return
    assert causes_of(decision) == [(path, "forbidden", "NotEntitled") for path in refused_at]
    assert isinstance(decision, Denied) and decision.code == 403


def test_kubevirt_controller_is_judged_through_the_vmi() -> None:
    obj = pod(container(limits={BYOL: "1"}), labels={"kubevirt.io": "virt-launcher"})
    assert decide(obj, "tenant-c", user=CONTROLLER) == Allowed()
    assert decide(obj, "default", user=CONTROLLER, vgpu_entitled=False) == Allowed()


def test_the_message_names_resource_namespace_and_what_to_do() -> None:
    decision = decide(pod(container(limits={MDEV: "1"})), "tenant-c")
    assert isinstance(decision, Denied)
    [cause] = decision.causes
    assert MDEV in cause.message
    assert "namespace tenant-c" in cause.message
    assert "ask the platform to entitle it" in cause.message


@pytest.mark.parametrize("operation", ["UPDATE", "DELETE", "CONNECT"])
def test_only_creates_are_judged(operation: str) -> None:
    """A Pod's containers and their resources cannot change once it exists."""
    obj = pod(container(limits={BYOL: "1"}))
    assert decide(obj, "tenant-c", operation=operation) == Allowed()


def test_a_create_without_an_object_is_invalid() -> None:
    decision = decide(None, "tenant-c")
    assert causes_of(decision) == [("object", "invalid", "Invalid")]


def test_malformed_resources_are_no_error() -> None:
    obj = pod(container())
    obj["spec"]["containers"].append("not a container")
    obj["spec"]["containers"].append({"name": "x", "resources": {"limits": ["x"]}})
    obj["spec"]["initContainers"] = {"not": "a list"}
    assert decide(obj, "tenant-c") == Allowed()


def _body(obj: dict[str, Any], kind: str = "Pod") -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u1",
            "kind": {
                "group": "" if kind == "Pod" else "kubevirt.io",
                "version": "v1",
                "kind": kind,
            },
            "operation": "CREATE",
            "namespace": "tenant-c",
            "userInfo": {"username": "tenant-user"},
            "object": obj,
        },
    }


def test_the_endpoint_picks_the_admitter() -> None:
    """Section 3: one Pod, two endpoints. /validate/pods refuses; /mutate/pods never refuses."""
    body = _body(pod(container(limits={BYOL: "1"})))
    validated = review(body, catalog(), endpoint="/validate/pods")["response"]
    assert validated["allowed"] is False
    assert validated["status"]["code"] == 403
    assert review(body, catalog(), endpoint="/mutate/pods")["response"]["allowed"] is True
    assert review(body, catalog())["response"]["allowed"] is True  # a Pod's first endpoint
    with pytest.raises(MalformedReview, match="admits core/Pod"):
        review(_body({}, "VirtualMachineInstance"), catalog(), endpoint="/validate/pods")
    assert ENDPOINTS["/validate/pods"][0] != VMI
