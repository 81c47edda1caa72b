"""Rule 4.5 (docs/contract.md section 4): vGPU entitlement, for class entries and raw requests
alike; worker pools take passthrough classes only (403).
"""

from __future__ import annotations

import pytest

from gpuclass.shared.core.admission.decisions import Allowed, Denied
from gpuclass.shared.core.admission.mutate_vmi import admit
from tests.builders import admission_request
from tests.shared.core.admission.vmi_admission import (
    ANN,
    CATALOG,
    POOL,
    RES,
    TOL_W,
    catalog,
    causes_of,
    cls,
    create,
    gpus,
    gpus_op,
    ops_of,
    tolerations_op,
    vmi,
)


@pytest.mark.parametrize(
    ("namespace", "entitled", "allowed"),
    [
        pytest.param("tenant-root", True, True, id="tenant-root"),
        pytest.param("tenant-a", True, True, id="labelled-tenant"),
        pytest.param("tenant-c", True, False, id="unlabelled-tenant"),
        pytest.param("default", True, False, id="outside-tenants"),
        pytest.param("tenant-root", False, False, id="platform-off"),
    ],
)
def test_4_5_vgpu_entitlement(namespace: str, entitled: bool, allowed: bool) -> None:
    decision = create(vmi([cls("byol")], namespace=namespace), catalog(vgpu_entitled=entitled))
    if allowed:  # byol: one vGPU entry, no tolerations, no license (4.6)
        assert decision == Allowed((gpus_op(RES["byol"]),))
    else:
        assert causes_of(decision) == [(f"{ANN}[0].className", "forbidden", "NotEntitled")]


def test_4_5_passthrough_needs_no_entitlement() -> None:
    decision = create(vmi([cls("whole")], namespace="default"), catalog(vgpu_entitled=False))
    assert decision == Allowed((gpus_op(RES["whole"]), tolerations_op(TOL_W)))


def test_4_5_namespace_from_object_when_request_has_none() -> None:
    obj = vmi([cls("byol")], namespace="tenant-c")
    decision = admit(admission_request(operation="CREATE", object=obj), CATALOG)
    assert causes_of(decision) == [(f"{ANN}[0].className", "forbidden", "NotEntitled")]


def test_4_5_worker_pool_vgpu_refused() -> None:
    decision = create(vmi([cls("byol")], labels=POOL))
    assert causes_of(decision) == [(f"{ANN}[0].className", "forbidden", "WorkerPoolVGPU")]


@pytest.mark.parametrize(
    "label",
    [
        # cluster-api-provider-kubevirt v0.11.2, pkg/kubevirt/machine.go: on the VM template
        pytest.param("capk.cluster.x-k8s.io/kubevirt-machine-name", id="capk-machine-name"),
        pytest.param("capk.cluster.x-k8s.io/kubevirt-machine-namespace", id="capk-machine-ns"),
        pytest.param("cluster.x-k8s.io/cluster-name", id="cluster-name"),
    ],
)
def test_4_5_any_cluster_api_worker_label_marks_a_worker_pool(label: str) -> None:
    decision = create(vmi([cls("byol")], labels={label: "tenant-a-k8s-md0-x7k2p"}))
    assert causes_of(decision) == [(f"{ANN}[0].className", "forbidden", "WorkerPoolVGPU")]


def test_4_5_worker_pool_passthrough_allowed() -> None:
    assert ops_of(create(vmi([cls("whole", 2)], labels=POOL))) == [
        gpus_op(RES["whole"], RES["whole"]),
        tolerations_op(TOL_W),
    ]


@pytest.mark.parametrize(
    ("where", "resource", "namespace", "refused"),
    [
        pytest.param("gpus", RES["byol"], "tenant-c", True, id="raw-vgpu-gpu-not-entitled"),
        pytest.param(
            "hostDevices", RES["lic"], "tenant-c", True, id="raw-vgpu-host-device-not-entitled"
        ),
        pytest.param("gpus", RES["byol"], "tenant-a", False, id="raw-vgpu-gpu-entitled"),
        pytest.param("gpus", RES["whole"], "tenant-c", False, id="raw-passthrough"),
        pytest.param("gpus", "other.example/gpu", "default", False, id="raw-foreign"),
        # A mediated device KubeVirt permits is a vGPU whether a class names it or not.
        pytest.param("gpus", RES["mdev"], "tenant-c", True, id="unclassed-mdev-gpu-unlabelled"),
        pytest.param(
            "hostDevices", RES["mdev"], "tenant-c", True, id="unclassed-mdev-host-device-unlabelled"
        ),
        pytest.param("gpus", RES["mdev"], "default", True, id="unclassed-mdev-outside-tenants"),
        pytest.param("gpus", RES["mdev"], "tenant-a", False, id="unclassed-mdev-entitled"),
        pytest.param("hostDevices", RES["mdev"], "tenant-root", False, id="unclassed-mdev-root"),
        pytest.param("gpus", RES["pci"], "tenant-c", False, id="unclassed-pci-device"),
    ],
)
def test_4_5_raw_entries(where: str, resource: str, namespace: str, refused: bool) -> None:
    obj = vmi(namespace=namespace)
    obj["spec"]["domain"]["devices"][where] = [{"name": "gpu1", "deviceName": resource}]
    decision = create(obj)
    if refused:
        assert causes_of(decision) == [
            (f"spec.domain.devices.{where}[0].deviceName", "forbidden", "NotEntitled")
        ]
    else:
        assert decision == Allowed(), "raw entries of other resources are untouched"


@pytest.mark.parametrize(
    ("section", "resource", "namespace", "vgpu_entitled", "refused"),
    [
        pytest.param("requests", RES["byol"], "tenant-c", True, True, id="requests-unlabelled"),
        pytest.param("limits", RES["lic"], "tenant-c", True, True, id="limits-unlabelled"),
        pytest.param("limits", RES["byol"], "default", True, True, id="limits-outside-tenants"),
        pytest.param("requests", RES["byol"], "tenant-root", False, True, id="platform-off"),
        pytest.param("requests", RES["byol"], "tenant-a", True, False, id="requests-entitled"),
        pytest.param("limits", RES["whole"], "tenant-c", True, False, id="passthrough-resource"),
        pytest.param("requests", "memory", "tenant-c", True, False, id="memory"),
        pytest.param("limits", RES["mdev"], "tenant-c", True, True, id="unclassed-mdev-limits"),
        pytest.param(
            "requests", RES["mdev"], "tenant-a", False, True, id="unclassed-mdev-platform-off"
        ),
        pytest.param("requests", RES["mdev"], "tenant-a", True, False, id="unclassed-mdev-ok"),
    ],
)
def test_4_5_raw_resource_requests_need_entitlement(
    section: str, resource: str, namespace: str, vgpu_entitled: bool, refused: bool
) -> None:
    """Naming the vGPU resource in domain.resources is no way around entitlement either."""
    obj = vmi(namespace=namespace)
    obj["spec"]["domain"]["resources"] = {section: {resource: "1"}}
    decision = create(obj, catalog(vgpu_entitled=vgpu_entitled))
    if refused:
        assert causes_of(decision) == [
            (f"spec.domain.resources.{section}[{resource}]", "forbidden", "NotEntitled")
        ]
        assert isinstance(decision, Denied) and decision.code == 403
    else:
        assert decision == Allowed()


def test_4_5_raw_entries_need_entitlement_for_platform_off() -> None:
    obj = vmi(namespace="tenant-root")
    obj["spec"]["domain"]["devices"]["hostDevices"] = [{"name": "h", "deviceName": RES["mdev"]}]
    decision = create(obj, catalog(vgpu_entitled=False))
    assert causes_of(decision) == [
        ("spec.domain.devices.hostDevices[0].deviceName", "forbidden", "NotEntitled")
    ]


@pytest.mark.parametrize(
    ("namespace", "causes"),
    [
        pytest.param(
            "tenant-c",
            [("spec.domain.devices.hostDevices[0].deviceName", "forbidden", "NotEntitled")],
            id="not-entitled",
        ),
        pytest.param("tenant-a", None, id="entitled"),
    ],
)
def test_4_5_unclassed_mdev_beside_a_passthrough_class(
    namespace: str, causes: list[tuple[str, str, str]] | None
) -> None:
    """Rule 2 refuses only catalog resources beside classes; a vGPU no class names still needs
    entitlement, so adding it next to a passthrough class is no way around rule 5."""
    obj = vmi([cls("whole")], namespace=namespace)
    obj["spec"]["domain"]["devices"]["hostDevices"] = [{"name": "h", "deviceName": RES["mdev"]}]
    decision = create(obj)
    if causes is None:  # the class's entry and toleration; the host device stays as it is
        assert ops_of(decision) == [gpus_op(RES["whole"]), tolerations_op(TOL_W)]
    else:
        assert causes_of(decision) == causes
        assert isinstance(decision, Denied) and decision.code == 403


def test_4_5_message_names_the_resource() -> None:
    obj = vmi(namespace="tenant-c")
    obj["spec"]["domain"]["devices"]["gpus"] = gpus(RES["mdev"])
    decision = create(obj)
    assert isinstance(decision, Denied)
    [cause] = decision.causes
    assert RES["mdev"] in cause.message and "vGPU" in cause.message
    assert "tenant-c" in cause.message
