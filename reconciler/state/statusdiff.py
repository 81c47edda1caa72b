"""Compare a class's stored status with the computed one: whether to write, what, and which Events.

The reconciler writes only when something changed, and "something" is the whole
status dict: no field is ignored, so a hand-edited or stale field is repaired. The
write is a JSON merge patch (RFC 7386) that turns the stored status into the
computed one exactly: changed keys get their new value, keys we no longer write get
`null`, and lists (conditions) are replaced whole.

A condition *transition* — a type whose `status` flips, or the first status a class
ever gets — becomes an Event, so `kubectl describe gpuclass` tells the story.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

# Conditions whose True status is a problem; Ready and Schedulable are the other way round.
PROBLEM_CONDITIONS = frozenset(
    {"ResourceNameConflict", "ResourceNameNotPermitted", "LicenseSecretMissing"}
)
GOOD_WHEN_TRUE = frozenset({"Ready", "Schedulable"})
NOT_A_PROBLEM = frozenset({("Schedulable", "AllUnitsInUse")})
"""False for a reason that is a normal state: a sold-out class (docs/contract.md 6.8) is capacity,
not a fault, so its flip is a Normal Event (and GPUClassNoFreeUnits, info, its alert)."""
_MISSING: Any = object()


def merge_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The RFC 7386 patch that turns `old` into `new` (empty when they are equal)."""
    patch: dict[str, Any] = {}
    for key, value in new.items():
        before = old.get(key, _MISSING)
        if isinstance(value, dict) and isinstance(before, dict):
            inner = merge_patch(before, value)
            if inner:
                patch[key] = inner
        elif before is _MISSING or before != value or type(before) is not type(value):
            patch[key] = value
    for key in old:
        if key not in new:
            patch[key] = None
    return patch


def status_patch(
    stored: Mapping[str, Any] | None, computed: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The merge patch of `status`, or None when the stored status already equals the computed one."""
    return merge_patch(stored or {}, computed) or None


@dataclass(frozen=True, slots=True)
class Transition:
    """One condition that flipped, as the Event it becomes: `type` Warning when the new state is a
    problem, Normal otherwise (a recovery, or a sold-out class)."""

    condition: str
    status: str
    reason: str
    message: str
    type: Literal["Normal", "Warning"]


def _conditions(status: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    raw = status.get("conditions") if status else None
    if not isinstance(raw, list):
        return {}
    return {c["type"]: c for c in raw if isinstance(c, dict) and isinstance(c.get("type"), str)}


def _is_problem(condition: str, status: str, *, reason: str) -> bool:
    if (condition, reason) in NOT_A_PROBLEM:
        return False
    if condition in GOOD_WHEN_TRUE:
        return status != "True"
    return condition in PROBLEM_CONDITIONS and status == "True"


def transitions(stored: Mapping[str, Any] | None, computed: Mapping[str, Any]) -> list[Transition]:
    """Conditions whose status flips; for a class's first status, its Ready condition only."""
    before = _conditions(stored)
    after = _conditions(computed)
    if not before:
        wanted = [after["Ready"]] if "Ready" in after else []
    else:
        wanted = [
            c
            for t, c in after.items()
            if t in before and before[t].get("status") != c.get("status")
        ]
    return [
        Transition(
            condition=str(c["type"]),
            status=str(c.get("status")),
            reason=str(c.get("reason") or c["type"]),
            message=str(c.get("message") or ""),
            type="Warning"
            if _is_problem(str(c["type"]), str(c.get("status")), reason=str(c.get("reason")))
            else "Normal",
        )
        for c in wanted
    ]
