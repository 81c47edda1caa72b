"""When to write a status, the exact merge patch, and which condition changes become Events."""

from __future__ import annotations

from typing import Any

import pytest

from gpuclass.reconciler.api.fake import apply_merge_patch
from gpuclass.reconciler.state.statusdiff import merge_patch, status_patch, transitions


def cond(type_: str, status: str, reason: str = "R") -> dict[str, Any]:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": f"{type_} message",
        "lastTransitionTime": "T",
        "observedGeneration": 1,
    }


COMPUTED = {
    "free": 2,
    "maxFreePerNode": 2,
    "maxUnitsPerNode": 4,
    "observedGeneration": 1,
    "conditions": [cond("ResourceNameConflict", "False"), cond("Ready", "True")],
}


@pytest.mark.parametrize(
    ("stored", "expected"),
    [
        pytest.param(None, COMPUTED, id="no-status-yet-writes-all"),
        pytest.param(COMPUTED, None, id="equal-no-write"),
        pytest.param({**COMPUTED, "free": 3}, {"free": 2}, id="one-figure"),
        pytest.param({**COMPUTED, "free": True}, {"free": 2}, id="type-matters-true-is-not-1"),
        pytest.param({**COMPUTED, "stale": "x"}, {"stale": None}, id="unknown-field-removed"),
        pytest.param(
            {k: v for k, v in COMPUTED.items() if k != "observedGeneration"},
            {"observedGeneration": 1},
            id="missing-field-added",
        ),
        pytest.param(
            {**COMPUTED, "conditions": [cond("Ready", "True")]},
            {"conditions": COMPUTED["conditions"]},
            id="conditions-replaced-whole",
        ),
    ],
)
def test_status_patch(stored: dict[str, Any] | None, expected: dict[str, Any] | None) -> None:
    patch = status_patch(stored, COMPUTED)
    assert patch == expected
    if patch is not None:
        assert apply_merge_patch(stored, patch) == COMPUTED


def test_merge_patch_recurses_into_objects() -> None:
    old = {"a": {"b": 1, "c": 2}, "d": 1}
    new = {"a": {"b": 1, "c": 3}, "d": 1}
    assert merge_patch(old, new) == {"a": {"c": 3}}
    assert apply_merge_patch(old, merge_patch(old, new)) == new


@pytest.mark.parametrize(
    ("stored", "expected"),
    [
        pytest.param(None, [("Ready", "True", "Normal")], id="first-status-reports-ready"),
        pytest.param(COMPUTED, [], id="nothing-flipped"),
        pytest.param(
            {"conditions": [cond("ResourceNameConflict", "True"), cond("Ready", "False")]},
            [("ResourceNameConflict", "False", "Normal"), ("Ready", "True", "Normal")],
            id="recovered",
        ),
    ],
)
def test_transitions(stored: dict[str, Any] | None, expected: list[tuple[str, str, str]]) -> None:
    assert [(t.condition, t.status, t.type) for t in transitions(stored, COMPUTED)] == expected


def test_problem_turning_true_is_a_warning() -> None:
    computed = {
        "conditions": [
            cond("LicenseSecretMissing", "True", "SecretUnusable"),
            cond("Ready", "False"),
        ]
    }
    stored = {"conditions": [cond("LicenseSecretMissing", "False"), cond("Ready", "True")]}
    found = transitions(stored, computed)
    assert [(t.condition, t.type, t.reason) for t in found] == [
        ("LicenseSecretMissing", "Warning", "SecretUnusable"),
        ("Ready", "Warning", "R"),
    ]


@pytest.mark.parametrize(
    ("reason", "event_type"),
    [
        # Sold out is capacity, not a fault (docs/contract.md 6.8): a Normal Event.
        pytest.param("AllUnitsInUse", "Normal", id="sold-out-is-normal"),
        # Capacity that exists but cannot be used is a problem: a Warning.
        pytest.param("NoEligibleNode", "Warning", id="no-eligible-node-warns"),
        pytest.param("NoNodeAdvertises", "Warning", id="no-node-advertises-warns"),
        pytest.param("ClassNotReady", "Warning", id="not-ready-warns"),
    ],
)
def test_schedulable_turning_false(reason: str, event_type: str) -> None:
    stored = {"conditions": [cond("Ready", "True"), cond("Schedulable", "True", "CanStart")]}
    computed = {"conditions": [cond("Ready", "True"), cond("Schedulable", "False", reason)]}
    found = transitions(stored, computed)
    assert [(t.condition, t.status, t.reason, t.type) for t in found] == [
        ("Schedulable", "False", reason, event_type)
    ]
