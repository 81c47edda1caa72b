"""Rule 4.7 (docs/contract.md section 4): a shortage is a warning, not a refusal."""

from __future__ import annotations

import pytest

from gpuclass.shared.core.admission.decisions import Allowed
from gpuclass.shared.core.model.snapshot import SnapshotBuilder
from gpuclass.shared.core.status.catalog import Policy, build_catalog
from tests.shared.core.admission.vmi_admission import (
    OBJECTS,
    RES,
    TOL_F,
    TOL_W,
    cls,
    create,
    gpus_op,
    tolerations_op,
    vmi,
)


@pytest.mark.parametrize(
    ("count", "warnings"),
    [
        pytest.param(2, (), id="enough-free"),
        pytest.param(
            3, ("class whole: no node has 3 free units now; the VM will wait",), id="shortage-warns"
        ),
    ],
)
def test_4_7_capacity_shortage(count: int, warnings: tuple[str, ...]) -> None:
    decision = create(vmi([cls("whole", count)]))
    assert decision == Allowed(
        (gpus_op(*[RES["whole"]] * count), tolerations_op(TOL_W)), warnings
    ), "allowed with its patch whatever the shortage"


def test_4_7_no_stored_status_no_warning() -> None:
    cat = build_catalog(
        SnapshotBuilder().add_all(OBJECTS), Policy(vgpu_entitled=True), figures="stored"
    )
    decision = create(vmi([cls("fresh", 3)]), cat)
    assert decision == Allowed((gpus_op(*[RES["fresh"]] * 3), tolerations_op(TOL_F)), ())
