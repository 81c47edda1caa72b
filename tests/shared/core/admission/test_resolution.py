"""What a catalog remembers of a selection (`resolution.resolve`) never changes an answer
(docs/contract.md section 4): a review resolves its annotation once per catalog and reuses it,
while everything that depends on the object (namespace, labels, existing GPUs and tolerations,
Secret references) is judged again by `judge_create`.
"""

from __future__ import annotations

import copy
import gc
import json
from collections.abc import Callable
from typing import Any

import jsonpatch
import pytest

from gpuclass.shared.core.admission import resolution
from gpuclass.shared.core.admission.decisions import Allowed, Denied
from gpuclass.shared.core.admission.resolution import (
    REMEMBERED_UNITS,
    RESOLUTIONS_REMEMBERED,
    judge_create,
    remembered,
)
from gpuclass.shared.core.model.snapshot import SnapshotBuilder
from gpuclass.shared.core.status.catalog import Catalog, Policy, build_catalog
from tests.shared.core.admission.vmi_admission import (
    ANN,
    ANN_KEY,
    OBJECTS,
    POOL,
    RES,
    TOL_W,
    catalog,
    cls,
    create,
    gpus,
    gpus_op,
    ops_of,
    tolerations_op,
    vmi,
)

Edit = Callable[[dict[str, Any]], None]


def _with_toleration(obj: dict[str, Any]) -> None:
    obj["spec"]["tolerations"] = [TOL_W]


def _with_gpus(obj: dict[str, Any]) -> None:
    obj["spec"]["domain"]["devices"]["gpus"] = gpus(RES["pci"])


def _pool(obj: dict[str, Any]) -> None:
    obj["metadata"]["labels"] = dict(POOL)


def _unentitled(obj: dict[str, Any]) -> None:
    obj["metadata"]["namespace"] = "tenant-c"


# (selection, how the object differs from the plain VMI, the contract's answer: the causes'
# codes, or the operations' paths when allowed)
ROWS: list[Any] = [
    pytest.param(
        [cls("whole", 2)], None, ["/spec/domain/devices/gpus", "/spec/tolerations"], id="plain"
    ),
    pytest.param(
        [cls("whole", 2)], _with_toleration, ["/spec/domain/devices/gpus"], id="toleration-present"
    ),
    pytest.param(
        [cls("whole", 2)], _with_gpus, ["RawRequestBesideClasses"], id="gpus-beside-classes"
    ),
    pytest.param([cls("byol")], None, ["/spec/domain/devices/gpus"], id="vgpu-entitled"),
    pytest.param([cls("byol")], _unentitled, ["NotEntitled"], id="vgpu-unentitled-namespace"),
    pytest.param([cls("byol")], _pool, ["WorkerPoolVGPU"], id="vgpu-worker-pool"),
]


def _answer(obj: dict[str, Any], cat: Catalog) -> list[str]:
    decision = create(obj, cat)
    if isinstance(decision, Denied):
        return [str(c.code) for c in decision.causes]
    return [op["path"] for op in decision.operations]


@pytest.mark.parametrize(("selection", "edit", "expected"), ROWS)
def test_an_annotation_seen_before_is_judged_on_each_object(
    selection: list[dict[str, Any]], edit: Edit | None, expected: list[str]
) -> None:
    remembering = catalog()
    for row in ROWS:  # every row's annotation in memory, judged on other objects first
        create(vmi(row.values[0]), remembering)
        create(vmi(row.values[0], namespace="tenant-c"), remembering)
    obj = vmi(selection)
    if edit:
        edit(obj)
    first, second = _answer(obj, remembering), _answer(obj, remembering)
    assert first == second == expected
    assert create(obj, remembering) == create(obj, catalog())  # a catalog with nothing remembered
    assert json.dumps(selection) in remembered(remembering)


def test_a_new_catalog_remembers_nothing_of_the_old_one() -> None:
    # `capped` allows 2 units per VM; a catalog built after the class changed to 1 refuses 2.
    before = catalog()
    obj = vmi([cls("capped", 2)])
    assert ops_of(create(obj, before)) == [gpus_op(RES["capped"], RES["capped"])]
    objects = [copy.deepcopy(o) for o in OBJECTS]
    for o in objects:
        if o["metadata"]["name"] == "capped":
            o["spec"]["maxCount"] = 1
    after = build_catalog(
        SnapshotBuilder().add_all(objects), Policy(vgpu_entitled=True), figures="computed"
    )
    decision = create(obj, after)
    assert isinstance(decision, Denied)
    assert [(c.field, c.code) for c in decision.causes] == [(ANN, "MaxCountExceeded")]
    # the old catalog still answers as it did
    assert ops_of(create(obj, before)) == [gpus_op(RES["capped"], RES["capped"])]


def test_the_memory_is_bounded_whatever_a_tenant_sends() -> None:
    cat = catalog()
    for spaces in range(3 * RESOLUTIONS_REMEMBERED):  # as many distinct annotations
        obj = vmi(raw="[" + " " * spaces + json.dumps(cls("whole", 1)) + "]")
        assert create(obj, cat) == Allowed((gpus_op(RES["whole"]), tolerations_op(TOL_W)))
        assert len(remembered(cat)) <= RESOLUTIONS_REMEMBERED
    # A resolution of more units than an honest VM asks for is judged, never kept.
    big = vmi([cls("big", REMEMBERED_UNITS + 1)])
    assert len(ops_of_gpus(create(big, cat))) == REMEMBERED_UNITS + 1
    assert big["metadata"]["annotations"][ANN_KEY] not in remembered(cat)


def test_a_catalog_s_memory_leaves_with_it() -> None:
    # The webhook builds a new catalog after every change it watches: the memory of an old one
    # must not outlive it, however many are built.
    obj = vmi([cls("whole", 1)])
    before = len(resolution._MEMORIES)
    for _ in range(50):
        cat = catalog()
        create(obj, cat)
        assert remembered(cat)
    del cat
    gc.collect()
    assert len(resolution._MEMORIES) == before


def ops_of_gpus(decision: Any) -> list[dict[str, Any]]:
    assert isinstance(decision, Allowed), decision
    return [e for op in decision.operations if op["path"].endswith("/gpus") for e in op["value"]]


def test_changing_an_answer_does_not_change_the_next_one() -> None:
    cat = catalog()
    obj = vmi([cls("whole", 2)])
    first = judge_create(obj, "tenant-a", catalog=cat)
    patched = jsonpatch.apply_patch(obj, list(first.operations))
    for entry in patched["spec"]["domain"]["devices"]["gpus"]:  # a caller edits what it got
        entry["deviceName"] = "example.com/other"
    assert first.gpus is not None
    for entry in first.gpus:
        entry["name"] = "edited"
    again = judge_create(obj, "tenant-a", catalog=cat)
    assert again.gpus == tuple(gpus(RES["whole"], RES["whole"]))
