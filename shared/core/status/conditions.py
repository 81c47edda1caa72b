"""A class's conditions (docs/contract.md section 6): ResourceNameConflict,
ResourceNameNotPermitted, LicenseSecretMissing, Ready and Schedulable, one function each, and
what the rules derive about a class from the rest of the catalog (:class:`ClassState`).

Pure: records, a survey and `now` in, condition dicts out; `lastTransitionTime` moves only when
a condition's status flips. :mod:`shared.core.status.availability` puts them in the status.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuclass.shared.core.base import names
from gpuclass.shared.core.model.snapshot import ClassRecord, Snapshot
from gpuclass.shared.core.status.capacity import Capacity, Survey
from gpuclass.shared.core.status.schedulable import schedulable


def license_problem(
    record: ClassRecord, snapshot: Snapshot, *, license_namespace: str
) -> str | None:
    """Why a licensed class's source Secret is unusable, or None when it is fine (or unlicensed)."""
    if record.spec is None or record.spec.license is None:
        return None
    secret_name = record.spec.license.secret_name
    secret = snapshot.secrets.get((license_namespace, secret_name))
    if secret is None:
        return f"Secret {license_namespace}/{secret_name} not found"
    token = secret.data.get(names.TOKEN_KEY)
    if token is None or not token.reveal():
        return f"Secret {license_namespace}/{secret_name} has no non-empty key {names.TOKEN_KEY}"
    return None


def _condition(
    type_: str,
    true: bool,
    *,
    reason: str,
    message: str,
    previous: Mapping[str, Any] | None,
    now: str,
    generation: int,
) -> dict[str, Any]:
    status = "True" if true else "False"
    keep = (
        previous is not None
        and previous.get("status") == status
        and previous.get("lastTransitionTime")
    )
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": previous["lastTransitionTime"] if keep and previous else now,
        "observedGeneration": generation,
    }


def conflict_condition(resource: str, conflict_with: str | None, **at: Any) -> dict[str, Any]:
    """`ResourceNameConflict` (6.4): True when an older class uses the same resourceName."""
    return _condition(
        "ResourceNameConflict",
        conflict_with is not None,
        reason="ResourceNameInUse" if conflict_with else "ResourceNameUnique",
        message=f"class {conflict_with} already uses {resource}; this offer is not available"
        if conflict_with
        else f"no older class uses {resource}",
        **at,
    )


def permission_condition(
    resource: str, permitted: frozenset[str] | None, *, no_kubevirt: str | None, **at: Any
) -> dict[str, Any]:
    """`ResourceNameNotPermitted` (6.4): the deployed KubeVirt CR's permittedHostDevices, or why
    no CR is read (`no_kubevirt`)."""
    if permitted is None:
        return _condition(
            "ResourceNameNotPermitted",
            True,
            reason="NoKubeVirt",
            message=no_kubevirt or "no KubeVirt CR found: configure KubeVirt first",
            **at,
        )
    if resource in permitted:
        message = f"{resource} is in KubeVirt's permittedHostDevices"
        return _condition(
            "ResourceNameNotPermitted", False, reason="Permitted", message=message, **at
        )
    message = f"{resource} is missing from KubeVirt's permittedHostDevices"
    return _condition(
        "ResourceNameNotPermitted", True, reason="NotPermitted", message=message, **at
    )


def license_condition(record: ClassRecord, problem: str | None, **at: Any) -> dict[str, Any]:
    """`LicenseSecretMissing` (6.4): a licensed class's source Secret, or that none is needed."""
    licensed = record.spec is not None and record.spec.license is not None
    if problem is not None:
        return _condition(
            "LicenseSecretMissing", True, reason="SecretUnusable", message=problem, **at
        )
    if licensed:
        message = "the licence source Secret is usable"
        return _condition(
            "LicenseSecretMissing", False, reason="SecretFound", message=message, **at
        )
    message = "this class delivers no platform licence"
    return _condition("LicenseSecretMissing", False, reason="NotLicensed", message=message, **at)


def compute_conditions(
    record: ClassRecord,
    *,
    conflict_with: str | None,
    permitted: frozenset[str] | None,
    license: str | None,
    previous: Sequence[Mapping[str, Any]],
    now: str,
    no_kubevirt: str | None = None,
) -> list[dict[str, Any]]:
    """The contract's four conditions (6.4), always all present; lastTransitionTime kept unless
    status flips. :func:`compute_status` appends the fifth, `Schedulable` (6.8). `no_kubevirt`
    says why no KubeVirt CR is read when `permitted` is None (`Snapshot.kubevirt_problem`)."""
    before = {c.get("type"): c for c in previous if isinstance(c, dict)}
    resource = record.resource_name or "(invalid spec)"

    def at(kind: str) -> dict[str, Any]:
        return {"previous": before.get(kind), "now": now, "generation": record.generation}

    conditions = [
        conflict_condition(resource, conflict_with, **at("ResourceNameConflict")),
        permission_condition(
            resource, permitted, no_kubevirt=no_kubevirt, **at("ResourceNameNotPermitted")
        ),
        license_condition(record, license, **at("LicenseSecretMissing")),
    ]
    failing = [c["type"] for c in conditions if c["status"] == "True"]
    conditions.append(
        _condition(
            "Ready",
            not failing and not record.problems,
            reason=_ready_reason(record, failing),
            message=_ready_message(record, failing),
            **at("Ready"),
        )
    )
    return conditions


MAX_LISTED_PROBLEMS = 5


def _ready_reason(record: ClassRecord, failing: list[str]) -> str:
    """InvalidSpec first: the four condition types stay fixed, the reason says why not ready."""
    if record.problems:
        return "InvalidSpec"
    return "NotReady" if failing else "Ready"


def _ready_message(record: ClassRecord, failing: list[str]) -> str:
    if record.problems:
        listed = "; ".join(record.problems[:MAX_LISTED_PROBLEMS])
        extra = len(record.problems) - MAX_LISTED_PROBLEMS
        more = f"; and {extra} more" if extra > 0 else ""
        return f"invalid spec, not selectable: {listed}{more}"
    return "the offer is available" if not failing else "not available: " + ", ".join(failing)


@dataclass(frozen=True, slots=True)
class ClassState:
    """Everything the rules derive about one class from the rest of the catalog."""

    conflict_with: str | None
    permitted: bool
    license_problem: str | None


def class_state(
    record: ClassRecord, snapshot: Snapshot, *, winners: Mapping[str, str], license_namespace: str
) -> ClassState:
    """The class's conflict winner, permission and license problem, for the conditions and the
    admission catalog alike."""
    resource = record.resource_name
    winner = winners.get(resource) if resource else None
    return ClassState(
        conflict_with=winner if winner is not None and winner != record.name else None,
        permitted=snapshot.permitted is not None
        and resource is not None
        and resource in snapshot.permitted,
        license_problem=license_problem(record, snapshot, license_namespace=license_namespace),
    )


def schedulable_condition(
    record: ClassRecord,
    found: Survey,
    *,
    capacity: Capacity,
    ready: Mapping[str, Any],
    previous: Mapping[str, Any] | None,
    now: str,
) -> dict[str, Any]:
    """The fifth condition, `Schedulable` (docs/contract.md 6.8), from the survey and `Ready`."""
    verdict = schedulable(
        record,
        capacity,
        free=found.free,
        max_free_per_node=found.max_free_per_node,
        max_units_per_node=found.max_units_per_node,
        not_ready=None if ready.get("status") == "True" else str(ready.get("message") or ""),
    )
    return _condition(
        names.SCHEDULABLE,
        verdict.status,
        reason=verdict.reason,
        message=verdict.message,
        previous=previous,
        now=now,
        generation=record.generation,
    )
