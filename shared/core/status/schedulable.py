"""The Schedulable condition (docs/contract.md 6.8): can a VM of this class start now, and why not.

Read from a class's surveyed capacity (:mod:`shared.core.status.capacity`) and its free figures:
the deleting and not-ready states first, then no node advertising the resource, none eligible
(with :func:`exclusions` saying why each advertising node is left out), every unit in use, and
units spread too thin for the largest VM the class allows (`Fragmented`). Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gpuclass.shared.core.model.snapshot import ClassRecord
from gpuclass.shared.core.status.capacity import Capacity, effective_max_count

SchedulableReason = Literal[
    "CanStart",
    "Fragmented",
    "ClassDeleting",
    "ClassNotReady",
    "NoNodeAdvertises",
    "NoEligibleNode",
    "AllUnitsInUse",
]


@dataclass(frozen=True, slots=True)
class Schedulable:
    """The fifth condition (docs/contract.md 6.8): can a VM of this class start now, and why not."""

    status: bool
    reason: SchedulableReason
    message: str


def _units(n: int) -> str:
    return f"{n} unit" if n == 1 else f"{n} units"


def _nodes(n: int) -> str:
    return f"{n} node" if n == 1 else f"{n} nodes"


def exclusions(capacity: Capacity) -> str:
    """`1 NotReady, 2 with untolerated taints (key: 2)`: the non-empty excluded counts."""
    parts = []
    if capacity.no_virt_handler:
        parts.append(f"{capacity.no_virt_handler} not KubeVirt nodes (no virt-handler)")
    if capacity.not_ready:
        parts.append(f"{capacity.not_ready} NotReady")
    if capacity.cordoned:
        parts.append(f"{capacity.cordoned} cordoned")
    if capacity.virt_handler_not_ready:
        parts.append(
            f"{capacity.virt_handler_not_ready} with virt-handler not ready "
            "(kubevirt.io/schedulable not true)"
        )
    if capacity.no_kubevirt_devices:
        parts.append(f"{capacity.no_kubevirt_devices} without KubeVirt's devices")
    if capacity.untolerated:
        keys = ", ".join(f"{k}: {n}" for k, n in capacity.taints)
        if capacity.other_taint_nodes:
            keys += f", other keys: {capacity.other_taint_nodes}"
        parts.append(f"{capacity.untolerated} with untolerated taints ({keys})")
    return ", ".join(parts)


def largest_start(record: ClassRecord, max_units_per_node: int) -> int:
    """N of `Fragmented`: the largest VM the class allows that one host can hold."""
    limit = effective_max_count(record, max_units_per_node)
    if limit is None:
        return max_units_per_node
    return min(limit, max_units_per_node) if max_units_per_node else limit


def schedulable(
    record: ClassRecord,
    capacity: Capacity,
    *,
    free: int,
    max_free_per_node: int,
    max_units_per_node: int,
    not_ready: str | None,
) -> Schedulable:
    """Whether a VM of one unit can start now; True/Fragmented when the largest allowed VM cannot.

    `not_ready` is the Ready condition's message when the class is not ready (None when
    it is): then nothing about nodes matters, admission refuses or the license is missing. A
    class being deleted cannot start a VM either (ClassDeleting), whatever its nodes.
    """
    resource = record.resource_name or "(invalid spec)"
    if record.deleting:  # rule 4.3: admission refuses a VM of a class being deleted
        return Schedulable(
            False,
            "ClassDeleting",
            "the class is being deleted: admission refuses new VMs of it",
        )
    if not_ready is not None:
        return Schedulable(False, "ClassNotReady", f"the class is not ready: {not_ready}")
    if capacity.advertising == 0:
        return Schedulable(
            False,
            "NoNodeAdvertises",
            f"no node advertises {resource}: check the device plugin and the GPU configuration "
            "of the hosts",
        )
    if capacity.eligible == 0:
        return Schedulable(
            False,
            "NoEligibleNode",
            f"{_nodes(capacity.advertising)} advertise {resource} but none is eligible: "
            + exclusions(capacity),
        )
    if free == 0:
        return Schedulable(
            False,
            "AllUnitsInUse",
            f"every unit on the {_nodes(capacity.eligible)} eligible is in use; "
            "a VM waits until one is freed",
        )
    largest = largest_start(record, max_units_per_node)
    if max_free_per_node < largest:
        return Schedulable(
            True,
            "Fragmented",
            f"a VM of up to {_units(max_free_per_node)} can start now, not one of {largest}: "
            f"{_units(free)} free but at most {max_free_per_node} on one node",
        )
    return Schedulable(
        True,
        "CanStart",
        f"a VM of up to {_units(largest)} can start now ({_units(free)} free, "
        f"at most {max_free_per_node} on one node)",
    )
