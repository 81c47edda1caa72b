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

from gpuclass.shared.core.base.k8s import Taint, tolerates
from gpuclass.shared.core.model.snapshot import ClassRecord, NodeRecord

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


def verdict_of(node: NodeRecord, allocatable: int, blocking: bool, free: int) -> Verdict:
    """The one statement of the verdict order (module docstring); both callers below use it."""
    if allocatable <= 0:
        return "noUnits"
    if not node.ready:
        return "notReady"
    if node.unschedulable:
        return "cordoned"
    if blocking:
        return "untolerated"
    return "withFree" if free > 0 else "noFreeUnits"


def judge_node(
    node: NodeRecord,
    resource: str,
    tolerations: tuple[Mapping[str, Any], ...],
    used: Mapping[str, int],
) -> NodeFit:
    """The verdict of one node for a class, with what `gpuclass explain` shows of it."""
    allocatable = node.allocatable.get(resource, 0)
    blocking = untolerated_taints(tolerations, node.taints) if node.taints else ()
    free = max(allocatable - used.get(node.name, 0), 0)
    verdict = verdict_of(node, allocatable, bool(blocking), free)
    return NodeFit(node.name, allocatable, free, verdict, blocking, not blocking)


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
        """The camelCase `status.capacity` object the reconciler writes and `gpuclass status`
        prints."""
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
    hosts: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    taint_keys: list[frozenset[str]] = field(default_factory=list)

    def capacity(self) -> Capacity:
        """The node counts of 6.8 from this survey: taint keys ranked by how many untolerated nodes
        carry them, the first MAX_TAINT_KEYS listed, the rest counted in `other_taint_nodes`."""
        per_key = Counter(key for keys in self.taint_keys for key in keys)
        listed = sorted(per_key.items(), key=lambda item: (-item[1], item[0]))[:MAX_TAINT_KEYS]
        shown = {key for key, _ in listed}
        other = sum(1 for keys in self.taint_keys if not keys & shown)
        c = self.counts
        return Capacity(
            advertising=sum(n for v, n in c.items() if v != "noUnits"),
            hosts=self.hosts,
            eligible=self.eligible_nodes,
            with_free=c.get("withFree", 0),
            not_ready=c.get("notReady", 0),
            cordoned=c.get("cordoned", 0),
            untolerated=c.get("untolerated", 0),
            no_free_units=c.get("noFreeUnits", 0),
            taints=tuple(listed),
            other_taint_nodes=other,
        )


def survey_nodes(
    record: ClassRecord, nodes: Iterable[NodeRecord], used: Mapping[str, int]
) -> Survey:
    """Judge every node that lists the class's resource; an invalid class surveys nothing.

    The reconciler runs this for every dirty class on every pass, so it is one plain loop
    (no object per node); the verdict itself is :func:`verdict_of`, as in :func:`judge_node`.
    """
    survey = Survey()
    resource = record.resource_name
    if resource is None or record.spec is None:
        return survey
    tolerations = record.tolerations
    counts = survey.counts
    free_total = max_free = max_units = eligible = allocatable_total = hosts = 0
    for node in nodes:
        allocatable = node.allocatable.get(resource, 0)
        blocking = untolerated_taints(tolerations, node.taints) if node.taints else ()
        free = allocatable - used.get(node.name, 0)
        if free < 0:
            free = 0
        if not blocking and allocatable > max_units:
            max_units = allocatable  # 6.3: any host, ready or not
        verdict = verdict_of(node, allocatable, bool(blocking), free)
        counts[verdict] = counts.get(verdict, 0) + 1
        if verdict == "noUnits":
            continue
        if not blocking:
            hosts += 1
        if verdict == "withFree" or verdict == "noFreeUnits":
            free_total += free
            allocatable_total += allocatable
            eligible += 1
            if free > max_free:
                max_free = free
        elif verdict == "untolerated":
            survey.taint_keys.append(frozenset(t.key for t in blocking))
    survey.free, survey.max_free_per_node, survey.max_units_per_node = (
        free_total,
        max_free,
        max_units,
    )
    survey.eligible_nodes, survey.allocatable, survey.hosts = eligible, allocatable_total, hosts
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
