"""Class status (docs/contract.md section 6): free units, per-node figures and conditions.

Pure: a snapshot and `now` in, a status dict out. The reconciler writes what
:func:`compute_status` returns; the offline CLI prints it; the webhook reads the
same figures (stored by the reconciler, or computed here offline) for its
default limit and shortage warning. Nothing here asks whether an event was an
add or an update: the status is a function of the state.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gpuclass.shared.core.base import names
from gpuclass.shared.core.model.snapshot import ClassRecord, NodeRecord, Snapshot
from gpuclass.shared.core.status.capacity import Capacity, Needs, Survey, survey_nodes, surveyed
from gpuclass.shared.core.status.schedulable import schedulable


@dataclass(frozen=True, slots=True)
class Figures:
    """The contract's figures of one class (6.3): free units, maxFreePerNode, maxUnitsPerNode, and
    the eligible-node count; all zero for a conflict loser or an invalid spec."""

    free: int = 0
    max_free_per_node: int = 0
    max_units_per_node: int = 0
    eligible_nodes: int = 0
    allocatable: int = 0
    """Allocatable summed over eligible nodes (the usage metrics: used = allocatable - free)."""


class Surveyor(Protocol):
    """Where a class's survey comes from: :class:`UsageIndex` walks the nodes of its resource; the
    reconciler's per-class tallies (:mod:`reconciler.state.surveys`) give the same survey kept
    current per event."""

    def survey(self, record: ClassRecord, needs: Needs) -> Survey:
        """The survey of a class that surveys something (:func:`capacity.surveyed` is not None),
        `needs` the KubeVirt devices its launcher requests."""
        ...


@dataclass(frozen=True, slots=True)
class UsageIndex:
    """Units requested per resource per node by the pods that hold them; built once per snapshot."""

    used: Mapping[str, Mapping[str, int]]
    nodes_by_resource: Mapping[str, tuple[NodeRecord, ...]]

    @classmethod
    def build(cls, snapshot: Snapshot) -> UsageIndex:
        """Walk every pod and node of the snapshot once (offline and the CLI; the reconciler keeps
        the same index incrementally in :mod:`reconciler.state.usage`)."""
        used: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for pod in snapshot.pods:
            for resource, units in pod.requests.items():
                used[resource][pod.node] += units
        by_resource: dict[str, list[NodeRecord]] = defaultdict(list)
        for node in snapshot.nodes:
            for resource in node.allocatable:
                by_resource[resource].append(node)
        return cls(used, {k: tuple(v) for k, v in by_resource.items()})

    def survey(self, record: ClassRecord, needs: Needs) -> Survey:
        """One pass over the nodes listing the class's resource (:func:`capacity.survey_nodes`)."""
        resource = record.resource_name or ""
        return survey_nodes(
            record,
            self.nodes_by_resource.get(resource, ()),
            used=self.used.get(resource, {}),
            needs=needs,
        )


def _sort_key(record: ClassRecord) -> tuple[str, str]:
    return (record.created, record.name)


def conflict_winners(classes: Mapping[str, ClassRecord]) -> dict[str, str]:
    """For each resource name, the class that owns it: the oldest, then by name.

    A deleting class keeps its claim until it is gone, so a new class cannot take
    over the pool of a class that still has VMs.
    """
    winners: dict[str, ClassRecord] = {}
    for record in classes.values():
        resource = record.resource_name
        if resource is None:
            continue
        current = winners.get(resource)
        if current is None or _sort_key(record) < _sort_key(current):
            winners[resource] = record
    return {resource: record.name for resource, record in winners.items()}


def survey(record: ClassRecord, index: Surveyor, *, conflict_lost: bool, needs: Needs) -> Survey:
    """The class's survey of the nodes listing its resource (:mod:`shared.core.status.capacity`),
    `needs` the KubeVirt devices its launcher requests (`Snapshot.launcher_devices`).

    A class that lost a resource-name conflict, or whose stored spec is invalid, offers
    nothing: an empty survey (zero figures, zero counts).
    """
    if conflict_lost or surveyed(record, needs) is None:
        return Survey()
    return index.survey(record, needs)


def figures_of(found: Survey) -> Figures:
    """The figures part of a survey, dropping the per-verdict node counts."""
    return Figures(
        found.free,
        found.max_free_per_node,
        found.max_units_per_node,
        found.eligible_nodes,
        found.allocatable,
    )


def compute_figures(
    record: ClassRecord, index: Surveyor, *, conflict_lost: bool, needs: Needs
) -> Figures:
    """free, maxFreePerNode and maxUnitsPerNode of one class; zeros when it lost a conflict.

    An invalid stored class (`spec` None) offers nothing: zeros too.
    """
    return figures_of(survey(record, index, conflict_lost=conflict_lost, needs=needs))


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


def compute_status(
    record: ClassRecord,
    snapshot: Snapshot,
    *,
    index: Surveyor,
    winners: Mapping[str, str],
    license_namespace: str,
    now: str,
) -> dict[str, Any]:
    """The full status subresource of one class, as the reconciler writes it."""
    state = class_state(record, snapshot, winners=winners, license_namespace=license_namespace)
    found = survey(
        record,
        index,
        conflict_lost=state.conflict_with is not None,
        needs=snapshot.launcher_devices,
    )
    capacity = found.capacity()
    previous = (
        [c.model_dump(by_alias=True) for c in record.status.conditions] if record.status else []
    )
    conditions = compute_conditions(
        record,
        conflict_with=state.conflict_with,
        permitted=snapshot.permitted,
        license=state.license_problem,
        previous=previous,
        now=now,
        no_kubevirt=snapshot.kubevirt_problem,
    )
    before = {c.get("type"): c for c in previous}
    conditions.append(
        schedulable_condition(
            record,
            found,
            capacity=capacity,
            ready=conditions[-1],
            previous=before.get(names.SCHEDULABLE),
            now=now,
        )
    )
    return {
        "free": found.free,
        "maxFreePerNode": found.max_free_per_node,
        "maxUnitsPerNode": found.max_units_per_node,
        "capacity": capacity.to_status(),
        "observedGeneration": record.generation,
        "conditions": conditions,
    }


def compute_all(
    snapshot: Snapshot, *, license_namespace: str, now: str
) -> dict[str, dict[str, Any]]:
    """Status of every class in the snapshot, by name (sorted)."""
    index = UsageIndex.build(snapshot)
    winners = conflict_winners(snapshot.classes)
    return {
        name: compute_status(
            snapshot.classes[name],
            snapshot,
            index=index,
            winners=winners,
            license_namespace=license_namespace,
            now=now,
        )
        for name in sorted(snapshot.classes)
    }
