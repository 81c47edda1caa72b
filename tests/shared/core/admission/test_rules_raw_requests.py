"""Rule 4.2 (docs/contract.md section 4): no other GPU request beside class entries, and
`gpus` already resolved is a re-invocation that gets no patch.
"""

from __future__ import annotations

import pytest

from gpuclass.shared.core.admission.decisions import Allowed
from tests.shared.core.admission.vmi_admission import (
    RES,
    TOL_W,
    causes_of,
    cls,
    create,
    gpus,
    gpus_op,
    ops_of,
    tolerations_op,
    vmi,
)


def test_4_2_gpus_beside_classes_refused() -> None:
    obj = vmi([cls("whole")])
    obj["spec"]["domain"]["devices"]["gpus"] = [{"name": "mine", "deviceName": RES["whole"]}]
    assert causes_of(create(obj)) == [
        ("spec.domain.devices.gpus", "invalid", "RawRequestBesideClasses")
    ]


def test_4_2_gpus_beside_classes_refused_even_for_a_foreign_resource() -> None:
    obj = vmi([cls("whole")])
    obj["spec"]["domain"]["devices"]["gpus"] = [{"name": "mine", "deviceName": "other.example/gpu"}]
    assert causes_of(create(obj)) == [
        ("spec.domain.devices.gpus", "invalid", "RawRequestBesideClasses")
    ]


def test_4_2_already_resolved_yields_no_operations() -> None:
    obj = vmi([cls("whole", 2)])
    obj["spec"]["domain"]["devices"]["gpus"] = gpus(RES["whole"], RES["whole"])
    obj["spec"]["tolerations"] = [TOL_W]
    assert create(obj) == Allowed()


def test_4_2_resolved_gpus_but_missing_toleration_adds_only_the_toleration() -> None:
    obj = vmi([cls("whole", 2)])
    obj["spec"]["domain"]["devices"]["gpus"] = gpus(RES["whole"], RES["whole"])
    assert ops_of(create(obj)) == [{"op": "add", "path": "/spec/tolerations", "value": [TOL_W]}]


@pytest.mark.parametrize(
    ("where", "resource", "path"),
    [
        pytest.param(
            "hostDevices",
            RES["lic"],
            "spec.domain.devices.hostDevices[0].deviceName",
            id="host-device-other-class",
        ),
        pytest.param(
            "hostDevices",
            RES["whole"],
            "spec.domain.devices.hostDevices[0].deviceName",
            id="host-device-same-class",
        ),
        pytest.param(
            "requests",
            RES["whole"],
            f"spec.domain.resources.requests[{RES['whole']}]",
            id="resources-requests",
        ),
        pytest.param(
            "limits",
            RES["byol"],
            f"spec.domain.resources.limits[{RES['byol']}]",
            id="resources-limits",
        ),
        pytest.param(
            "requests",
            RES["unpermitted"],
            f"spec.domain.resources.requests[{RES['unpermitted']}]",
            id="any-catalog-class",
        ),
    ],
)
def test_4_2_catalog_resource_requested_beside_classes(
    where: str, resource: str, path: str
) -> None:
    obj = vmi([cls("whole")])
    if where == "hostDevices":
        obj["spec"]["domain"]["devices"]["hostDevices"] = [{"name": "hd", "deviceName": resource}]
    else:
        obj["spec"]["domain"]["resources"] = {where: {resource: "1", "memory": "1Gi"}}
    assert causes_of(create(obj)) == [(path, "invalid", "RawRequestBesideClasses")]


def test_4_2_foreign_host_device_beside_classes_is_fine() -> None:
    obj = vmi([cls("whole")])
    obj["spec"]["domain"]["devices"]["hostDevices"] = [
        {"name": "nic", "deviceName": "example.org/sriov-nic"}
    ]
    obj["spec"]["domain"]["resources"] = {"requests": {"memory": "8Gi"}}
    assert create(obj) == Allowed((gpus_op(RES["whole"]), tolerations_op(TOL_W)))
