"""Rule 4.3 (docs/contract.md section 4): each selected class exists, is not deleting, owns its
resource and is permitted (403), judged once per class at its first entry.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuclass.shared.core.admission.decisions import Denied
from gpuclass.shared.core.model.snapshot import SnapshotBuilder
from gpuclass.shared.core.status.catalog import Policy, build_catalog
from tests.shared.core.admission.vmi_admission import (
    ANN,
    OBJECTS,
    causes_of,
    cls,
    create,
    vmi,
)


@pytest.mark.parametrize(
    ("name", "code", "text"),
    [
        pytest.param(
            "no-such-class",
            "ClassNotFound",
            "class no-such-class is not in the catalog",
            id="not-found",
        ),
        pytest.param("gone", "ClassDeleting", "class gone is being deleted", id="deleting"),
        pytest.param(
            "dup",
            "ResourceNameConflict",
            "class whole already uses its resource",
            id="loses-conflict",
        ),
        pytest.param(
            "unpermitted",
            "ResourceNameNotPermitted",
            "not permitted by KubeVirt",
            id="not-permitted",
        ),
        pytest.param(
            "broken", "ClassInvalid", "class broken has an invalid spec", id="invalid-spec"
        ),
    ],
)
def test_4_3_unavailable_class_refused(name: str, code: str, text: str) -> None:
    decision = create(vmi([cls(name)]))
    assert causes_of(decision) == [(f"{ANN}[0].className", "forbidden", code)]
    assert isinstance(decision, Denied) and decision.code == 403
    assert text in decision.causes[0].message


@pytest.mark.parametrize(
    ("selection", "causes"),
    [
        pytest.param(
            [cls("gone"), cls("whole"), cls("gone")],
            [(f"{ANN}[0].className", "forbidden", "ClassDeleting")],
            id="deleting-class-twice-one-cause",
        ),
        pytest.param(
            [cls("no-such-class")] * 16,
            [(f"{ANN}[0].className", "forbidden", "ClassNotFound")],
            id="unknown-class-16-times-one-cause",
        ),
        pytest.param(
            [cls("whole"), cls("no-such-class"), cls("gone"), cls("no-such-class")],
            [
                (f"{ANN}[1].className", "forbidden", "ClassNotFound"),
                (f"{ANN}[2].className", "forbidden", "ClassDeleting"),
            ],
            id="each-bad-class-once-at-its-first-entry",
        ),
        pytest.param(
            [cls("byol")] * 3,
            [
                (ANN, "invalid", "MaxCountExceeded"),
                (f"{ANN}[0].className", "forbidden", "NotEntitled"),
            ],
            id="unentitled-vgpu-class-three-times-one-entitlement-cause",
        ),
    ],
)
def test_4_3_one_cause_per_distinct_class(
    selection: list[Any], causes: list[tuple[str, str, str]]
) -> None:
    """docs/decisions.md "Bounded work per review": a class repeated is judged once, at its first entry."""
    assert causes_of(create(vmi(selection, namespace="tenant-c"))) == causes


def test_4_3_without_kubevirt_nothing_is_permitted() -> None:
    objs = [o for o in OBJECTS if o["kind"] != "KubeVirt"]
    cat = build_catalog(
        SnapshotBuilder().add_all(objs), Policy(vgpu_entitled=True), figures="computed"
    )
    assert causes_of(create(vmi([cls("whole")]), cat)) == [
        (f"{ANN}[0].className", "forbidden", "ResourceNameNotPermitted")
    ]
