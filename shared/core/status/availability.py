"""Class status (docs/contract.md section 6): free units, per-node figures and conditions.

Pure: a snapshot and `now` in, a status dict out. The reconciler writes what
:func:`compute_status` returns; the offline CLI prints it; the webhook reads the
same figures (stored by the reconciler, or computed here offline) for its
default limit and shortage warning. Nothing here asks whether an event was an
add or an update: the status is a function of the state.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from gpuclass.shared.core.base import names
from gpuclass.shared.core.model.snapshot import ClassRecord, NodeRecord, Snapshot
from gpuclass.shared.core.status.capacity import Needs, Survey, survey_nodes, surveyed
from gpuclass.shared.core.status.conditions import (
    class_state,
    compute_conditions,
    schedulable_condition,
)


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
