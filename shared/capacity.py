"""Capacity explained (docs/contract.md 6.8): where a class's units are, and why a VM can or cannot start.

One pass over the nodes that list the class's resource gives both the contract's
figures (free, maxFreePerNode, maxUnitsPerNode) and `status.capacity`: how many
nodes advertise the resource, how many are hosts and eligible, and for every
other advertising node the first reason it offers nothing now. The same pass
serves the reconciler's incremental counters, the offline `gpuclass status` and
`gpuclass explain`, so they can never disagree.

Each advertising node gets exactly one verdict, checked in this order
(docs/decisions.md, "Capacity explained"):

1. `notReady`: its Ready condition is not True;
2. `cordoned`: `spec.unschedulable`;
3. `untolerated`: a NoSchedule/NoExecute taint the class does not tolerate;
4. `noFreeUnits`: eligible, but every unit is requested;
5. otherwise it has free units (`withFree`).

So `advertising == withFree + notReady + cordoned + untolerated + noFreeUnits`,
and `eligible == withFree + noFreeUnits`. `hosts` is the contract's figure (taints
only, ready or not) and is counted on its own.

Pure: records in, values out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from gpuclass.shared.k8s import Taint, tolerates
from gpuclass.shared.snapshot import ClassRecord, NodeRecord

MAX_TAINT_KEYS = 5
"""Taint keys listed in `status.capacity.excluded.taints`; the rest are summed up in one count."""

Verdict = Literal["withFree", "noFreeUnits", "notReady", "cordoned", "untolerated", "noUnits"]
"""A node's verdict for a class; `noUnits`: it lists the resource at 0 (does not advertise it)."""


def untolerated_taints(
    tolerations: tuple[Mapping[str, Any], ...], taints: tuple[Taint, ...]
) -> tuple[Taint, ...]:
    """The NoSchedule/NoExecute taints of a node that no toleration of the class tolerates."""
    return tuple(
        taint
        for taint in taints
        if taint.effect in ("NoSchedule", "NoExecute")
        and not any(tolerates(t, taint) for t in tolerations)
    )


@dataclass(frozen=True, slots=True)
class NodeFit:
    """One node as the class sees it: units, free units, verdict and the taints in the way.

    `free` is allocatable minus what bound Pods request, whatever the verdict; only the
    free units of eligible nodes (`withFree`, `noFreeUnits`) count in `status.free`.
    """

    name: str
    allocatable: int
    free: int
    verdict: Verdict
    taints: tuple[Taint, ...] = ()
    host: bool = False


def judge_node(
    node: NodeRecord,
    resource: str,
    tolerations: tuple[Mapping[str, Any], ...],
    used: Mapping[str, int],
) -> NodeFit:
    """The verdict of one node for a class (the order is the module docstring's)."""
    allocatable = node.allocatable.get(resource, 0)
    blocking = untolerated_taints(tolerations, node.taints)
    host = not blocking
    free = max(allocatable - used.get(node.name, 0), 0)
    verdict: Verdict
    if allocatable <= 0:
        verdict = "noUnits"
    elif not node.ready:
        verdict = "notReady"
    elif node.unschedulable:
        verdict = "cordoned"
    elif blocking:
        verdict = "untolerated"
    else:
        verdict = "withFree" if free > 0 else "noFreeUnits"
    return NodeFit(node.name, allocatable, free, verdict, blocking, host)


@dataclass(frozen=True, slots=True)
class Capacity:
    """`status.capacity`: node counts per verdict (docs/contract.md 6.8)."""

    advertising: int = 0
    hosts: int = 0
    eligible: int = 0
    with_free: int = 0
    not_ready: int = 0
    cordoned: int = 0
    untolerated: int = 0
    no_free_units: int = 0
    taints: tuple[tuple[str, int], ...] = ()
    """(key, nodes) for the nodes counted in `untolerated`, most nodes first, at most MAX_TAINT_KEYS."""
    other_taint_nodes: int = 0
    """Nodes of `untolerated` that carry none of the listed keys (only past MAX_TAINT_KEYS keys)."""

    def to_status(self) -> dict[str, Any]:
        return {
            "advertising": self.advertising,
            "hosts": self.hosts,
            "eligible": self.eligible,
            "withFree": self.with_free,
            "excluded": {
                "notReady": self.not_ready,
                "cordoned": self.cordoned,
                "untolerated": self.untolerated,
                "noFreeUnits": self.no_free_units,
                "taints": [{"key": k, "nodes": n} for k, n in self.taints],
                "otherTaintNodes": self.other_taint_nodes,
            },
        }


@dataclass(slots=True)
class Survey:
    """What one pass over the nodes found: the contract's figures and the capacity counts."""

    free: int = 0
    max_free_per_node: int = 0
    max_units_per_node: int = 0
    eligible_nodes: int = 0
    allocatable: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    hosts: int = 0
    taint_keys: list[frozenset[str]] = field(default_factory=list)

    def add(self, fit: NodeFit) -> None:
        if fit.host:
            self.max_units_per_node = max(self.max_units_per_node, fit.allocatable)
        if fit.verdict == "noUnits":
            return
        self.counts[fit.verdict] += 1
        self.hosts += fit.host
        if fit.verdict in ("withFree", "noFreeUnits"):
            self.free += fit.free
            self.allocatable += fit.allocatable
            self.max_free_per_node = max(self.max_free_per_node, fit.free)
            self.eligible_nodes += 1
        elif fit.verdict == "untolerated":
            self.taint_keys.append(frozenset(t.key for t in fit.taints))

    def capacity(self) -> Capacity:
        per_key = Counter(key for keys in self.taint_keys for key in keys)
        listed = sorted(per_key.items(), key=lambda item: (-item[1], item[0]))[:MAX_TAINT_KEYS]
        shown = {key for key, _ in listed}
        other = sum(1 for keys in self.taint_keys if not keys & shown)
        c = self.counts
        return Capacity(
            advertising=sum(c.values()),
            hosts=self.hosts,
            eligible=self.eligible_nodes,
            with_free=c["withFree"],
            not_ready=c["notReady"],
            cordoned=c["cordoned"],
            untolerated=c["untolerated"],
            no_free_units=c["noFreeUnits"],
            taints=tuple(listed),
            other_taint_nodes=other,
        )


def survey_nodes(
    record: ClassRecord, nodes: Iterable[NodeRecord], used: Mapping[str, int]
) -> Survey:
    """Judge every node that lists the class's resource; an invalid class surveys nothing."""
    survey = Survey()
    resource = record.resource_name
    if resource is None or record.spec is None:
        return survey
    tolerations = record.tolerations
    for node in nodes:
        survey.add(judge_node(node, resource, tolerations, used))
    return survey


def effective_max_count(record: ClassRecord, max_units_per_node: int) -> int | None:
    """docs/contract.md 4.4: spec.maxCount; else 1 for vgpu; else maxUnitsPerNode (None while 0)."""
    spec = record.spec
    if spec is None:
        return None
    if spec.max_count is not None:
        return spec.max_count
    if spec.mode == "vgpu":
        return 1
    return max_units_per_node or None


SchedulableReason = Literal[
    "CanStart", "Fragmented", "ClassNotReady", "NoNodeAdvertises", "NoEligibleNode", "AllUnitsInUse"
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
    if capacity.not_ready:
        parts.append(f"{capacity.not_ready} NotReady")
    if capacity.cordoned:
        parts.append(f"{capacity.cordoned} cordoned")
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
    it is): then nothing about nodes matters, admission refuses or the licence is missing.
    """
    resource = record.resource_name or "(invalid spec)"
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
