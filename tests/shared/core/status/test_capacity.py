"""Capacity explained and the Schedulable condition (docs/contract.md 6.8), one row per reason.

Each row is a small cluster of raw objects and the node counts and condition a person
gets by hand from the rule: every node listing the resource above 0 advertises it and
takes the first of no virt-handler, NotReady, cordoned, virt-handler not ready, a KubeVirt
device missing, untolerated taint, no free units, else it has free units; `hosts` is 6.1's
figure. The condition is False with ClassNotReady,
NoNodeAdvertises, NoEligibleNode or AllUnitsInUse, and True with Fragmented or CanStart.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import event, example, given, settings, target
from hypothesis import strategies as st

from gpuclass.reconciler.state.statusdiff import status_patch, transitions
from gpuclass.shared.core.base.k8s import Taint
from gpuclass.shared.core.model.kubevirt import DEFAULT_LAUNCHER_DEVICES
from gpuclass.shared.core.model.snapshot import NodeRecord, SnapshotBuilder, compact_class
from gpuclass.shared.core.status.availability import compute_all
from gpuclass.shared.core.status.capacity import (
    MAX_TAINT_KEYS,
    Tally,
    judge_node,
    node_share,
    survey_nodes,
)
from tests.builders import gpuclass, kubevirt, node, pod

R = "example.com/gpu"
NS = "cozy-system"
NOW = "2030-01-01T00:00:00Z"
DEDICATED = {"key": "gpu.example.com/dedicated", "value": "true", "effect": "NoSchedule"}
TOLERATE = {"key": "gpu.example.com/dedicated", "operator": "Exists", "effect": "NoSchedule"}


def cls(**spec: Any) -> dict[str, Any]:
    obj = gpuclass("c", R)
    obj["spec"].update(spec)
    return obj


def vgpu(**spec: Any) -> dict[str, Any]:
    return cls(mode="vgpu", profile="p", **spec)


def taint(key: str, effect: str = "NoSchedule") -> dict[str, str]:
    return {"key": key, "value": "x", "effect": effect}


def status_of(*objects: dict[str, Any], name: str = "c", now: str = NOW) -> dict[str, Any]:
    snapshot = SnapshotBuilder().add_all([kubevirt(R), *objects])
    return compute_all(snapshot, license_namespace=NS, now=now)[name]


def capacity(
    advertising: int = 0,
    hosts: int = 0,
    eligible: int = 0,
    with_free: int = 0,
    *,
    not_ready: int = 0,
    cordoned: int = 0,
    untolerated: int = 0,
    no_free: int = 0,
    no_handler: int = 0,
    handler_not_ready: int = 0,
    no_devices: int = 0,
    taints: list[tuple[str, int]] | None = None,
    other: int = 0,
) -> dict[str, Any]:
    return {
        "advertising": advertising,
        "hosts": hosts,
        "eligible": eligible,
        "withFree": with_free,
        "excluded": {
            "notReady": not_ready,
            "cordoned": cordoned,
            "untolerated": untolerated,
            "noFreeUnits": no_free,
            "noVirtHandler": no_handler,
            "virtHandlerNotReady": handler_not_ready,
            "noKubeVirtDevices": no_devices,
            "taints": [{"key": k, "nodes": n} for k, n in taints or []],
            "otherTaintNodes": other,
        },
    }


def schedulable(s: dict[str, Any]) -> tuple[str, str]:
    (condition,) = [c for c in s["conditions"] if c["type"] == "Schedulable"]
    return condition["status"], condition["reason"]


def stale_handler(name: str, units: int) -> dict[str, Any]:
    """A node whose virt-handler heartbeat went stale: virt-controller set the label to false."""
    obj = node(name, {R: units})
    obj["metadata"]["labels"]["kubevirt.io/schedulable"] = "false"
    return obj


def without(name: str, units: int, device: str) -> dict[str, Any]:
    """A node whose virt-handler advertises none of one KubeVirt device."""
    return node(name, {R: units, f"devices.kubevirt.io/{device}": 0})


ROWS = [
    # False: no node advertises the resource.
    pytest.param([cls()], capacity(), ("False", "NoNodeAdvertises"), id="no-nodes"),
    pytest.param(
        [cls(), node("a", {R: 0})],
        capacity(),
        ("False", "NoNodeAdvertises"),
        id="resource-listed-at-zero-is-not-advertised",
    ),
    pytest.param(
        [cls(), node("a", {"example.com/other": 4})],
        capacity(),
        ("False", "NoNodeAdvertises"),
        id="other-resource-only",
    ),
    # False: advertised, none eligible.
    pytest.param(
        [cls(), node("a", {R: 4}, ready=False)],
        capacity(1, 1, not_ready=1),
        ("False", "NoEligibleNode"),
        id="not-ready",
    ),
    pytest.param(
        [cls(), node("a", {R: 4}, unschedulable=True)],
        capacity(1, 1, cordoned=1),
        ("False", "NoEligibleNode"),
        id="cordoned",
    ),
    pytest.param(
        [cls(), node("a", {R: 4}, taints=[DEDICATED])],
        capacity(1, 0, untolerated=1, taints=[("gpu.example.com/dedicated", 1)]),
        ("False", "NoEligibleNode"),
        id="untolerated-taint",
    ),
    pytest.param(
        [cls(), node("a", {R: 4}, taints=[taint("k", "NoExecute")])],
        capacity(1, 0, untolerated=1, taints=[("k", 1)]),
        ("False", "NoEligibleNode"),
        id="untolerated-noexecute-taint",
    ),
    pytest.param(
        [cls(), node("a", {R: 4}, ready=False, taints=[DEDICATED])],
        capacity(1, 0, not_ready=1),
        ("False", "NoEligibleNode"),
        id="not-ready-comes-before-taints",
    ),
    pytest.param(
        [cls(), node("a", {R: 4}, unschedulable=True, taints=[taint("node.kubernetes.io/x")])],
        capacity(1, 0, cordoned=1),
        ("False", "NoEligibleNode"),
        id="cordoned-comes-before-taints",
    ),
    pytest.param(
        [cls(), node("a", {R: 4}, ready=False, unschedulable=True)],
        capacity(1, 1, not_ready=1),
        ("False", "NoEligibleNode"),
        id="not-ready-comes-before-cordoned",
    ),
    pytest.param(
        [cls(), node("a", {R: 4}, taints=[taint("k1"), taint("k2")])],
        capacity(1, 0, untolerated=1, taints=[("k1", 1), ("k2", 1)]),
        ("False", "NoEligibleNode"),
        id="node-counted-under-each-of-its-keys",
    ),
    pytest.param(
        [
            cls(),
            node("a", {R: 4}, ready=False),
            node("b", {R: 4}, unschedulable=True),
            node("c", {R: 4}, taints=[DEDICATED]),
            node("d", {R: 4}, taints=[DEDICATED]),
        ],
        capacity(
            4, 2, not_ready=1, cordoned=1, untolerated=2, taints=[("gpu.example.com/dedicated", 2)]
        ),
        ("False", "NoEligibleNode"),
        id="every-exclusion-at-once",
    ),
    # False: eligible nodes, every unit in use.
    pytest.param(
        [cls(), node("a", {R: 4}), pod("p", "a", {R: 4})],
        capacity(1, 1, 1, 0, no_free=1),
        ("False", "AllUnitsInUse"),
        id="all-units-in-use",
    ),
    pytest.param(
        [cls(), node("a", {R: 2}), pod("p", "a", {R: 3})],
        capacity(1, 1, 1, 0, no_free=1),
        ("False", "AllUnitsInUse"),
        id="overcommitted-node-is-full",
    ),
    # False: advertised, but KubeVirt's launcher Pod cannot land there.
    pytest.param(
        [cls(), node("a", {R: 4}, kubevirt=False)],
        capacity(1, 1, no_handler=1),
        ("False", "NoEligibleNode"),
        id="no-virt-handler",
    ),
    pytest.param(
        [cls(), node("a", {R: 4}, kubevirt=False, ready=False)],
        capacity(1, 1, no_handler=1),
        ("False", "NoEligibleNode"),
        id="no-virt-handler-comes-before-not-ready",
    ),
    pytest.param(
        [cls(), stale_handler("a", 4)],
        capacity(1, 1, handler_not_ready=1),
        ("False", "NoEligibleNode"),
        id="virt-handler-not-ready",
    ),
    pytest.param(
        [cls(), without("a", 4, "kvm")],
        capacity(1, 1, no_devices=1),
        ("False", "NoEligibleNode"),
        id="no-kvm",
    ),
    pytest.param(
        [cls(), without("a", 4, "tun"), without("b", 4, "vhost-net")],
        capacity(2, 2, no_devices=2),
        ("False", "NoEligibleNode"),
        id="no-tun-no-vhost-net",
    ),
    pytest.param(
        [cls(), without("a", 4, "kvm"), node("b", {R: 1})],
        capacity(2, 2, 1, 1, no_devices=1),
        ("True", "Fragmented"),
        id="limit-from-a-kvm-less-host-but-nothing-free-there",
    ),
    pytest.param(
        [cls(), node("a", {R: 8}, kubevirt=False), node("b", {R: 2})],
        capacity(2, 2, 1, 1, no_handler=1),
        ("True", "CanStart"),
        id="a-node-without-virt-handler-sets-no-limit",
    ),
    # True: a VM can start; Fragmented when the largest allowed VM cannot.
    pytest.param(
        [cls(), node("a", {R: 4})], capacity(1, 1, 1, 1), ("True", "CanStart"), id="free-node"
    ),
    pytest.param(
        [cls(), node("a", {R: 4}, taints=[{**DEDICATED, "effect": "PreferNoSchedule"}])],
        capacity(1, 1, 1, 1),
        ("True", "CanStart"),
        id="prefer-noschedule-does-not-exclude",
    ),
    pytest.param(
        [cls(tolerations=[TOLERATE]), node("a", {R: 4}, taints=[DEDICATED])],
        capacity(1, 1, 1, 1),
        ("True", "CanStart"),
        id="tolerated-taint",
    ),
    pytest.param(
        [cls(), node("a", {R: 4}), node("b", {R: 4}), pod("p", "a", {R: 3}), pod("q", "b", {R: 3})],
        capacity(2, 2, 2, 2),
        ("True", "Fragmented"),
        id="passthrough-default-limit-4-at-most-1-free-on-a-node",
    ),
    pytest.param(
        [cls(), node("a", {R: 8}, ready=False), node("b", {R: 2})],
        capacity(2, 2, 1, 1, not_ready=1),
        ("True", "Fragmented"),
        id="limit-from-a-not-ready-host",
    ),
    pytest.param(
        [cls(maxCount=2), node("a", {R: 4}), pod("p", "a", {R: 2})],
        capacity(1, 1, 1, 1),
        ("True", "CanStart"),
        id="max-count-2-fits",
    ),
    pytest.param(
        [cls(maxCount=3), node("a", {R: 4}), pod("p", "a", {R: 2})],
        capacity(1, 1, 1, 1),
        ("True", "Fragmented"),
        id="max-count-3-does-not",
    ),
    pytest.param(
        [cls(maxCount=8), node("a", {R: 4})],
        capacity(1, 1, 1, 1),
        ("True", "CanStart"),
        id="max-count-above-any-host-means-the-largest-host",
    ),
    pytest.param(
        [vgpu(), node("a", {R: 8}), pod("p", "a", {R: 7})],
        capacity(1, 1, 1, 1),
        ("True", "CanStart"),
        id="vgpu-default-limit-1",
    ),
    pytest.param(
        [cls(), node("a", {R: 4}), node("b", {R: 0})],
        capacity(1, 1, 1, 1),
        ("True", "CanStart"),
        id="zero-node-not-counted",
    ),
]


@pytest.mark.parametrize(("objects", "expected", "condition"), ROWS)
def test_capacity_and_schedulable(
    objects: list[dict[str, Any]], expected: dict[str, Any], condition: tuple[str, str]
) -> None:
    result = status_of(*objects)
    assert result["capacity"] == expected
    assert schedulable(result) == condition


@pytest.mark.parametrize(("objects", "expected", "condition"), ROWS)
def test_every_advertising_node_has_one_verdict(
    objects: list[dict[str, Any]], expected: dict[str, Any], condition: tuple[str, str]
) -> None:
    found = status_of(*objects)["capacity"]
    excluded = found["excluded"]
    parts = (
        "noVirtHandler",
        "notReady",
        "cordoned",
        "virtHandlerNotReady",
        "noKubeVirtDevices",
        "untolerated",
        "noFreeUnits",
    )
    assert found["advertising"] == found["withFree"] + sum(excluded[p] for p in parts)
    assert found["eligible"] == found["withFree"] + excluded["noFreeUnits"]


@pytest.mark.parametrize(
    ("objects", "reason"),
    [
        pytest.param(
            [gpuclass("c", R), node("a", {R: 4})], "ResourceNameNotPermitted", id="not-permitted"
        ),
        pytest.param(
            [gpuclass("c", R, license="missing"), node("a", {R: 4})],
            "LicenseSecretMissing",
            id="license-missing",
        ),
    ],
)
def test_class_not_ready_cannot_start_whatever_the_nodes(
    objects: list[dict[str, Any]], reason: str
) -> None:
    snapshot = SnapshotBuilder().add_all(
        [*objects] if reason == "ResourceNameNotPermitted" else [kubevirt(R), *objects]
    )
    result = compute_all(snapshot, license_namespace=NS, now=NOW)["c"]
    assert schedulable(result) == ("False", "ClassNotReady")
    (condition,) = [c for c in result["conditions"] if c["type"] == "Schedulable"]
    assert reason in condition["message"], "names what makes the class not ready"
    assert result["capacity"]["withFree"] == 1, "the nodes are still counted"


def test_conflict_loser_reports_no_capacity() -> None:
    older = gpuclass("a", R, created="2020-01-01T00:00:00Z")
    younger = gpuclass("c", R, created="2026-01-01T00:00:00Z")
    result = status_of(older, younger, node("n", {R: 4}))
    assert result["capacity"] == capacity(), "its units belong to the winner (6.3)"
    assert schedulable(result) == ("False", "ClassNotReady")
    assert schedulable(status_of(older, younger, node("n", {R: 4}), name="a")) == (
        "True",
        "CanStart",
    )


def test_invalid_stored_class_cannot_start() -> None:
    broken = cls(memory="-16Gi")
    result = status_of(broken, node("n", {R: 4}))
    assert result["capacity"] == capacity()
    assert schedulable(result) == ("False", "ClassNotReady")


def test_taint_keys_are_bounded() -> None:
    nodes = [node(f"a{i}", {R: 1}, taints=[taint("k-a")]) for i in range(3)]
    nodes += [node(f"b{i}", {R: 1}, taints=[taint("k-b")]) for i in range(2)]
    nodes += [node(f"x-{k}", {R: 1}, taints=[taint(f"k-{k}")]) for k in "cdefg"]
    result = status_of(cls(), *nodes)["capacity"]
    assert MAX_TAINT_KEYS == 5
    assert result["excluded"]["untolerated"] == 10
    assert result["excluded"]["taints"] == [
        {"key": "k-a", "nodes": 3},
        {"key": "k-b", "nodes": 2},
        {"key": "k-c", "nodes": 1},
        {"key": "k-d", "nodes": 1},
        {"key": "k-e", "nodes": 1},
    ]
    assert result["excluded"]["otherTaintNodes"] == 2, "the k-f and k-g nodes"


@pytest.mark.parametrize(
    ("objects", "words"),
    [
        pytest.param([cls()], ["no node advertises example.com/gpu"], id="no-node"),
        pytest.param(
            [
                cls(),
                node("a", {R: 4}, ready=False),
                node("b", {R: 4}, unschedulable=True),
                node("c", {R: 4}, taints=[DEDICATED]),
            ],
            [
                "3 nodes advertise example.com/gpu but none is eligible",
                "1 NotReady",
                "1 cordoned",
                "1 with untolerated taints (gpu.example.com/dedicated: 1)",
            ],
            id="no-eligible",
        ),
        pytest.param(
            [cls(), node("a", {R: 4}), pod("p", "a", {R: 4})],
            ["every unit on the 1 node eligible is in use"],
            id="in-use",
        ),
        pytest.param(
            [
                cls(),
                node("a", {R: 4}),
                node("b", {R: 4}),
                pod("p", "a", {R: 2}),
                pod("q", "b", {R: 2}),
            ],
            ["up to 2 units can start now, not one of 4", "4 units free but at most 2 on one node"],
            id="fragmented",
        ),
        pytest.param(
            [cls(), node("a", {R: 4})], ["a VM of up to 4 units can start now"], id="can-start"
        ),
    ],
)
def test_messages_say_why(objects: list[dict[str, Any]], words: list[str]) -> None:
    (condition,) = [c for c in status_of(*objects)["conditions"] if c["type"] == "Schedulable"]
    for word in words:
        assert word in condition["message"]


def _stored(*objects: dict[str, Any], now: str) -> dict[str, Any]:
    return status_of(*objects, now=now)


def test_last_transition_time_only_when_status_flips() -> None:
    then, later = "2029-01-01T00:00:00Z", NOW
    free = [node("a", {R: 4})]
    first = _stored(cls(), *free, now=then)
    assert schedulable(first) == ("True", "CanStart")
    # CanStart -> Fragmented: still True, the time stays.
    fragmented = status_of(cls() | {"status": first}, *free, pod("p", "a", {R: 2}), now=later)
    (cond,) = [c for c in fragmented["conditions"] if c["type"] == "Schedulable"]
    assert (cond["reason"], cond["lastTransitionTime"]) == ("Fragmented", then)
    # True -> False: the time moves.
    full = status_of(cls() | {"status": first}, *free, pod("p", "a", {R: 4}), now=later)
    (cond,) = [c for c in full["conditions"] if c["type"] == "Schedulable"]
    assert (cond["status"], cond["lastTransitionTime"]) == ("False", later)


def test_unchanged_cluster_needs_no_write_and_a_flip_is_an_event() -> None:
    free = [node("a", {R: 4})]
    first = _stored(cls(), *free, now="2029-01-01T00:00:00Z")
    again = status_of(cls() | {"status": first}, *free, now=NOW)
    assert status_patch(first, again) is None, "write only when something changed (6.7)"
    full = status_of(cls() | {"status": first}, *free, pod("p", "a", {R: 4}), now=NOW)
    patch = status_patch(first, full)
    assert patch is not None and "capacity" in patch
    changes = [t for t in transitions(first, full) if t.condition == "Schedulable"]
    assert [(t.status, t.reason, t.type) for t in changes] == [("False", "AllUnitsInUse", "Normal")]


# -- the reconciler's loop and explain's per-node verdicts agree ------------------------------------

KEYS = ("k1", "k2", "gpu.example.com/dedicated")
NEEDS = DEFAULT_LAUNCHER_DEVICES
HANDLERS = ("ready", "ready", "ready", "notReady", "absent")


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[NodeRecord], dict[str, int], list[dict[str, Any]]]:
    nodes = []
    for i in range(draw(st.integers(0, 8))):
        taints = tuple(
            Taint(k, "x", draw(st.sampled_from(["NoSchedule", "NoExecute", "PreferNoSchedule"])))
            for k in draw(st.lists(st.sampled_from(KEYS), unique=True, max_size=3))
        )
        devices = {d: draw(st.sampled_from((0, 1000))) for d in NEEDS}
        nodes.append(
            NodeRecord(
                f"n{i}",
                draw(st.booleans()),
                draw(st.booleans()),
                taints,
                {R: draw(st.integers(0, 4)), **devices},
                draw(st.sampled_from(HANDLERS)),
            )
        )
    used = {n.name: draw(st.integers(0, 5)) for n in nodes}
    tolerated = draw(st.lists(st.sampled_from(KEYS), unique=True, max_size=3))
    return nodes, used, [{"key": k, "operator": "Exists"} for k in tolerated]


@settings(max_examples=300, deadline=None)
@given(clusters())
def test_survey_counts_what_judge_node_says(
    cluster: tuple[list[NodeRecord], dict[str, int], list[dict[str, Any]]],
) -> None:
    nodes, used, tolerations = cluster
    record = compact_class(cls(tolerations=tolerations))
    assert record is not None
    found = survey_nodes(record, nodes, used=used, needs=NEEDS)
    fits = [judge_node(n, R, tolerations=record.tolerations, used=used, needs=NEEDS) for n in nodes]
    counted = Counter(f.verdict for f in fits)
    capacity = found.capacity()
    assert (capacity.with_free, capacity.no_free_units) == (
        counted["withFree"],
        counted["noFreeUnits"],
    )
    assert (capacity.not_ready, capacity.cordoned, capacity.untolerated) == (
        counted["notReady"],
        counted["cordoned"],
        counted["untolerated"],
    )
    assert (
        capacity.no_virt_handler,
        capacity.virt_handler_not_ready,
        capacity.no_kubevirt_devices,
    ) == (counted["noVirtHandler"], counted["virtHandlerNotReady"], counted["noKubeVirtDevices"])
    eligible = [f for f in fits if f.verdict in ("withFree", "noFreeUnits")]
    assert found.free == sum(f.free for f in eligible)
    assert found.max_free_per_node == max((f.free for f in eligible), default=0)
    kubevirt_hosts = [f for f in fits if f.host and f.verdict != "noVirtHandler"]
    assert found.max_units_per_node == max((f.allocatable for f in kubevirt_hosts), default=0)
    assert capacity.hosts == sum(1 for f in fits if f.host and f.verdict != "noUnits")


@settings(max_examples=200, deadline=None)
@given(clusters(), st.data())
def test_shares_taken_out_leave_the_tally_of_the_rest(
    cluster: tuple[list[NodeRecord], dict[str, int], list[dict[str, Any]]], data: st.DataObject
) -> None:
    """The reconciler's tallies (reconciler/state/surveys.py) take a node's share out when it
    changes: what is left is exactly the tally of the other nodes (no zero entries, the maxima
    fall back), so a tally never needs to be rebuilt."""
    nodes, used, tolerations = cluster
    record = compact_class(cls(tolerations=tolerations))
    assert record is not None
    leaving = data.draw(st.sets(st.sampled_from([n.name for n in nodes]))) if nodes else set()
    shares = {
        n.name: node_share(
            n, R, tolerations=record.tolerations, used=used.get(n.name, 0), needs=NEEDS
        )
        for n in nodes
    }
    tally = Tally()
    tally.add(shares.values())
    tally.add([shares[name] for name in leaving], -1)
    rest = [n for n in nodes if n.name not in leaving]
    assert tally.survey() == survey_nodes(record, rest, used=used, needs=NEEDS)
    if leaving == set(shares):
        assert tally == Tally()


# -- the survey against an oracle written from the contract alone -----------------------------------
#
# The property above compares survey_nodes with judge_node, which share verdict_of and
# untolerated_taints: a mistake there would be invisible. This oracle restates docs/contract.md
# 6.1-6.3 and 6.8 (and the tie rule of docs/decisions.md, "Capacity explained") from scratch,
# toleration matching included (Kubernetes core/v1 semantics), and imports nothing it checks.

ORACLE_KEYS = tuple(f"k{i}" for i in range(1, 9))  # eight keys: past the five that are listed
ORACLE_VALUES = ("x", "y")
ORACLE_DEVICES = (
    "devices.kubevirt.io/kvm",
    "devices.kubevirt.io/tun",
    "devices.kubevirt.io/vhost-net",
)
EFFECTS = ("NoSchedule", "NoExecute", "PreferNoSchedule")
REACHED: Counter[str] = Counter()


def oracle_tolerates(toleration: dict[str, Any], key: str, value: str, effect: str) -> bool:
    """A toleration matches a taint when its effect is empty or equal, its key empty or equal, and
    (operator Exists) always or (Equal, the default) when the values are equal."""
    if toleration.get("effect") and toleration["effect"] != effect:
        return False
    if toleration.get("key") and toleration["key"] != key:
        return False
    if toleration.get("operator", "Equal") == "Exists":
        return True
    return toleration.get("value", "") == value


def oracle(
    nodes: list[NodeRecord], used: dict[str, int], tolerations: list[dict[str, Any]]
) -> dict[str, Any]:
    counts = Counter[str]()
    free_total, max_free, max_units, hosts, eligible = 0, 0, 0, 0, 0
    blocked_keys: list[set[str]] = []
    for n in nodes:
        allocatable = n.allocatable.get(R, 0)
        # 6.1: a host tolerates every NoSchedule and NoExecute taint of the node.
        hard = [t for t in n.taints if t.effect in ("NoSchedule", "NoExecute")]
        untolerated = {
            t.key
            for t in hard
            if not any(oracle_tolerates(tol, t.key, t.value, t.effect) for tol in tolerations)
        }
        host = not untolerated
        kubevirt_node = n.handler != "absent"  # virt-handler's label, any value
        if host and kubevirt_node:
            max_units = max(max_units, allocatable)  # 6.3: any KubeVirt host, ready or not
        if allocatable <= 0:
            continue  # 6.8: does not advertise
        hosts += host
        free = max(allocatable - used.get(n.name, 0), 0)  # 6.2
        if not kubevirt_node:
            counts["noVirtHandler"] += 1
        elif not n.ready:
            counts["notReady"] += 1
        elif n.unschedulable:
            counts["cordoned"] += 1
        elif n.handler != "ready":
            counts["virtHandlerNotReady"] += 1
        elif any(n.allocatable.get(d, 0) <= 0 for d in ORACLE_DEVICES):
            counts["noKubeVirtDevices"] += 1
        elif untolerated:
            counts["untolerated"] += 1
            blocked_keys.append(untolerated)
        else:
            eligible += 1
            free_total += free
            max_free = max(max_free, free)
            counts["withFree" if free > 0 else "noFreeUnits"] += 1
    per_key = Counter(k for keys in blocked_keys for k in keys)
    listed = sorted(per_key.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    shown = {k for k, _ in listed}
    return {
        "advertising": sum(counts.values()),
        "hosts": hosts,
        "eligible": eligible,
        "withFree": counts["withFree"],
        "excluded": {
            "notReady": counts["notReady"],
            "cordoned": counts["cordoned"],
            "untolerated": counts["untolerated"],
            "noFreeUnits": counts["noFreeUnits"],
            "noVirtHandler": counts["noVirtHandler"],
            "virtHandlerNotReady": counts["virtHandlerNotReady"],
            "noKubeVirtDevices": counts["noKubeVirtDevices"],
            "taints": [{"key": k, "nodes": c} for k, c in listed],
            "otherTaintNodes": sum(1 for keys in blocked_keys if not keys & shown),
        },
        "figures": (free_total, max_free, max_units),
        "distinct_keys": len(per_key),
    }


TOLERATED_KEYS = st.sampled_from(ORACLE_KEYS[:3])  # few keys, so tolerations often match a taint
toleration_st = st.one_of(
    st.builds(lambda k: {"key": k, "operator": "Exists"}, TOLERATED_KEYS),
    st.builds(
        lambda k, v, e: {"key": k, "operator": "Equal", "value": v, "effect": e},
        TOLERATED_KEYS,
        st.sampled_from(ORACLE_VALUES),
        st.sampled_from(EFFECTS),
    ),
    st.builds(
        lambda k, e: {"key": k, "operator": "Exists", "effect": e},
        TOLERATED_KEYS,
        st.sampled_from(EFFECTS),
    ),
    st.builds(lambda k, v: {"key": k, "value": v}, TOLERATED_KEYS, st.sampled_from(ORACLE_VALUES)),
    st.just({"operator": "Exists"}),  # key-less: tolerates every taint
)


@st.composite
def oracle_clusters(
    draw: st.DrawFn,
) -> tuple[list[NodeRecord], dict[str, int], list[dict[str, Any]]]:
    nodes = []
    # Sometimes one key per node, round the eight: many distinct keys on few nodes, the case
    # where keys past the five listed leave nodes to otherTaintNodes.
    one_each = draw(st.booleans())
    for i in range(draw(st.integers(0, 14))):
        keys = (
            [ORACLE_KEYS[i % len(ORACLE_KEYS)]]
            if one_each
            else draw(st.lists(st.sampled_from(ORACLE_KEYS), unique=True, max_size=3))
        )
        taints = tuple(
            Taint(k, draw(st.sampled_from(ORACLE_VALUES)), draw(st.sampled_from(EFFECTS)))
            for k in keys
        )
        ready = draw(st.integers(0, 5)) > 0  # mostly Ready, so taints decide more often
        cordoned = draw(st.integers(0, 5)) == 0
        handler = draw(st.sampled_from(("ready",) * 6 + ("notReady", "absent")))
        devices = {d: 0 if draw(st.integers(0, 9)) == 0 else 1000 for d in ORACLE_DEVICES}
        units = {R: draw(st.integers(0, 4)), **devices}
        nodes.append(NodeRecord(f"n{i}", ready, cordoned, taints, units, handler))
    used = {n.name: draw(st.integers(0, 5)) for n in nodes}
    tolerations = draw(st.lists(toleration_st, max_size=3))
    return nodes, used, tolerations


ORACLE_UNIT = {R: 1, **dict.fromkeys(ORACLE_DEVICES, 1000)}
WIDE = (
    # eight untolerated keys on eight Ready nodes, one each, k1 on two more: k1 and four others
    # are listed, three nodes are left to otherTaintNodes
    [
        NodeRecord(f"w{i}", True, False, (Taint(f"k{i}", "x", "NoSchedule"),), ORACLE_UNIT)
        for i in range(1, 9)
    ]
    + [
        NodeRecord(f"v{i}", True, False, (Taint("k1", "x", "NoSchedule"),), ORACLE_UNIT)
        for i in range(2)
    ],
    {},
    [],
)


@settings(max_examples=300, deadline=None)
@given(oracle_clusters())
@example(WIDE)
def _survey_equals_the_oracle(
    cluster: tuple[list[NodeRecord], dict[str, int], list[dict[str, Any]]],
) -> None:
    nodes, used, tolerations = cluster
    record = compact_class(cls(tolerations=tolerations))
    assert record is not None
    want = oracle(nodes, used, tolerations)
    found = survey_nodes(record, nodes, used=used, needs=ORACLE_DEVICES)
    got = found.capacity().to_status()
    assert got == {k: v for k, v in want.items() if k not in ("figures", "distinct_keys")}
    assert (found.free, found.max_free_per_node, found.max_units_per_node) == want["figures"]
    target(float(want["distinct_keys"]), label="distinct untolerated keys")
    excluded = want["excluded"]
    for branch in BRANCHES:
        if excluded[branch]:
            REACHED[branch] += 1
    if want["withFree"]:
        REACHED["withFree"] += 1
    if any(n.allocatable.get(R, 0) <= 0 for n in nodes):
        REACHED["noUnits"] += 1
    if want["distinct_keys"] > MAX_TAINT_KEYS:
        REACHED["moreThanFiveKeys"] += 1
        event("more than five untolerated keys")
    if excluded["otherTaintNodes"]:
        REACHED["otherTaintNodes"] += 1
        event("otherTaintNodes > 0")


BRANCHES = (
    "noVirtHandler",
    "notReady",
    "cordoned",
    "virtHandlerNotReady",
    "noKubeVirtDevices",
    "untolerated",
    "noFreeUnits",
)


def test_survey_equals_an_oracle_from_the_contract() -> None:
    REACHED.clear()
    _survey_equals_the_oracle()
    # The interesting branches were reached, the more-than-five-keys path among them.
    wanted = {
        *BRANCHES,
        "withFree",
        "noUnits",
        "moreThanFiveKeys",
        "otherTaintNodes",
    }
    assert wanted <= set(REACHED), (wanted - set(REACHED), REACHED)
