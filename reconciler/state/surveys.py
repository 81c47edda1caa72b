"""Per-class survey tallies: a class's survey kept current per event, at a cost per changed node.

A status needs the class's survey (:func:`shared.core.status.capacity.survey_nodes`): every
node that lists its resource, judged with the class's tolerations and the units bound Pods
request there. Walking those nodes again for every dirty class on every pass costs
O(nodes); on a 5,000-node cluster where one class spans every node, that alone is
milliseconds per pod event. Here each class surveyed once keeps a
:class:`shared.core.status.capacity.Tally` and each node's share in it. A Pod or node change
marks its (resource, node) stale in the tallies of that resource; the next survey of a class
swaps its stale nodes' shares (old share out, new share in) with the same two functions
`survey_nodes` folds, :func:`node_share` and :meth:`Tally.add`, so the rule is stated once.
A class whose resource or tolerations changed, or a KubeVirt CR that changed the devices the
launcher requests, is tallied again from scratch.

Lazy: nothing is judged until a class is surveyed, so a re-list or a burst of events on
one node costs one judgment per node at the next pass. A Hypothesis property
(tests/reconciler/state/test_surveys.py) proves a tally's survey equals `survey_nodes` over
the same nodes after any sequence of changes. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpuclass.shared.core.model.snapshot import ClassRecord, NodeRecord
from gpuclass.shared.core.status.capacity import (
    Needs,
    NodeShare,
    Reads,
    Survey,
    Tally,
    node_share,
    surveyed,
)


@dataclass(slots=True)
class ClassTally:
    """One class's tally, the shares it holds per node, the nodes changed since, and the survey
    the tally made last (None once a share changed)."""

    reads: Reads
    tally: Tally = field(default_factory=Tally)
    shares: dict[str, NodeShare] = field(default_factory=dict)
    stale: set[str] = field(default_factory=set)
    survey: Survey | None = None


class ClassSurveys:
    """The reconciler's :class:`shared.core.status.availability.Surveyor`: a tally per class over
    the live usage counters (:class:`reconciler.state.usage.UsageCounters` owns both and calls
    :meth:`touch` on every change)."""

    def __init__(
        self,
        used: Mapping[str, Mapping[str, int]],
        nodes: Mapping[str, Mapping[str, NodeRecord]],
    ) -> None:
        self._used = used
        """Units requested per resource per node (live)."""
        self._nodes = nodes
        """Nodes listing each resource, by name (live)."""
        self._tallies: dict[str, ClassTally] = {}
        self._by_resource: dict[str, dict[str, ClassTally]] = {}

    def touch(self, resource: str, node: str, *, node_changed: bool = False) -> None:
        """The units requested on `node`, or the node itself (`node_changed`), changed: its share
        of `resource`'s classes is judged again at their next survey."""
        classes = self._by_resource.get(resource)
        if classes is None:
            return
        # Units requested on a node that neither lists the resource nor holds a share change no
        # survey: a Pod bound to a made-up node name (a tenant can set `nodeName`) must not grow
        # the stale sets of a class that is not surveyed again (one that lost a conflict keeps
        # its tally).
        listed = node_changed or node in self._nodes.get(resource, ())
        for entry in classes.values():
            if listed or node in entry.shares:
                entry.stale.add(node)

    def forget(self, name: str) -> None:
        """Drop a deleted class's tally."""
        entry = self._tallies.pop(name, None)
        if entry is not None:
            self._unindex(name, entry)

    def survey(self, record: ClassRecord, needs: Needs) -> Survey:
        """The class's survey now: its tally brought up to date (built first when the class is new
        to it or its resource, tolerations or launcher devices changed)."""
        reads = surveyed(record, needs)
        if reads is None:
            return Survey()
        entry = self._tallies.get(record.name)
        if entry is None or entry.reads != reads:
            if entry is not None:
                self._unindex(record.name, entry)
            entry = self._tallies[record.name] = ClassTally(reads)
            self._by_resource.setdefault(reads[0], {})[record.name] = entry
            entry.stale.update(self._nodes.get(reads[0], ()))
        if entry.stale:
            self._refresh(entry)
        if entry.survey is None:
            entry.survey = entry.tally.survey()
        return entry.survey

    def _unindex(self, name: str, entry: ClassTally) -> None:
        classes = self._by_resource.get(entry.reads[0])
        if classes is not None:
            classes.pop(name, None)
            if not classes:
                del self._by_resource[entry.reads[0]]

    def _refresh(self, entry: ClassTally) -> None:
        resource, tolerations, needs = entry.reads
        nodes = self._nodes.get(resource, {})
        used = self._used.get(resource, {})
        shares = entry.shares
        gone: list[NodeShare] = []
        came: list[NodeShare] = []
        for name in entry.stale:
            node = nodes.get(name)
            new = (
                node_share(
                    node, resource, tolerations=tolerations, used=used.get(name, 0), needs=needs
                )
                if node
                else None
            )
            old = shares.get(name)
            if new == old:
                continue
            if old is not None:
                gone.append(old)
                del shares[name]
            if new is not None:
                came.append(new)
                shares[name] = new
        entry.stale.clear()
        if gone or came:
            entry.tally.add(gone, -1)
            entry.tally.add(came)
            entry.survey = None
