"""Rule 4.6 (docs/contract.md section 4): the patch. GPU entries per class in first-appearance
order named gpu1..gpuN, the class tolerations appended once, the license volume and disk of
section 1; nothing removed or reordered, and applying the result again yields nothing.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpuclass.shared.core.admission.decisions import Denied
from tests.shared.core.admission.vmi_admission import (
    LICENSE_DISK,
    LICENSE_VOLUME,
    RES,
    TOL_F,
    TOL_W,
    applied,
    assert_reinvocation_is_a_no_op,
    causes_of,
    cls,
    create,
    gpus,
    ops_of,
    vmi,
)


def test_4_6_whole_gpu_exact_operations() -> None:
    obj = vmi([cls("whole", 2)])
    decision = create(obj)
    assert ops_of(decision) == [
        {
            "op": "add",
            "path": "/spec/domain/devices/gpus",
            "value": gpus(RES["whole"], RES["whole"]),
        },
        {"op": "add", "path": "/spec/tolerations", "value": [TOL_W]},
    ]
    assert_reinvocation_is_a_no_op(obj, decision)


def test_4_6_classes_in_first_appearance_order_named_across_the_vmi() -> None:
    obj = vmi([cls("fresh"), cls("whole"), cls("fresh", 2)])
    decision = create(obj)
    assert ops_of(decision) == [
        {
            "op": "add",
            "path": "/spec/domain/devices/gpus",
            "value": gpus(RES["fresh"], RES["fresh"], RES["fresh"], RES["whole"]),
        },
        {"op": "add", "path": "/spec/tolerations", "value": [TOL_F]},
        {"op": "add", "path": "/spec/tolerations/-", "value": TOL_W},
    ]
    assert_reinvocation_is_a_no_op(obj, decision)


def test_4_6_licensed_vgpu_gets_volume_and_disk() -> None:
    obj = vmi([cls("lic")])
    decision = create(obj)
    assert ops_of(decision) == [
        {"op": "add", "path": "/spec/domain/devices/gpus", "value": gpus(RES["lic"])},
        {"op": "add", "path": "/spec/volumes/-", "value": LICENSE_VOLUME},
        {"op": "add", "path": "/spec/domain/devices/disks/-", "value": LICENSE_DISK},
    ]
    assert_reinvocation_is_a_no_op(obj, decision)


def test_4_6_byol_gets_no_license_volume() -> None:
    assert ops_of(create(vmi([cls("byol")]))) == [
        {"op": "add", "path": "/spec/domain/devices/gpus", "value": gpus(RES["byol"])},
    ]


def test_4_6_missing_containers_created() -> None:
    obj = vmi([cls("lic")])
    obj["spec"] = {"domain": {"memory": {"guest": "1Gi"}}, "futureField": {"x": [1, 2]}}
    decision = create(obj)
    assert ops_of(decision) == [
        {"op": "add", "path": "/spec/domain/devices", "value": {"gpus": gpus(RES["lic"])}},
        {"op": "add", "path": "/spec/volumes", "value": [LICENSE_VOLUME]},
        {"op": "add", "path": "/spec/domain/devices/disks", "value": [LICENSE_DISK]},
    ]
    assert applied(obj, decision)["spec"] == {
        "domain": {
            "memory": {"guest": "1Gi"},
            "devices": {"gpus": gpus(RES["lic"]), "disks": [LICENSE_DISK]},
        },
        "futureField": {"x": [1, 2]},
        "volumes": [LICENSE_VOLUME],
    }
    assert_reinvocation_is_a_no_op(obj, decision)


def test_4_6_identical_toleration_not_repeated_others_kept() -> None:
    obj = vmi([cls("whole"), cls("fresh")])
    similar = {**TOL_W, "effect": "NoExecute"}
    obj["spec"]["tolerations"] = [similar, TOL_W]
    decision = create(obj)
    assert ops_of(decision)[1:] == [{"op": "add", "path": "/spec/tolerations/-", "value": TOL_F}]
    assert applied(obj, decision)["spec"]["tolerations"] == [similar, TOL_W, TOL_F]


def test_4_6_unknown_fields_survive_and_nothing_is_reordered() -> None:
    obj = vmi([cls("lic")])
    obj["spec"]["domain"]["devices"]["someNewKubeVirtField"] = {"keep": True}
    obj["spec"]["x-unknown"] = "survives"
    obj["spec"]["volumes"].insert(0, {"name": "first", "emptyDisk": {"capacity": "1Gi"}})
    obj["status"] = {"phase": "Pending"}
    result = applied(obj, create(obj))
    assert result["spec"]["domain"]["devices"]["someNewKubeVirtField"] == {"keep": True}
    assert result["spec"]["x-unknown"] == "survives"
    assert result["spec"]["volumes"][:2] == obj["spec"]["volumes"]
    assert result["metadata"] == obj["metadata"] and result["status"] == obj["status"]


def test_4_6_reserved_license_name_clash_refused() -> None:
    obj = vmi([cls("lic")])
    obj["spec"]["volumes"].append({"name": "gpulicense", "emptyDisk": {"capacity": "1Gi"}})
    assert causes_of(create(obj)) == [("spec.volumes[1]", "invalid", "ReservedName")]


def test_4_6_reserved_disk_name_clash_refused() -> None:
    obj = vmi([cls("lic")])
    obj["spec"]["domain"]["devices"]["disks"].append({"name": "gpulicense", "cdrom": {}})
    assert causes_of(create(obj)) == [("spec.domain.devices.disks[1]", "invalid", "ReservedName")]


def test_4_6_license_volume_already_there_added_once() -> None:
    obj = vmi([cls("lic")])
    obj["spec"]["volumes"].append(copy.deepcopy(LICENSE_VOLUME))
    assert ops_of(create(obj))[1:] == [
        {"op": "add", "path": "/spec/domain/devices/disks/-", "value": LICENSE_DISK}
    ]


@pytest.mark.parametrize(
    ("where", "value"),
    [
        pytest.param(("spec", "volumes"), True, id="volumes-true"),
        pytest.param(("spec", "volumes"), 1.5, id="volumes-number"),
        pytest.param(("spec", "domain", "devices", "disks"), 1, id="disks-number"),
        pytest.param(("spec", "domain", "devices", "disks"), {"name": "x"}, id="disks-object"),
    ],
)
def test_a_license_list_that_is_not_a_list_is_refused(where: tuple[str, ...], value: Any) -> None:
    """The VMI schema is checked only after mutating admission, so the webhook meets these;
    the license volume and disk are appended to lists (section 4, rule 8), never in place of a
    tenant's value."""
    obj = vmi([cls("lic")])
    parent = obj
    for key in where[:-1]:
        parent = parent[key]
    parent[where[-1]] = value
    decision = create(obj)
    assert (".".join(where), "invalid", "Invalid") in causes_of(decision)
    assert isinstance(decision, Denied) and decision.code == 422
