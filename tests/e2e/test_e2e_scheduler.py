"""Status truth: what `status` promises is what kube-scheduler actually places.

docs/contract.md section 6 says `status.maxFreePerNode` is the most units one new
VM can get on one node, and `status.free` how many units are free across the
nodes a class may use. Here the oracle is the real kube-scheduler, not our own
reading of the rules: a seeded random cluster of kwok nodes (allocatable of
three GPU resources, taints of each effect, cordons, NotReady through the node
lifecycle controller after kwok stops heartbeating for a node) carries random
workload pods (init containers; sidecars and Pod overhead in the `extras` row; Running, Pending,
terminating, Succeeded and Failed); `gpuclass-reconciler` writes every class's
status; then, per class, probe pods carrying exactly the class tolerations ask
the scheduler:

- one pod of `maxFreePerNode` units must be bound, one of `maxFreePerNode + 1` must
  be refused (PodScheduled=False, Unschedulable);
- `free` one-unit pods must all be bound, and one more must be refused.

Then the cluster churns (pods come and go or finish, a node dies or comes back, a
cordon, a taint and an allocatable change) and the probes run again.

Class tolerations never tolerate the `node.kubernetes.io/*` taints: the contract
counts only Ready nodes, while a pod tolerating `unreachable` would be placed on a
NotReady node by the scheduler (a difference by design, not a bug to find here).
"""

from __future__ import annotations

import contextlib
import random
import secrets
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest

from tests.builders import api_gpuclass, api_namespace
from tests.controlplane.api import Api, ApiError, RawObject
from tests.controlplane.cluster import ControlPlane, eventually
from tests.controlplane.components import (
    KWOK_LABEL,
    Component,
    kwok_node,
    node_ready,
    set_allocatable,
    set_kwok_managed,
)
from tests.e2e_reconciler_helpers import (
    FAST,
    GPUCLASSES,
    LICENSE_NAMESPACE,
    MERGE,
    ReconcilerProcess,
    figures,
    force_delete,
    get_class,
    node_path,
    pod_path,
    pod_scheduled,
    set_pod_phase,
    settled_figures,
)

DEDICATED = "gpu.example.com/dedicated"
MAINTENANCE = "gpu.example.com/maintenance"
SPARE = "gpu.example.com/spare"
HOLD = "gpu.example.com/hold"  # finalizer that keeps a deleted pod terminating
IMAGE = "example.org/e2e:1"
TAINT_POOL: tuple[RawObject, ...] = (
    {"key": DEDICATED, "value": "yes", "effect": "NoSchedule"},
    {"key": DEDICATED, "value": "yes", "effect": "NoExecute"},
    {"key": DEDICATED, "value": "no", "effect": "NoSchedule"},
    {"key": SPARE, "value": "true", "effect": "PreferNoSchedule"},
    {"key": MAINTENANCE, "value": "true", "effect": "NoExecute"},
)
# Three classes, one resource each: no tolerations; `dedicated` of any value for
# NoSchedule only; `dedicated=yes` of every effect plus the maintenance NoExecute taint.
CLASS_TOLERATIONS: tuple[list[RawObject], ...] = (
    [],
    [{"key": DEDICATED, "operator": "Exists", "effect": "NoSchedule"}],
    [
        {"key": DEDICATED, "operator": "Equal", "value": "yes"},
        {"key": MAINTENANCE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60},
    ],
)
Fate = Literal["running", "pending", "succeeded", "failed", "terminating"]
LIFECYCLE_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
UNREACHABLE = ("node.kubernetes.io/unreachable", "NoSchedule")
SETTLE = 60.0  # seconds for nodes, kwok and the reconciler to follow a change
QUIET = 1.5  # a status unchanged this long has caught up (coalescing window 0.05 s)
SCENARIOS = ((11, False), (23, False), (3, True))  # (seed, extras: sidecars and overhead)
BIND_WAIT = 15.0  # seconds a probe that must be bound may take


# -- the plan: what the cluster should look like --------------------------------------------------


@dataclass
class NodePlan:
    name: str
    units: dict[str, int]
    taints: list[RawObject]
    cordoned: bool
    ready: bool


@dataclass
class PodPlan:
    name: str
    node: str
    containers: list[dict[str, int]]
    inits: list[tuple[dict[str, int], bool]]  # (requests, restartable: a sidecar)
    fate: Fate
    overhead: bool = False  # runs with the scenario's RuntimeClass, whose overhead holds units


@dataclass
class Plan:
    resources: list[str]
    nodes: dict[str, NodePlan] = field(default_factory=dict)
    pods: dict[str, PodPlan] = field(default_factory=dict)


def random_taints(rng: random.Random) -> list[RawObject]:
    """A few taints of the pool, at most one per key and effect (the API server's rule)."""
    taints: dict[tuple[str, str], RawObject] = {}
    for taint in TAINT_POOL:
        if rng.random() < 0.25:
            taints.setdefault((taint["key"], taint["effect"]), taint)
    return list(taints.values())


def random_units(rng: random.Random, resources: Sequence[str]) -> dict[str, int]:
    return {r: rng.randint(0, 4) for r in resources if rng.random() < 0.7}


def random_requests(rng: random.Random, resources: Sequence[str]) -> dict[str, int]:
    wanted = {r: rng.randint(1, 2) for r in resources if rng.random() < 0.4}
    return wanted or {rng.choice(resources): 1}


def random_pod(
    rng: random.Random, name: str, node: str, resources: Sequence[str], *, extras: bool
) -> PodPlan:
    containers = [random_requests(rng, resources) for _ in range(rng.randint(1, 2))]
    inits: list[tuple[dict[str, int], bool]] = []
    for _ in range(rng.choice((0, 0, 1, 2))):
        restartable = extras and rng.random() < 0.6
        amounts = random_requests(rng, resources)
        if not restartable:
            amounts = {r: n + rng.randint(0, 2) for r, n in amounts.items()}
        inits.append((amounts, restartable))
    fate: Fate = rng.choice(("running", "running", "running", "succeeded", "failed", "terminating"))
    return PodPlan(name, node, containers, inits, fate, overhead=extras and rng.random() < 0.3)


def random_plan(seed: int, suffix: str, *, extras: bool) -> Plan:
    rng = random.Random(seed)
    plan = Plan([f"truth-{suffix}.example.com/gpu-{i}" for i in range(len(CLASS_TOLERATIONS))])
    for i in range(rng.randint(3, 6)):
        name = f"truth-{suffix}-n{i}"
        taints = random_taints(rng)
        plan.nodes[name] = NodePlan(
            name,
            random_units(rng, plan.resources),
            taints,
            cordoned=rng.random() < 0.2,
            ready=rng.random() < 0.75,
        )
    for node in plan.nodes.values():
        for j in range(rng.randint(0, 3)):
            name = f"{node.name}-p{j}"
            plan.pods[name] = random_pod(rng, name, node.name, plan.resources, extras=extras)
    return plan


def churn(plan: Plan, rng: random.Random, round_: int, *, extras: bool) -> dict[str, Any]:
    """Change the plan in place; returns what changed (for the failure message)."""
    changed: dict[str, Any] = {}
    live = [p for p in plan.pods.values() if p.fate in ("running", "pending")]
    gone = rng.sample(live, k=len(live) // 3)
    for pod in gone:
        del plan.pods[pod.name]
    finished = [p for p in live if p not in gone and rng.random() < 0.3]
    for pod in finished:
        pod.fate = rng.choice(("succeeded", "failed"))
    nodes = list(plan.nodes.values())
    added = []
    for k in range(rng.randint(1, 4)):
        node = rng.choice(nodes)
        name = f"{node.name}-r{round_}p{k}"
        plan.pods[name] = random_pod(rng, name, node.name, plan.resources, extras=extras)
        plan.pods[name].fate = "running"
        added.append(name)
    flipped = rng.choice(nodes)
    flipped.ready = not flipped.ready
    cordon = rng.choice(nodes)
    cordon.cordoned = not cordon.cordoned
    tainted = rng.choice(nodes)
    tainted.taints = random_taints(rng)
    resized = rng.choice(nodes)
    resized.units = random_units(rng, plan.resources)
    changed.update(
        deleted=[p.name for p in gone],
        finished=[p.name for p in finished],
        added=added,
        ready_flipped=(flipped.name, flipped.ready),
        cordon_flipped=(cordon.name, cordon.cordoned),
        retainted=(tainted.name, tainted.taints),
        resized=(resized.name, resized.units),
    )
    return changed


ROUNDS = 2  # the first cluster, then one churn


def scenario(seed: int, suffix: str, *, extras: bool) -> Iterator[tuple[Plan, dict[str, Any]]]:
    """The plan of each round (changed in place) and what the churn changed."""
    plan = random_plan(seed, suffix, extras=extras)
    rng = random.Random(seed * 1000)
    yield plan, {}
    for round_ in range(1, ROUNDS):
        yield plan, churn(plan, rng, round_, extras=extras)


def features(plan: Plan) -> set[str]:
    """Which of the cases the test is about this round of the plan holds."""
    found = {f"taint:{t['effect']}" for n in plan.nodes.values() for t in n.taints}
    found |= {"cordoned" for n in plan.nodes.values() if n.cordoned}
    found |= {"not-ready" for n in plan.nodes.values() if not n.ready}
    found |= {f"pod:{p.fate}" for p in plan.pods.values()}
    for pod in plan.pods.values():
        found |= {"sidecar" if restartable else "init" for _, restartable in pod.inits}
        found |= {"overhead"} if pod.overhead else set()
    return found


# -- objects --------------------------------------------------------------------------------------


def container(name: str, requests: Mapping[str, int], *, restartable: bool = False) -> RawObject:
    amounts = {k: str(v) for k, v in requests.items()}
    c: RawObject = {
        "name": name,
        "image": IMAGE,
        "resources": {"requests": amounts, "limits": dict(amounts)},
    }
    if restartable:
        c["restartPolicy"] = "Always"
    return c


def runtime_class(name: str, resources: Sequence[str]) -> RawObject:
    """A RuntimeClass whose Pod overhead holds one unit of the first and last resource
    (the RuntimeClass admission plugin copies it into `spec.overhead`)."""
    return {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": name},
        "handler": "kwok",
        "overhead": {"podFixed": {resources[0]: "1", resources[-1]: "1"}},
    }


def workload_pod(plan: PodPlan, ns: str, runtime: str) -> RawObject:
    spec: RawObject = {
        "nodeName": plan.node,
        "containers": [container(f"c{i}", r) for i, r in enumerate(plan.containers)],
        "tolerations": [{"operator": "Exists"}],  # bound by name: taints do not concern it
    }
    if plan.overhead:
        spec["runtimeClassName"] = runtime
    if plan.inits:
        spec["initContainers"] = [
            container(f"i{i}", r, restartable=s) for i, (r, s) in enumerate(plan.inits)
        ]
    meta: RawObject = {"name": plan.name, "namespace": ns, "labels": {"truth": "workload"}}
    if plan.fate == "terminating":
        meta["finalizers"] = [HOLD]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def probe_pod(
    name: str, ns: str, resource: str, units: int, tolerations: Sequence[RawObject]
) -> RawObject:
    """A Pod asking for `units` of one resource. Like every Pod here it has priority 0, so a
    refused probe preempts nothing (only Pods of lower priority can be preempted)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"truth": "probe"}},
        "spec": {
            "containers": [container("probe", {resource: units})],
            "tolerations": [dict(t) for t in tolerations],
            "terminationGracePeriodSeconds": 0,
        },
    }


# -- the world ------------------------------------------------------------------------------------


class Truth:
    """One scenario's cluster on the API server, kept equal to its plan."""

    def __init__(self, plane: ControlPlane, plan: Plan, suffix: str) -> None:
        self.plane, self.plan, self.suffix = plane, plan, suffix
        self.ns = f"e2e-truth-{suffix}"
        self.classes = [f"truth-{suffix}-c{i}" for i in range(len(CLASS_TOLERATIONS))]
        self.runtime = f"truth-{suffix}-overhead"
        self.applied_pods: dict[str, PodPlan] = {}
        self.probes = 0

    @property
    def api(self) -> Api:
        return self.plane.admin

    # -- building and changing -------------------------------------------------------------------

    def create(self) -> None:
        self.api.apply([api_namespace(self.ns), runtime_class(self.runtime, self.plan.resources)])
        for name, resource, tolerations in zip(
            self.classes, self.plan.resources, CLASS_TOLERATIONS, strict=True
        ):
            spec: dict[str, Any] = {"tolerations": tolerations} if tolerations else {}
            self.api.create(api_gpuclass(name, resource, **spec))
        for node in self.plan.nodes.values():
            self.api.create(
                kwok_node(node.name, {}, taints=node.taints, unschedulable=node.cordoned)
            )
            set_allocatable(self.api, node.name, dict(node.units))
        eventually(
            lambda: all(node_ready(self.api.get("v1", "Node", n)) for n in self.plan.nodes),
            timeout=SETTLE,
            what="kwok to make every node Ready",
        )
        self.sync_pods()

    def sync_pods(self) -> None:
        """Create, finish, delete pods until the API server holds the plan's."""
        api = self.api
        for name in list(self.applied_pods):
            if name not in self.plan.pods:
                path = pod_path(self.ns, name)
                api.request("DELETE", path)  # graceful: kwok removes it, a dead node does not
                del self.applied_pods[name]
        new = [p for n, p in self.plan.pods.items() if n not in self.applied_pods]
        for pod in new:
            api.create(workload_pod(pod, self.ns, self.runtime))
            self.applied_pods[pod.name] = PodPlan(
                pod.name, pod.node, pod.containers, pod.inits, "running", pod.overhead
            )
        self._wait_running(new)
        for name, pod in self.plan.pods.items():
            applied = self.applied_pods[name]
            if applied.fate == pod.fate:
                continue
            if pod.fate in ("succeeded", "failed"):
                set_pod_phase(api, self.ns, name, pod.fate.capitalize())
            elif pod.fate == "terminating":
                api.request("DELETE", pod_path(self.ns, name))
            applied.fate = pod.fate

    def _wait_running(self, pods: Sequence[PodPlan]) -> None:
        """kwok runs new pods on the nodes it still manages; only then may one finish."""
        managed = {n.name for n in self.plan.nodes.values() if self._managed(n.name)}
        waiting = [p.name for p in pods if p.node in managed]

        def running() -> bool:
            for name in waiting:
                pod = self.api.get("v1", "Pod", name, namespace=self.ns) or {}
                if (pod.get("status") or {}).get("phase") != "Running":
                    return False
            return True

        eventually(running, timeout=SETTLE, what=f"kwok to run {waiting}")

    def _managed(self, node: str) -> bool:
        stored = self.api.get("v1", "Node", node) or {}
        return KWOK_LABEL in ((stored.get("metadata") or {}).get("labels") or {})

    def sync_nodes(self) -> None:
        """Cordons, taints, allocatable and readiness as planned (readiness through kwok)."""
        for node in self.plan.nodes.values():
            current = self.api.get("v1", "Node", node.name) or {}
            system = [  # the node lifecycle controller's own: kept
                t
                for t in (current.get("spec") or {}).get("taints") or []
                if t["key"].startswith("node.kubernetes.io/")
            ]
            taints = [*system, *node.taints] or None
            body = {"spec": {"unschedulable": node.cordoned or None, "taints": taints}}
            self.api.call("PATCH", node_path(node.name), body=body, content_type=MERGE)
            amounts: dict[str, int | None] = dict.fromkeys(self.plan.resources)
            amounts.update(node.units)  # None: a resource the node no longer advertises
            set_allocatable(self.api, node.name, amounts)
            if self._managed(node.name) != node.ready:
                set_kwok_managed(self.api, node.name, node.ready)

    def settle(self) -> None:
        """Wait for the node lifecycle controller and kwok, then for a quiet status."""

        astray: list[str] = []

        def nodes_as_planned() -> bool:
            astray.clear()
            for node in self.plan.nodes.values():
                stored = self.api.get("v1", "Node", node.name)
                keys = {
                    (t["key"], t["effect"])
                    for t in ((stored or {}).get("spec") or {}).get("taints") or []
                }
                lifecycle = {k for k in keys if k[0] in LIFECYCLE_TAINTS}
                if node.ready and (not node_ready(stored) or lifecycle):
                    astray.append(f"{node.name} should be Ready, has taints {sorted(keys)}")
                if not node.ready and (node_ready(stored) or UNREACHABLE not in keys):
                    astray.append(f"{node.name} should be NotReady, has taints {sorted(keys)}")
            return not astray

        try:
            eventually(nodes_as_planned, timeout=SETTLE, what="nodes Ready/NotReady as planned")
        except TimeoutError as exc:
            raise AssertionError(f"{exc}: {astray}") from None
        settled_figures(self.api, self.classes, quiet=QUIET, timeout=SETTLE)

    # -- probing ----------------------------------------------------------------------------------

    def create_probes(self, index: int, count: int, units: int) -> list[str]:
        """`count` probe pods of `units` each, carrying the class's tolerations."""
        resource, tolerations = self.plan.resources[index], CLASS_TOLERATIONS[index]
        names = []
        for _ in range(count):
            self.probes += 1
            name = f"probe-{self.probes}"
            self.api.create(probe_pod(name, self.ns, resource, units, tolerations))
            names.append(name)
        return names

    def verdicts(self, names: Sequence[str]) -> dict[str, bool | None]:
        listed = self.api.call(
            "GET", f"/api/v1/namespaces/{self.ns}/pods", params={"labelSelector": "truth=probe"}
        )
        found = {p["metadata"]["name"]: pod_scheduled(p) for p in listed["items"]}
        return {name: found.get(name) for name in names}

    def all_bound(self, names: Sequence[str]) -> int:
        """How many of `names` the scheduler binds. A refusal is not final here: the
        scheduler retries a refused pod when a pod is deleted, so a refusal that came
        from a deletion it had not seen yet heals; only a lasting one counts."""
        deadline = time.monotonic() + BIND_WAIT
        while True:
            bound = sum(v is True for v in self.verdicts(names).values())
            if bound == len(names) or time.monotonic() > deadline:
                return bound
            time.sleep(0.1)

    def refused(self, name: str) -> bool:
        """The scheduler refused `name` (Unschedulable) and it stays unbound a moment later."""
        verdict = eventually(
            lambda: (v,) if (v := self.verdicts([name])[name]) is not None else None,
            timeout=30,
            what=f"the scheduler's verdict on {name}",
            every=0.1,
        )[0]
        if verdict:
            return False
        time.sleep(1.0)
        return self.verdicts([name])[name] is False

    def remove_probes(self) -> None:
        listed = self.api.call(
            "GET", f"/api/v1/namespaces/{self.ns}/pods", params={"labelSelector": "truth=probe"}
        )
        for pod in listed["items"]:
            force_delete(self.api, pod_path(self.ns, pod["metadata"]["name"]))

    def check_class(self, index: int) -> tuple[list[str], int]:
        """The scheduler's answers for one class: (disagreements, probes bound)."""
        name = self.classes[index]
        found = figures(get_class(self.api, name))
        assert found is not None, f"{name} has no status"
        free, max_free, _ = found
        problems, bound = [], 0
        if not self.refused(*self.create_probes(index, 1, max_free + 1)):
            problems.append(f"{name}: a pod of maxFreePerNode+1={max_free + 1} units was bound")
        self.remove_probes()
        if max_free > 0:
            bound += self.all_bound(self.create_probes(index, 1, max_free))
            if bound != 1:
                problems.append(f"{name}: a pod of maxFreePerNode={max_free} units was refused")
            self.remove_probes()
        ones = self.all_bound(self.create_probes(index, free, 1))
        bound += ones
        if ones != free:
            problems.append(f"{name}: only {ones} of free={free} one-unit pods were bound")
        if not self.refused(*self.create_probes(index, 1, 1)):
            problems.append(f"{name}: one-unit pod number free+1={free + 1} was bound")
        self.remove_probes()
        return problems, bound

    def check(self) -> tuple[list[str], int, dict[str, tuple[int, int, int] | None]]:
        """Every class's disagreements, the probes bound, and the statuses probed."""
        seen = {c: figures(get_class(self.api, c)) for c in self.classes}
        problems, bound = [], 0
        for index in range(len(self.classes)):
            found, count = self.check_class(index)
            problems += found
            bound += count
        return problems, bound, seen

    # -- describing and cleaning up ---------------------------------------------------------------

    def describe(self) -> str:
        lines = []
        for node in self.plan.nodes.values():
            taints = [f"{t['key'].split('/')[-1]}={t['value']}:{t['effect']}" for t in node.taints]
            lines.append(
                f"  {node.name}: units={node.units} taints={taints} cordoned={node.cordoned} "
                f"ready={node.ready}"
            )
        for pod in self.plan.pods.values():
            lines.append(
                f"  {pod.name}: containers={pod.containers} inits={pod.inits} fate={pod.fate}"
                f" overhead={pod.overhead}"
            )
        return "\n".join(lines)

    def cleanup(self) -> None:
        api = self.api
        listed = api.call("GET", f"/api/v1/namespaces/{self.ns}/pods")
        for pod in listed["items"]:
            path = pod_path(self.ns, pod["metadata"]["name"])
            if pod["metadata"].get("finalizers"):
                api.request(
                    "PATCH", path, body={"metadata": {"finalizers": None}}, content_type=MERGE
                )
            force_delete(api, path)
        for node in self.plan.nodes:
            force_delete(api, node_path(node))
        for name in self.classes:
            with contextlib.suppress(ApiError):
                force_delete(api, f"{GPUCLASSES}/{name}")
        api.request("DELETE", f"/api/v1/namespaces/{self.ns}")
        api.request("DELETE", f"/apis/node.k8s.io/v1/runtimeclasses/{self.runtime}")


# -- the tests ----------------------------------------------------------------------------------


EVERY_CASE = {
    "taint:NoSchedule",
    "taint:PreferNoSchedule",
    "taint:NoExecute",
    "cordoned",
    "not-ready",
    "pod:running",
    "pod:terminating",
    "pod:succeeded",
    "pod:failed",
    "init",
}


def test_the_scenarios_hold_every_case() -> None:
    """The seeds below are not lucky or unlucky draws: together their rounds hold every
    case (and only the extras row holds sidecars and overhead), so the end-to-end test
    reaches them."""
    seen: set[str] = set()
    for seed, extras in SCENARIOS:
        held = set().union(*(features(plan) for plan, _ in scenario(seed, "x", extras=extras)))
        assert ("sidecar" in held) == extras and ("overhead" in held) == extras, (seed, held)
        seen |= held
    assert seen >= EVERY_CASE, EVERY_CASE - seen


# -- fixtures and the end-to-end test ----------------------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reconciler(control_plane: ControlPlane) -> Iterator[ReconcilerProcess]:
    """One reconciler for the module, as the admin, without a Lease (no other replica)."""
    control_plane.admin.apply([api_namespace(LICENSE_NAMESPACE)])
    process = ReconcilerProcess(
        control_plane.admin_kubeconfig,
        pod_name=f"truth-{secrets.token_hex(3)}",
        timings=FAST,
        args=["--no-leader-elect"],
    )
    try:
        eventually(process.ready, timeout=60, what="reconciler /readyz")
        yield process
    finally:
        process.stop()


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("seed", "extras"),
    [
        pytest.param(
            seed,
            extras,
            id=f"seed-{seed}" + ("-sidecars-overhead" if extras else ""),
        )
        for seed, extras in SCENARIOS
    ],
)
def test_status_matches_what_the_scheduler_places(
    control_plane: ControlPlane,
    kube_scheduler: Component,
    node_lifecycle_controller: Component,
    kwok_kubelet: Component,
    reconciler: ReconcilerProcess,
    seed: int,
    extras: bool,
) -> None:
    suffix = f"{seed}{secrets.token_hex(2)}"
    rounds = scenario(seed, suffix, extras=extras)
    plan, changed = next(rounds)
    truth = Truth(control_plane, plan, suffix)
    probes_bound = 0
    try:
        truth.create()
        for round_ in range(ROUNDS):
            if round_:
                _, changed = next(rounds)
                truth.sync_pods()
            truth.sync_nodes()
            truth.settle()
            problems, bound, seen = truth.check()
            probes_bound += bound
            assert not problems, (
                f"round {round_} (seed {seed}): the scheduler disagrees with status {seen}:\n"
                + "\n".join(problems)
                + f"\nchanges: {changed}\ncluster:\n{truth.describe()}"
            )
        assert probes_bound > 0, "no probe was ever bound: the scenario proves nothing"
        assert reconciler.alive and kube_scheduler.alive and kwok_kubelet.alive
    finally:
        truth.cleanup()
