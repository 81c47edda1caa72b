"""Property: a class's survey tally equals the full walk over its nodes after any sequence of events.

A Hypothesis state machine adds, edits and removes Pods and Nodes on the usage
counters (:class:`reconciler.state.usage.UsageCounters`, which touch the tallies of
:mod:`reconciler.state.surveys`), changes classes (resource, tolerations, an invalid
spec) and deletes them, and now and then surveys some classes, so stale nodes pile up
between surveys as they do between passes. Each survey equals `survey_nodes` from
scratch: over a `UsageIndex` built from the surviving records alone, and over the
counters' own full walk (`UsageCounters.index`, the benchmark's baseline).
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from gpuclass.reconciler.state.usage import UsageCounters
from gpuclass.shared.core.base.k8s import Taint
from gpuclass.shared.core.model.kubevirt import DEFAULT_LAUNCHER_DEVICES
from gpuclass.shared.core.model.podrequests import PodRecord
from gpuclass.shared.core.model.snapshot import ClassRecord, NodeRecord, Snapshot, compact_class
from gpuclass.shared.core.status.availability import UsageIndex
from tests.builders import gpuclass

RESOURCES = ["example.com/r1", "example.com/r2"]
NODE_NAMES = [f"n{i}" for i in range(6)]
CLASS_NAMES = ["c1", "c2", "c3"]
TAINTS = [
    (),
    (Taint("gpu", "yes", "NoSchedule"),),
    (Taint("other", "", "NoExecute"),),
    (Taint("gpu", "yes", "NoSchedule"), Taint("other", "", "NoExecute")),
    (Taint("soft", "", "PreferNoSchedule"),),
]
TOLERATIONS = [None, [{"key": "gpu", "operator": "Exists"}], [{"operator": "Exists"}]]

units = st.integers(0, 4)
# Mostly eligible nodes (Ready, schedulable, untainted) that advertise units, so most surveys
# count free units that Pods then take: a tally that missed a Pod or node change shows there.
# (Hypothesis favours the first element of `sampled_from` and small integers: the common case
# goes first.)
NEEDS = DEFAULT_LAUNCHER_DEVICES
KV = dict.fromkeys(NEEDS, 1000)  # a healthy KubeVirt node's devices
devices_st = st.sampled_from([dict.fromkeys(NEEDS, 1000)] * 3 + [{NEEDS[0]: 0}, {}])
nodes_st = st.builds(
    lambda name, ready, cordoned, taints, units, devices, handler: NodeRecord(
        name, ready, cordoned, taints, {**units, **devices}, handler
    ),
    st.sampled_from(NODE_NAMES),
    st.sampled_from([True, True, True, False]),
    st.sampled_from([False, False, False, True]),
    st.sampled_from([(), (), (), *TAINTS[1:]]),
    st.dictionaries(st.sampled_from(RESOURCES), st.integers(1, 4), min_size=1, max_size=2),
    devices_st,
    st.sampled_from(["ready", "ready", "ready", "notReady", "absent"]),
)


def class_record(name: str, resource: str, tolerations: Any, valid: bool) -> ClassRecord:
    obj = gpuclass(name, resource, tolerations=tolerations)
    if not valid:
        obj["spec"]["mode"] = "neither"  # an invalid spec: the class surveys nothing
    record = compact_class(obj)
    assert record is not None
    assert (record.spec is not None) == valid
    return record


class Surveys(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.usage = UsageCounters()
        self.nodes: dict[str, NodeRecord] = {}
        self.pods: dict[str, PodRecord] = {}
        self.classes: dict[str, ClassRecord] = {}

    @initialize(nodes=st.lists(nodes_st, min_size=2, max_size=6))
    def some_nodes_and_classes(self, nodes: list[NodeRecord]) -> None:
        """Start from a populated cluster: nodes, and every class valid on the first resource."""
        for node in nodes:
            self.put_node(node)
        for name in CLASS_NAMES:
            self.put_class(name, RESOURCES[0], None, True)

    @rule(node=nodes_st)
    def put_node(self, node: NodeRecord) -> None:
        old = self.nodes.get(node.name)
        self.nodes[node.name] = node
        self.usage.set_node(node.name, old, new=node)

    @rule(name=st.sampled_from(NODE_NAMES))
    def remove_node(self, name: str) -> None:
        old = self.nodes.pop(name, None)
        if old is not None:
            self.usage.set_node(name, old, new=None)

    @rule(
        name=st.sampled_from(["p1", "p2", "p3", "p4"]),
        node=st.sampled_from(NODE_NAMES),
        requests=st.dictionaries(
            st.sampled_from(RESOURCES), st.integers(1, 3), min_size=1, max_size=2
        ),
    )
    def put_pod(self, name: str, node: str, requests: dict[str, int]) -> None:
        """A Pod bound (or moved: its old record goes, as the store does) with its requests; a Pod
        may sit on a node that does not exist (yet), as bound Pods can."""
        old = self.pods.pop(name, None)
        if old is not None:
            self.usage.add_pod(old, -1)
        if requests:
            self.pods[name] = PodRecord(node, requests)
            self.usage.add_pod(self.pods[name], 1)

    @rule(name=st.sampled_from(["p1", "p2", "p3", "p4"]))
    def remove_pod(self, name: str) -> None:
        old = self.pods.pop(name, None)
        if old is not None:
            self.usage.add_pod(old, -1)

    @rule(
        name=st.sampled_from(CLASS_NAMES),
        resource=st.sampled_from(RESOURCES),
        tolerations=st.sampled_from(TOLERATIONS),
        valid=st.integers(0, 4).map(bool),  # mostly valid
    )
    def put_class(self, name: str, resource: str, tolerations: Any, valid: bool) -> None:
        self.classes[name] = class_record(name, resource, tolerations, valid)

    @rule(name=st.sampled_from(CLASS_NAMES))
    def delete_class(self, name: str) -> None:
        if self.classes.pop(name, None) is not None:
            self.usage.surveys.forget(name)

    @rule(chosen=st.sets(st.sampled_from(CLASS_NAMES), min_size=1))
    def survey_some(self, chosen: set[str]) -> None:
        """A pass recomputes only the dirty classes: the others' stale nodes wait for a later one."""
        index = UsageIndex.build(
            Snapshot(nodes=list(self.nodes.values()), pods=list(self.pods.values()))
        )
        for name in sorted(chosen & set(self.classes)):
            record = self.classes[name]
            found = self.usage.surveys.survey(record, NEEDS)
            assert found == index.survey(record, NEEDS), name
            assert found == self.usage.index.survey(record, NEEDS), name
            assert found.capacity() == index.survey(record, NEEDS).capacity(), name


Surveys.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_tallies_equal_the_full_walk = Surveys.TestCase


def _one_class_on(node: NodeRecord) -> tuple[UsageCounters, ClassRecord]:
    usage = UsageCounters()
    usage.set_node(node.name, None, new=node)
    record = class_record("c1", RESOURCES[0], None, True)
    return usage, record


def test_a_pod_bound_after_a_survey_counts_at_the_next() -> None:
    """Contract 6.2: free units are allocatable minus what bound Pods request on the node."""
    usage, record = _one_class_on(NodeRecord("n0", True, False, (), {RESOURCES[0]: 4, **KV}))
    assert usage.surveys.survey(record, NEEDS).free == 4
    usage.add_pod(PodRecord("n0", {RESOURCES[0]: 3}), 1)
    assert usage.surveys.survey(record, NEEDS).free == 1
    usage.add_pod(PodRecord("n0", {RESOURCES[0]: 3}), -1)
    assert usage.surveys.survey(record, NEEDS).free == 4


def test_a_node_changed_after_a_survey_counts_at_the_next() -> None:
    """Contract 6.1 and 6.2: a cordoned node is not eligible and offers nothing; more allocatable
    offers more."""
    node = NodeRecord("n0", True, False, (), {RESOURCES[0]: 4, **KV})
    usage, record = _one_class_on(node)
    assert usage.surveys.survey(record, NEEDS).free == 4
    cordoned = NodeRecord("n0", True, True, (), {RESOURCES[0]: 4, **KV})
    usage.set_node("n0", node, new=cordoned)
    assert usage.surveys.survey(record, NEEDS).free == 0
    bigger = NodeRecord("n0", True, False, (), {RESOURCES[0]: 8, **KV})
    usage.set_node("n0", cordoned, new=bigger)
    assert usage.surveys.survey(record, NEEDS).free == 8


def test_pods_on_nodes_that_list_nothing_grow_no_tally() -> None:
    """A class surveyed once and never again (it lost a resource-name conflict) keeps its tally:
    Pods a tenant binds to made-up node names must not pile up in it (50,000 such Pods held
    10 MB of names). A Pod on a listed node, and a node that goes, still count."""
    usage, record = _one_class_on(NodeRecord("n0", True, False, (), {RESOURCES[0]: 4, **KV}))
    usage.surveys.survey(record, NEEDS)
    for i in range(100):
        ghost = PodRecord(f"ghost-{i}", {RESOURCES[0]: 1})
        usage.add_pod(ghost, 1)
        usage.add_pod(ghost, -1)
    assert usage.surveys._tallies["c1"].stale == set()
    usage.add_pod(PodRecord("n0", {RESOURCES[0]: 1}), 1)
    assert usage.surveys.survey(record, NEEDS).free == 3
    usage.set_node("n0", NodeRecord("n0", True, False, (), {RESOURCES[0]: 4, **KV}), new=None)
    assert usage.surveys.survey(record, NEEDS).free == 0
