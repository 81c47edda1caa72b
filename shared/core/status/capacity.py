"""Capacity explained (docs/contract.md 6.8): where a class's units are, node by node.

One pass over the nodes that list the class's resource gives both the contract's
figures (free, maxFreePerNode, maxUnitsPerNode) and `status.capacity`: how many
nodes advertise the resource, how many are hosts and eligible, and for every
other advertising node the first reason it offers nothing now. The pass is two
steps, each stated once: :func:`node_share` judges one node, :class:`Tally` sums the
shares. `survey_nodes` (the offline `gpuclass status`, `gpuclass explain`) runs them over
every node; the reconciler keeps a tally per class and runs them on the nodes an event
changed (:mod:`reconciler.state.surveys`), so they can never disagree.

Each advertising node gets exactly one verdict, checked in this order
(docs/decisions.md, "Capacity explained" and "Free means a VM can start there"):

1. `noVirtHandler`: no `kubevirt.io/schedulable` label: not a KubeVirt node;
2. `notReady`: its Ready condition is not True;
3. `cordoned`: `spec.unschedulable`;
4. `virtHandlerNotReady`: `kubevirt.io/schedulable` is not "true" (virt-handler's heartbeat);
5. `noKubeVirtDevices`: it advertises none of a KubeVirt device the launcher requests
   (`devices.kubevirt.io/kvm`, `tun`, `vhost-net`, as the KubeVirt CR decides);
6. `untolerated`: a NoSchedule/NoExecute taint the class does not tolerate;
7. `noFreeUnits`: eligible, but every unit is requested;
8. otherwise it has free units (`withFree`).

So `advertising` is the sum of every verdict's count but `noUnits`, and
`eligible == withFree + noFreeUnits`. `hosts` is the contract's figure (taints
only, ready or not) and is counted on its own; maxUnitsPerNode is the largest allocatable
of a host that is a KubeVirt node (any verdict but `noVirtHandler`).

Whether a VM can start, read from this survey, is :mod:`shared.core.status.schedulable`.
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

Verdict = Literal[
    "withFree",
    "noFreeUnits",
    "noVirtHandler",
    "notReady",
    "cordoned",
    "virtHandlerNotReady",
    "noKubeVirtDevices",
    "untolerated",
    "noUnits",
]
"""A node's verdict for a class; `noUnits`: it lists the resource at 0 (does not advertise it)."""

Needs = tuple[str, ...]
"""The KubeVirt devices a class's launcher Pod requests besides its GPUs
(:attr:`shared.core.model.snapshot.Snapshot.launcher_devices`)."""


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
    missing: tuple[str, ...] = ()
    """The KubeVirt devices the launcher requests that the node does not advertise."""


def missing_devices(node: NodeRecord, needs: Needs) -> tuple[str, ...]:
    """The devices of `needs` the node advertises none of."""
    allocatable = node.allocatable
    return tuple(d for d in needs if allocatable.get(d, 0) <= 0)


NodeBlocker = Literal[
    "noVirtHandler", "notReady", "cordoned", "virtHandlerNotReady", "noKubeVirtDevices"
]


def node_blocker(node: NodeRecord, needs: Needs) -> NodeBlocker | None:
    """What keeps every launcher Pod off the node whatever its class (verdicts 1-5 of the module
    docstring, in order); None when a launcher can land there but for taints and units."""
    if node.handler == "absent":
        return "noVirtHandler"
    if not node.ready:
        return "notReady"
    if node.unschedulable:
        return "cordoned"
    if node.handler != "ready":
        return "virtHandlerNotReady"
    allocatable = node.allocatable
    for device in needs:  # missing_devices, without a tuple per node: this runs per node share
        if allocatable.get(device, 0) <= 0:
            return "noKubeVirtDevices"
    return None


def verdict_of(
    node: NodeRecord, allocatable: int, *, blocking: bool, free: int, needs: Needs
) -> Verdict:
    """The one statement of the verdict order (module docstring); both callers below use it."""
    if allocatable <= 0:
        return "noUnits"
    blocker = node_blocker(node, needs)
    if blocker is not None:
        return blocker
    if blocking:
        return "untolerated"
    return "withFree" if free > 0 else "noFreeUnits"


def judge_node(
    node: NodeRecord,
    resource: str,
    *,
    tolerations: tuple[Mapping[str, Any], ...],
    used: Mapping[str, int],
    needs: Needs,
) -> NodeFit:
    """The verdict of one node for a class, with what `gpuclass explain` shows of it."""
    allocatable = node.allocatable.get(resource, 0)
    blocking = untolerated_taints(tolerations, node.taints) if node.taints else ()
    free = max(allocatable - used.get(node.name, 0), 0)
    verdict = verdict_of(node, allocatable, blocking=bool(blocking), free=free, needs=needs)
    return NodeFit(
        node.name,
        allocatable,
        free,
        verdict,
        blocking,
        not blocking,
        missing_devices(node, needs) if verdict == "noKubeVirtDevices" else (),
    )


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
    no_virt_handler: int = 0
    virt_handler_not_ready: int = 0
    no_kubevirt_devices: int = 0
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
                "noVirtHandler": self.no_virt_handler,
                "virtHandlerNotReady": self.virt_handler_not_ready,
                "noKubeVirtDevices": self.no_kubevirt_devices,
                "taints": [{"key": k, "nodes": n} for k, n in self.taints],
                "otherTaintNodes": self.other_taint_nodes,
            },
        }


@dataclass(frozen=True, slots=True)
class Survey:
    """What one pass over the nodes found: the contract's figures and the capacity counts (a value:
    the reconciler hands the same one to the status and the metrics)."""

    free: int = 0
    max_free_per_node: int = 0
    max_units_per_node: int = 0
    eligible_nodes: int = 0
    allocatable: int = 0
    hosts: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    taint_keys: dict[frozenset[str], int] = field(default_factory=dict)
    """Untolerated nodes per set of blocking taint keys (the nodes counted in `untolerated`)."""

    def capacity(self) -> Capacity:
        """The node counts of 6.8 from this survey: taint keys ranked by how many untolerated nodes
        carry them, the first MAX_TAINT_KEYS listed, the rest counted in `other_taint_nodes`."""
        per_key: Counter[str] = Counter()
        for keys, nodes in self.taint_keys.items():
            for key in keys:
                per_key[key] += nodes
        listed = sorted(per_key.items(), key=lambda item: (-item[1], item[0]))[:MAX_TAINT_KEYS]
        shown = {key for key, _ in listed}
        other = sum(nodes for keys, nodes in self.taint_keys.items() if not keys & shown)
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
            no_virt_handler=c.get("noVirtHandler", 0),
            virt_handler_not_ready=c.get("virtHandlerNotReady", 0),
            no_kubevirt_devices=c.get("noKubeVirtDevices", 0),
            taints=tuple(listed),
            other_taint_nodes=other,
        )


NodeShare = tuple[Verdict, int, int, frozenset[str]]
"""One node's part in a class's survey: (verdict, free units, allocatable units, keys of the taints
in the way). No taint key: the node is a host of the class. A plain tuple: one is made per node
per survey."""

_NONE: frozenset[str] = frozenset()


def node_share(
    node: NodeRecord,
    resource: str,
    *,
    tolerations: tuple[Mapping[str, Any], ...],
    used: int,
    needs: Needs,
) -> NodeShare:
    """Judge one node for a class (`used`: units bound Pods request there); the verdict is
    :func:`verdict_of`, as in :func:`judge_node`."""
    allocatable = node.allocatable.get(resource, 0)
    blocking = untolerated_taints(tolerations, node.taints) if node.taints else ()
    free = allocatable - used
    if free < 0:
        free = 0
    keys = frozenset(t.key for t in blocking) if blocking else _NONE
    return (
        verdict_of(node, allocatable, blocking=bool(blocking), free=free, needs=needs),
        free,
        allocatable,
        keys,
    )


def _drop_zeros(counts: dict[Any, int]) -> None:
    for key in [key for key, nodes in counts.items() if not nodes]:
        del counts[key]


@dataclass(slots=True)
class Tally:
    """Node shares summed into a survey, in or out.

    The one place that says how a node counts (module docstring): :func:`survey_nodes`
    adds every node once; the reconciler keeps a tally per class and swaps the shares of the
    nodes a Pod or node event changed (:mod:`reconciler.state.surveys`). The largest free
    and allocatable units are kept as histograms (nodes per size), so a node can leave too.
    """

    counts: dict[str, int] = field(default_factory=dict)
    free: int = 0
    allocatable: int = 0
    eligible: int = 0
    hosts: int = 0
    free_sizes: dict[int, int] = field(default_factory=dict)
    """Eligible nodes per free units (only sizes above 0: maxFreePerNode)."""
    host_sizes: dict[int, int] = field(default_factory=dict)
    """Hosts that are KubeVirt nodes, ready or not, per allocatable units (only sizes above 0:
    maxUnitsPerNode, 6.3)."""
    taint_keys: dict[frozenset[str], int] = field(default_factory=dict)

    def add(self, shares: Iterable[NodeShare], sign: int = 1) -> None:
        """Count nodes' shares in (`sign` 1) or take them out again (-1): one loop, run per node
        of a class by :func:`survey_nodes` and per changed node by the reconciler."""
        counts, free_sizes, host_sizes = self.counts, self.free_sizes, self.host_sizes
        taint_keys = self.taint_keys
        free_total = allocatable_total = eligible = hosts = 0
        for verdict, free, allocatable, blocking in shares:
            counts[verdict] = counts.get(verdict, 0) + sign
            if not blocking and allocatable > 0 and verdict != "noVirtHandler":
                host_sizes[allocatable] = host_sizes.get(allocatable, 0) + sign
            if verdict == "noUnits":
                continue
            if not blocking:
                hosts += 1
            if verdict == "withFree" or verdict == "noFreeUnits":
                free_total += free
                allocatable_total += allocatable
                eligible += 1
                if free > 0:
                    free_sizes[free] = free_sizes.get(free, 0) + sign
            elif verdict == "untolerated":
                taint_keys[blocking] = taint_keys.get(blocking, 0) + sign
        self.free += sign * free_total
        self.allocatable += sign * allocatable_total
        self.eligible += sign * eligible
        self.hosts += sign * hosts
        if sign < 0:  # what no node holds any more is not a count of 0 but no entry
            for held in (counts, free_sizes, host_sizes, taint_keys):
                _drop_zeros(held)

    def survey(self) -> Survey:
        """The survey these shares make (a new value: later changes to the tally do not move it)."""
        return Survey(
            free=self.free,
            max_free_per_node=max(self.free_sizes, default=0),
            max_units_per_node=max(self.host_sizes, default=0),
            eligible_nodes=self.eligible,
            allocatable=self.allocatable,
            hosts=self.hosts,
            counts=dict(self.counts),
            taint_keys=dict(self.taint_keys),
        )


Reads = tuple[str, tuple[Mapping[str, Any], ...], Needs]
"""What a survey reads of its class and cluster: the resource, the tolerations and the KubeVirt
devices the launcher requests (a change of any of them surveys the class anew)."""


def surveyed(record: ClassRecord, needs: Needs) -> Reads | None:
    """What of a class a survey reads; None when it surveys nothing (no resource name, or an
    invalid spec)."""
    resource = record.resource_name
    if resource is None or record.spec is None:
        return None
    return resource, record.tolerations, needs


def survey_nodes(
    record: ClassRecord, nodes: Iterable[NodeRecord], *, used: Mapping[str, int], needs: Needs
) -> Survey:
    """Judge every node that lists the class's resource; an invalid class surveys nothing.

    Each node's share is :func:`node_share`, summed by :class:`Tally`: the same two steps
    the reconciler's per-class tallies take one node at a time.
    """
    reads = surveyed(record, needs)
    if reads is None:
        return Survey()
    resource, tolerations, _ = reads
    tally = Tally()
    tally.add(
        node_share(
            node, resource, tolerations=tolerations, used=used.get(node.name, 0), needs=needs
        )
        for node in nodes
    )
    return tally.survey()


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
