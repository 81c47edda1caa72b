"""Rule 4.4 (docs/contract.md section 4): totals per class within the effective maxCount, 1024
units in all, vGPUs from one class (422).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpuclass.shared.core.admission.decisions import Denied
from gpuclass.shared.core.model.snapshot import SnapshotBuilder
from gpuclass.shared.core.status.catalog import Policy, build_catalog
from tests.shared.core.admission.vmi_admission import (
    ANN,
    OBJECTS,
    RES,
    TOL_F,
    TOL_W,
    causes_of,
    cls,
    create,
    gpus_op,
    ops_of,
    tolerations_op,
    vmi,
)

W = RES["whole"]


@pytest.mark.parametrize(
    ("selection", "namespace", "causes", "operations"),
    [
        pytest.param(
            [cls("whole", 8)],
            "tenant-a",
            [],
            [gpus_op(*[W] * 8), tolerations_op(TOL_W)],
            id="passthrough-default-limit-is-max-units-per-node",
        ),
        pytest.param(
            [cls("whole", 9)],
            "tenant-a",
            [(ANN, "MaxCountExceeded")],
            None,
            id="passthrough-over-default-limit",
        ),
        pytest.param(
            [cls("whole", 5), cls("whole", 4)],
            "tenant-a",
            [(ANN, "MaxCountExceeded")],
            None,
            id="repeated-entries-add-up",
        ),
        pytest.param(
            [cls("capped", 2)],
            "tenant-a",
            [],
            [gpus_op(RES["capped"], RES["capped"])],
            id="explicit-max-count",
        ),
        pytest.param(
            [cls("capped", 3)],
            "tenant-a",
            [(ANN, "MaxCountExceeded")],
            None,
            id="over-explicit-max-count",
        ),
        pytest.param(
            [cls("fresh", 50)],
            "tenant-a",
            [],
            [gpus_op(*[RES["fresh"]] * 50), tolerations_op(TOL_F)],
            id="no-node-yet-no-limit",
        ),
        pytest.param(
            [cls("byol", 2)],
            "tenant-a",
            [(ANN, "MaxCountExceeded")],
            None,
            id="vgpu-default-limit-one",
        ),
        pytest.param(
            [cls("byol"), cls("byol")],
            "tenant-a",
            [(ANN, "MaxCountExceeded")],
            None,
            id="repeated-vgpu-over-limit",
        ),
        pytest.param(
            [cls("big", 1024)], "tenant-a", [], [gpus_op(*[RES["big"]] * 1024)], id="1024-units"
        ),
        pytest.param(
            [cls("big", 1025)], "tenant-a", [(ANN, "TooManyUnits")], None, id="over-1024-one-class"
        ),
        pytest.param(
            [cls("big", 1020), cls("whole", 5)],
            "tenant-a",
            [(ANN, "TooManyUnits")],
            None,
            id="over-1024-across-classes",
        ),
        pytest.param(
            [cls("byol"), cls("byol2")],
            "tenant-root",
            [(ANN, "MultipleVGPUClasses")],
            None,
            id="two-vgpu-classes",
        ),
        pytest.param(
            [cls("byol"), cls("whole")],
            "tenant-root",
            [],
            [gpus_op(RES["byol"], W), tolerations_op(TOL_W)],
            id="one-vgpu-and-passthrough",
        ),
    ],
)
def test_4_4_limits(
    selection: list[Any],
    namespace: str,
    causes: list[tuple[str, str]],
    operations: list[dict[str, Any]] | None,
) -> None:
    """Within the limits the VMI gets rule 4.6's patch: every unit asked for, whatever its number."""
    decision = create(vmi(selection, namespace=namespace))
    if causes:
        assert isinstance(decision, Denied), decision
        assert [(c.field, c.code) for c in decision.causes] == causes
        assert decision.code == 422
    else:
        assert ops_of(decision) == operations


@pytest.mark.parametrize(
    ("count", "shown"),
    [
        pytest.param(str(2**64), str(2**64), id="two-to-the-64"),
        pytest.param(str(2**64 - 1), str(2**64 - 1), id="largest-64-bit"),
        pytest.param(str(10**30), str(10**30), id="ten-to-the-30"),
        pytest.param("9" * 2000, "more than 10^40", id="two-thousand-digits"),
    ],
)
def test_4_4_huge_counts_get_the_limit_cause(count: str, shown: str) -> None:
    """A count past 64 bits is a whole number: far too many units, not "not a whole number"."""
    decision = create(vmi(raw=f'[{{"className": "whole", "count": {count}}}]'))
    assert causes_of(decision) == [
        (ANN, "invalid", "TooManyUnits"),
        (ANN, "invalid", "MaxCountExceeded"),
    ]
    assert isinstance(decision, Denied)
    assert decision.causes[0].message == f"requests {shown} GPU units; at most 1024 per VMI"


def test_4_4_messages_name_the_limit() -> None:
    decision = create(vmi([cls("whole", 9)]))
    assert isinstance(decision, Denied)
    assert decision.causes[0].message == "class whole: 9 units requested, at most 8 per VM"


def test_4_4_stored_figures_give_the_default_limit_in_a_cluster() -> None:
    # In a cluster the webhook reads status.maxUnitsPerNode instead of counting nodes.
    stored = copy.deepcopy(OBJECTS)
    stored[0]["status"] = {"maxUnitsPerNode": 3, "maxFreePerNode": 3}
    cat = build_catalog(
        SnapshotBuilder().add_all(stored), Policy(vgpu_entitled=True), figures="stored"
    )
    assert ops_of(create(vmi([cls("whole", 3)]), cat)) == [
        gpus_op(*[RES["whole"]] * 3),
        tolerations_op(TOL_W),
    ]
    refused = create(vmi([cls("whole", 4)]), cat)
    assert isinstance(refused, Denied)
    assert [(c.field, c.code) for c in refused.causes] == [(ANN, "MaxCountExceeded")]
