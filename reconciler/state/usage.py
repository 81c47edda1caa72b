"""Incremental usage counters: what :class:`shared.core.status.availability.UsageIndex` holds, kept current per event.

`UsageIndex.build` walks every pod and node; at 150,000 pods that is far too slow
to redo per event. These counters are updated by one pod or node change at a
time and expose the same `UsageIndex` shape, so the status is still computed by
:func:`shared.core.status.availability.compute_status` itself. A Hypothesis property
(tests/reconciler/state/test_store_property.py) proves the two agree after any sequence of
events. Each update returns the resources whose figures it may have changed: the
affected-class index starts there, and touches the (resource, node) pairs it changed in the
per-class survey tallies (:mod:`reconciler.state.surveys`), which the statuses are computed
from; `index` still walks every node of a resource, the from-scratch survey over the same
counters (the property tests and the benchmark's baseline compare the two).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuclass.reconciler.state.surveys import ClassSurveys
from gpuclass.shared.core.model.kubevirt import kubevirt_devices
from gpuclass.shared.core.model.podrequests import PodRecord
from gpuclass.shared.core.model.snapshot import NodeRecord
from gpuclass.shared.core.model.vmiuse import VMIUse
from gpuclass.shared.core.status.availability import UsageIndex


class _NodesByResource(Mapping[str, tuple[NodeRecord, ...]]):
    """`UsageIndex.nodes_by_resource` over live dicts; a tuple is built once per change of its resource."""

    def __init__(self, nodes: Mapping[str, Mapping[str, NodeRecord]]) -> None:
        self._nodes = nodes
        self._tuples: dict[str, tuple[NodeRecord, ...]] = {}

    def invalidate(self, resource: str) -> None:
        self._tuples.pop(resource, None)

    def __getitem__(self, resource: str) -> tuple[NodeRecord, ...]:
        cached = self._tuples.get(resource)
        if cached is None:
            cached = self._tuples[resource] = tuple(self._nodes[resource].values())
        return cached

    def __iter__(self) -> Iterator[str]:
        return iter(self._nodes)

    def __len__(self) -> int:
        return len(self._nodes)


def node_change_resources(old: NodeRecord | None, new: NodeRecord | None) -> set[str]:
    """Resources whose figures a node change can move.

    A change of readiness, cordon, taints, virt-handler's label or the KubeVirt devices
    advertised moves every resource the node advertises (before or after); otherwise only
    resources whose allocatable changed.
    """
    if old is None:
        return set(new.allocatable) if new else set()
    if new is None:
        return set(old.allocatable)
    if (old.ready, old.unschedulable, old.taints, old.handler) != (
        new.ready,
        new.unschedulable,
        new.taints,
        new.handler,
    ) or kubevirt_devices(old.allocatable) != kubevirt_devices(new.allocatable):
        return set(old.allocatable) | set(new.allocatable)
    keys = set(old.allocatable) | set(new.allocatable)
    return {k for k in keys if old.allocatable.get(k) != new.allocatable.get(k)}


class UsageCounters:
    """Units requested per resource per node, and the nodes advertising each resource."""

    def __init__(self) -> None:
        self.used: dict[str, dict[str, int]] = {}
        self._nodes: dict[str, dict[str, NodeRecord]] = {}
        self._view = _NodesByResource(self._nodes)
        self.index = UsageIndex(self.used, self._view)
        self.surveys = ClassSurveys(self.used, self._nodes)

    def add_pod(self, pod: PodRecord, sign: int) -> None:
        """Count (sign=1) or uncount (sign=-1) a pod's requests on its node."""
        for resource, units in pod.requests.items():
            self.surveys.touch(resource, pod.node)
            per_node = self.used.setdefault(resource, {})
            total = per_node.get(pod.node, 0) + sign * units
            if total:
                per_node[pod.node] = total
            else:
                per_node.pop(pod.node, None)
                if not per_node:
                    del self.used[resource]

    def set_node(self, name: str, old: NodeRecord | None, *, new: NodeRecord | None) -> set[str]:
        """Replace node `name`'s record (None: absent); returns the resources it may affect."""
        for resource in {*(old.allocatable if old else ()), *(new.allocatable if new else ())}:
            self.surveys.touch(resource, name, node_changed=True)
        for resource in old.allocatable if old else ():
            per_resource = self._nodes.get(resource)
            if per_resource is not None:
                per_resource.pop(name, None)
                if not per_resource:
                    del self._nodes[resource]
                self._view.invalidate(resource)
        if new is not None:
            for resource in new.allocatable:
                self._nodes.setdefault(resource, {})[name] = new
                self._view.invalidate(resource)
        return node_change_resources(old, new)


HOLDING_PHASES = frozenset({"Scheduled", "Running"})
"""VMI phases whose launcher Pod is bound: the VMI's units are in use (docs/metrics.md)."""
WAITING_PHASES = frozenset({"", "Pending", "Scheduling"})
"""VMI phases before its launcher Pod is bound: the VMI waits for capacity (docs/metrics.md)."""


@dataclass(slots=True)
class VMIUsage:
    """Units in use per (namespace, class) and VMIs waiting per class, kept current per event."""

    units: dict[tuple[str, str], int] = field(default_factory=dict)
    waiting: dict[str, int] = field(default_factory=dict)
    changed: bool = True

    def add(self, vmi: VMIUse, sign: int) -> None:
        """Count a VMI in (`sign` 1) or out (-1): its units while its launcher is bound, one waiting
        VMI per class before; other phases (Succeeded, Failed) count nowhere."""
        if not vmi.units:
            return
        if vmi.phase in HOLDING_PHASES:
            for class_name, count in vmi.units:
                _bump(self.units, (vmi.namespace, class_name), by=sign * count)
        elif vmi.phase in WAITING_PHASES:
            for class_name, _ in vmi.units:
                _bump(self.waiting, class_name, by=sign)
        else:
            return
        self.changed = True


def _bump(counts: dict[Any, int], key: Any, *, by: int) -> None:
    total = counts.get(key, 0) + by
    if total:
        counts[key] = total
    else:
        counts.pop(key, None)
