"""The soak itself: churn, faults on a schedule, invariant checks, process samples.

:class:`Soak` sets up :mod:`tests.soak_world`, then for `Shape.seconds` keeps three threads
going — the churn (real writes a fleet and its tenants make), a prober (dry-run VMI admissions,
so admissions flow through a rolling update even while the churn waits) and a sampler (RSS and
open file descriptors of every webhook and reconciler process, their status-write counters, the
webhook's certificate) — while the main thread injects a fault every `fault_every` seconds and
checks the invariants every `check_every` seconds.

A check pauses the churn and waits (at most `settle_timeout`) until a from-scratch computation on a
fresh list of the cluster agrees with what is written: `gpuclass-reconciler --once --dry-run`, the
same pure functions the CLI uses, with nothing incremental, must find no status, license copy or
finalizer to write; every license copy must sit beside a VMI that mounts it and hold its source's
current token; no class may hold the in-use finalizer while no VMI selects it. A check that is not
met in time is a violation, reported with what differed. The time from a fault's end until the
first met check is its recovery time (a roll or a restart ends when its last step has).

At the end every VMI and launcher is deleted: no copy and no finalizer may be left behind.
"""

from __future__ import annotations

import base64
import bisect
import contextlib
import dataclasses
import itertools
import json
import math
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.builders import api_pod, api_secret, selecting_vmi
from tests.controlplane.api import Api, ApiError, RawObject
from tests.controlplane.cluster import ControlPlane, unique_name
from tests.e2e_reconciler_helpers import (
    ENTITLED,
    FINALIZER,
    GPUCLASSES,
    LICENSE_NAMESPACE,
    MANAGED,
    MERGE,
    PRODUCTION,
    RECONCILER,
    TOKEN_KEY,
    Timings,
    force_delete,
    pod_path,
    reconciler_args,
)
from tests.soak_world import (
    CERT_SECRET,
    CLASSES,
    PODS_NS,
    RELEASE_NS,
    ClassSpec,
    Fleet,
    Population,
    api_error_kind,
    build_world,
    rss_and_fds,
    selection,
    tenant,
)

FAULTS = ("leader-kill", "webhook-roll", "apiserver-restart", "etcd-compact-defrag", "watch-cut")
COPY_PREFIX = "gpuclass-license-"
SLOW_SETTLE = 10.0  # seconds after which a settle's unmet checks are kept in the report
QUIET_AFTER_FAULT = 120.0  # seconds of samples left out of the memory slope after each fault
# Faults after which every watch of every process lists its resource again (the API server's
# new watch cache, or etcd's compacted history, cannot resume the old watches).
RELISTING = ("apiserver-restart", "etcd-compact-defrag")


@dataclass(frozen=True)
class Shape:
    """How big, how long and how busy a soak is."""

    seconds: float = 1800.0
    nodes: int = 200
    pods: int = 1500
    vmis: int = 300
    tenants: int = 8
    churn_per_second: float = 4.0
    probes_per_second: float = 2.0
    fault_every: float = 600.0
    check_every: float = 60.0
    sample_every: float = 15.0
    warmup: float = 300.0
    settle_timeout: float = 90.0
    timings: Timings = PRODUCTION
    seed: int = 1
    faults: tuple[str, ...] = FAULTS  # injected in turn
    every_fault: bool = False  # go on past `seconds` until each fault has run once
    envelope_window: float = 600.0  # seconds; two of the servers' 5-minute memory returns

    def fault_goal(self, kind: str) -> float:
        """Seconds from a fault to a consistent state again (the issue's goals)."""
        return self.timings.lease_duration + 10.0 if kind == "leader-kill" else 30.0


@dataclass
class Admissions:
    total: int = 0
    allowed: int = 0
    refused: int = 0  # a decision (403, 422): counted, not a failure
    failed: int = 0  # a webhook not reached or erroring: the figure whose goal is 0
    failed_rolling: int = 0
    unreachable: int = 0  # the API server itself down (its restart): not the webhook's
    examples: list[str] = field(default_factory=list)


@dataclass
class FaultRecord:
    kind: str
    at: float  # seconds into the soak
    lasted: float  # seconds the fault itself lasted (a roll, a restart)
    recovered: float | None  # seconds from its end to the first met check; None: never
    goal: float


@dataclass
class Report:
    """What a soak saw; benchmarks/soak.py prints it against the goals."""

    shape: Shape
    elapsed: float = 0.0
    checks: int = 0
    violations: list[str] = field(default_factory=list)
    faults: list[FaultRecord] = field(default_factory=list)
    admissions: Admissions = field(default_factory=Admissions)
    samples: dict[str, list[tuple[float, float, int]]] = field(default_factory=dict)
    holders: list[tuple[float, str | None]] = field(default_factory=list)  # the Lease's, sampled
    started: dict[str, float] = field(default_factory=dict)
    status_writes: dict[str, float] = field(default_factory=dict)  # by process
    changes: int = 0
    churn_errors: int = 0
    certificates_seen: int = 0
    cas_seen: int = 0
    settle_seconds: list[float] = field(default_factory=list)
    leftovers: list[str] = field(default_factory=list)
    slow_settles: list[str] = field(default_factory=list)
    unknown_at_drain: int = 0  # VMIs and launchers stored while their create's answer was lost

    def slopes(self) -> dict[str, Drift]:
        """Per process living long enough, its drift once warm and away from faults, fitted
        within each stretch of one role: a reconciler that takes the Lease starts doing the
        writes and holds more, a step that is no slope, so each stretch gets its own level and
        the slope is the one they share (`pooled_slope`)."""
        fault_times = [f.at for f in self.faults]
        out = {}
        for label, series in self.samples.items():
            warm = self.warm_from(label)
            kept = [
                s
                for s in series
                if s[0] >= warm
                and not any(0 <= s[0] - at < QUIET_AFTER_FAULT for at in fault_times)
            ]
            if len(kept) < 8 or kept[-1][0] - kept[0][0] < 600:
                continue
            stretches = self.role_stretches(label, kept)
            rss = [[(t, v) for t, v, _ in part] for part in stretches]
            windows = [envelope(part, self.shape.envelope_window) for part in rss]
            out[label] = Drift(
                floor=pooled_slope([[(t, low) for t, low, _ in w] for w in windows]) * 3600,
                ceiling=pooled_slope([[(t, high) for t, _, high in w] for w in windows]) * 3600,
                every_sample=pooled_slope(rss) * 3600,
                fds=pooled_slope([[(t, float(n)) for t, _, n in part] for part in stretches])
                * 3600,
                hours=(kept[-1][0] - kept[0][0]) / 3600,
                windows=tuple(w for part in windows for w in part),
                first_relist_step=self.first_relist_step(label),
            )
        return out

    def first_relist(self, label: str) -> FaultRecord | None:
        """The first fault after `label` started that made every watch list again."""
        start = self.started[label]
        return next((f for f in self.faults if f.kind in RELISTING and f.at >= start), None)

    def warm_from(self, label: str) -> float:
        """When `label`'s memory starts to count: `warmup` seconds after it started, and not
        before its first re-list has passed. A re-list replaces every stored object while the
        old ones are still held, so the interpreter's memory reaches a high-water mark it keeps
        and reuses, once: run 4 saw a standby's floor step 11 MB at its first re-list, to its
        leader's level, and neither moved at the re-lists after (docs/testing.md). A leak
        paid at every re-list still rises within what is measured."""
        warm = self.started[label] + self.shape.warmup
        relist = self.first_relist(label)
        if relist is not None:
            warm = max(warm, relist.at + relist.lasted + QUIET_AFTER_FAULT)
        return warm

    def first_relist_step(self, label: str) -> float | None:
        """MB the floor (lowest RSS) rose across the first re-list: the 10 minutes after its
        quiet time against the 10 minutes before it; None when either has no sample."""
        relist = self.first_relist(label)
        if relist is None:
            return None
        series = self.samples.get(label, [])
        window = self.shape.envelope_window
        after_from = relist.at + relist.lasted + QUIET_AFTER_FAULT
        before = [rss for t, rss, _ in series if relist.at - window <= t < relist.at]
        after = [rss for t, rss, _ in series if after_from <= t < after_from + window]
        return min(after) - min(before) if before and after else None

    def role_stretches(
        self, label: str, series: list[tuple[float, float, int]]
    ) -> list[list[tuple[float, float, int]]]:
        """`series` cut where `label` took or lost the Lease (`holders`: the holder at each
        sampling); one stretch for a process that never did."""
        stretches: list[list[tuple[float, float, int]]] = []
        role: bool | None = None
        for sample in series:
            leads = self.holder_at(sample[0]) == label
            if role is None or leads != role:
                stretches.append([])
                role = leads
            stretches[-1].append(sample)
        return stretches

    def to_json(self) -> str:
        """Everything the figures are computed from, so a finished run's figures can be computed
        again (`benchmarks/soak.py --figures-from`), with another warm-up or estimator."""
        return json.dumps(dataclasses.asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> Report:
        data = json.loads(text)
        shape = data.pop("shape")
        shape["timings"] = Timings(**shape["timings"])
        shape["faults"] = tuple(shape["faults"])
        report = cls(Shape(**shape))
        report.admissions = Admissions(**data.pop("admissions"))
        report.faults = [FaultRecord(**f) for f in data.pop("faults")]
        report.samples = {
            k: [(t, rss, fds) for t, rss, fds in v] for k, v in data.pop("samples").items()
        }
        report.holders = [(t, held) for t, held in data.pop("holders")]
        for name, value in data.items():
            setattr(report, name, value)
        return report

    def holder_at(self, at: float) -> str | None:
        """The Lease holder at the last sampling at or before `at` (`holders` is in time order)."""
        found = bisect.bisect_right(self.holders, at, key=lambda held: held[0])
        return self.holders[found - 1][1] if found else None


@dataclass(frozen=True)
class Drift:
    """One process's slopes per hour. Both servers give free heap back to the system every 5
    minutes (`--memory-return-seconds`), so RSS is a sawtooth: down at each return, up again
    within a minute as the next batch of work reuses pages. A least-squares line through every
    sample then tilts with where the returns fall; the lowest sample of each window (what stays
    held after a return: a leak shows here) and the highest (the working high-water mark) do
    not, each window holding whole return periods."""

    floor: float  # MB/h of each window's lowest RSS
    ceiling: float  # MB/h of each window's highest RSS
    every_sample: float  # MB/h through every sample, shown, not judged
    fds: float  # open files per hour
    hours: float  # measured
    windows: tuple[tuple[float, float, float], ...] = ()  # (mid time, floor, ceiling), in order
    first_relist_step: float | None = None  # MB the floor rose across the first re-list


def envelope(points: list[tuple[float, float]], window: float) -> list[tuple[float, float, float]]:
    """(mid time, lowest, highest) of each whole `window` of seconds from the first point; a
    window less than half sampled (a fault's quiet time, the stretch's end) is left out."""
    if len(points) < 2:
        return []
    step = min(b[0] - a[0] for a, b in itertools.pairwise(points)) or window
    groups: dict[int, list[float]] = {}
    for t, v in points:
        groups.setdefault(int((t - points[0][0]) // window), []).append(v)
    return [
        (points[0][0] + (index + 0.5) * window, min(values), max(values))
        for index, values in groups.items()
        if len(values) * step >= window / 2
    ]


def pooled_slope(stretches: list[list[tuple[float, float]]]) -> float:
    """Least squares slope of value over time with one level per stretch (a fixed-effects fit):
    steps between stretches do not count, a drift within them does."""
    num = var = 0.0
    for points in stretches:
        if len(points) < 2:
            continue
        mean_t = sum(t for t, _ in points) / len(points)
        mean_v = sum(v for _, v in points) / len(points)
        num += sum((t - mean_t) * (v - mean_v) for t, v in points)
        var += sum((t - mean_t) ** 2 for t, _ in points)
    return 0.0 if var == 0 else num / var


class Soak:
    """One soak run on its own control plane (faults restart its API server)."""

    def __init__(
        self, plane: ControlPlane, shape: Shape, workdir: Path, log: Callable[[str], None]
    ) -> None:
        self.plane, self.shape, self.workdir, self.log = plane, shape, workdir, log
        self.rng = random.Random(shape.seed)
        self.report = Report(shape)
        self.fleet = Fleet(plane, workdir, shape.timings, log)
        self.world = Population()
        self.t0 = time.monotonic()
        self.stopping = threading.Event()
        self.churn_go = threading.Event()
        self.churn_idle = threading.Event()
        self.rolling = False
        self.apiserver_down = False
        self._lock = threading.Lock()
        self._certs: set[str] = set()
        self._cas: set[str] = set()

    def now(self) -> float:
        return time.monotonic() - self.t0

    def api(self) -> Api:
        return self.plane.admin_user.api()

    # -- setup ------------------------------------------------------------------------------------

    def setup(self) -> None:
        started = time.monotonic()
        self.kwok, self.launchers, self.world = build_world(
            self.plane, nodes=self.shape.nodes, tenants=self.shape.tenants, rng=self.rng
        )
        self.fleet.prepare()
        for _ in range(2):
            self.fleet.start_webhook()
        for _ in range(2):
            self.fleet.start_reconciler()
        with self.api() as api:
            deadline = time.monotonic() + 60
            while self.fleet.leader(api) is None and time.monotonic() < deadline:
                time.sleep(0.5)
            for i in range(self.shape.pods):
                self._pod_create(api, name=f"steady-{i}")
            while len(self.world.vmis) < self.shape.vmis:
                self._vmi_create(api)
        self.log(
            f"setup: {self.shape.nodes} nodes, {len(self.world.pods)} pods, "
            f"{len(self.world.vmis)} VMIs in {time.monotonic() - started:.0f} s"
        )
        self.report.changes = 0
        self.report.admissions = Admissions()

    # -- the churn --------------------------------------------------------------------------------

    def _node(self, spec: ClassSpec | None = None) -> str:
        names = [n for n, s in self.world.nodes.items() if spec is None or s is spec]
        return self.rng.choice(names)

    def _admit(self, create: Callable[[], RawObject]) -> RawObject | None:
        admissions = self.report.admissions
        try:
            stored = create()
        except (ApiError, httpx.HTTPError) as exc:
            kind = api_error_kind(exc)
            with self._lock:
                admissions.total += 1
                if kind == "refused":
                    admissions.refused += 1
                elif kind == "unreachable" or self.apiserver_down:
                    admissions.unreachable += 1
                else:
                    admissions.failed += 1
                    admissions.failed_rolling += self.rolling
                    if len(admissions.examples) < 20:
                        admissions.examples.append(f"{self.now():.0f}s: {str(exc)[:300]}")
            return None
        with self._lock:
            admissions.total += 1
            admissions.allowed += 1
        return stored

    def _vmi_create(self, api: Api) -> None:
        spec = self.rng.choice(CLASSES)
        ns = tenant(self.rng.randrange(self.shape.tenants))
        stored = self._admit(lambda: api.create(selecting_vmi(ns, selection(spec))))
        if stored is None:
            return
        key = (ns, stored["metadata"]["name"])
        self.world.vmis[key] = stored
        if stored["spec"]["domain"]["devices"].get("gpus"):
            self.world.launchers[key] = self.launchers.start(api, stored, node=self._node(spec))

    def _vmi_delete(self, api: Api) -> None:
        key = self.rng.choice(list(self.world.vmis))
        launcher = self.world.launchers.pop(key, None)
        if launcher is not None:
            meta = launcher["metadata"]
            with contextlib.suppress(ApiError, LookupError):
                force_delete(api, pod_path(meta["namespace"], meta["name"]))
        self.world.vmis.pop(key)
        path = f"/apis/kubevirt.io/v1/namespaces/{key[0]}/virtualmachineinstances/{key[1]}"
        with contextlib.suppress(ApiError, LookupError):
            force_delete(api, path)

    def _pod_create(self, api: Api, name: str | None = None) -> None:
        node = self._node()
        spec = self.world.nodes[node]
        # plain Pods outside the tenants take whole GPUs only (a vGPU is refused there, rule 4.5)
        wants = {spec.resource: 1} if not spec.vgpu and self.rng.random() < 0.5 else {}
        created = api.create(api_pod(name or unique_name("churn"), PODS_NS, node, wants))
        self.world.pods.append(created["metadata"]["name"])

    def _pod_delete(self, api: Api) -> None:
        name = self.world.pods.pop(self.rng.randrange(len(self.world.pods)))
        with contextlib.suppress(ApiError, LookupError):
            force_delete(api, pod_path(PODS_NS, name))

    def _node_change(self, api: Api) -> None:
        from tests.controlplane.components import set_allocatable

        node = self._node()
        spec = self.world.nodes[node]
        choice = self.rng.randrange(4)
        path = f"/api/v1/nodes/{node}"
        current = api.call("GET", path)
        if choice == 0:
            body: RawObject = {"spec": {"unschedulable": not current["spec"].get("unschedulable")}}
        elif choice == 1:
            tainted = bool(current["spec"].get("taints"))
            taint = {"key": "soak.example.com/maintenance", "effect": "NoSchedule"}
            body = {"spec": {"taints": None if tainted else [taint]}}
        elif choice == 2:
            label = current["metadata"].get("labels", {}).get("kubevirt.io/schedulable")
            body = {
                "metadata": {
                    "labels": {"kubevirt.io/schedulable": "false" if label == "true" else "true"}
                }
            }
        else:
            set_allocatable(
                api, node, {spec.resource: self.rng.choice([0, spec.units // 2, spec.units])}
            )
            return
        api.call("PATCH", path, body=body, content_type=MERGE)

    def _class_edit(self, api: Api) -> None:
        spec = self.rng.choice(CLASSES)
        body = {"spec": {"displayName": f"Soak {spec.name} {self.rng.randrange(1000)}"}}
        api.call("PATCH", f"{GPUCLASSES}/{spec.name}", body=body, content_type=MERGE)

    def _source_rotate(self, api: Api) -> None:
        source = self.rng.choice(sorted(self.world.tokens))
        token = f"token-{self.rng.randrange(10**9)}"
        api.apply([api_secret(source, LICENSE_NAMESPACE, {TOKEN_KEY: token})])
        self.world.tokens[source] = token

    def _entitlement_flip(self, api: Api) -> None:
        ns = tenant(self.rng.randrange(self.shape.tenants))
        self.world.entitled[ns] = not self.world.entitled[ns]
        labels = dict.fromkeys(ENTITLED, None) if not self.world.entitled[ns] else ENTITLED
        api.call(
            "PATCH",
            f"/api/v1/namespaces/{ns}",
            body={"metadata": {"labels": labels}},
            content_type=MERGE,
        )

    def _churn_once(self, api: Api) -> None:
        roll = self.rng.random()
        below = len(self.world.vmis) < self.shape.vmis
        if roll < 0.40:
            (self._vmi_create if below or not self.world.vmis else self._vmi_delete)(api)
        elif roll < 0.70:
            grow = len(self.world.pods) < self.shape.pods or not self.world.pods
            (self._pod_create if grow and self.rng.random() < 0.6 else self._pod_delete)(api)
        elif roll < 0.90:
            self._node_change(api)
        elif roll < 0.93:
            self._class_edit(api)
        elif roll < 0.96:
            self._source_rotate(api)
        else:
            self._entitlement_flip(api)
        self.report.changes += 1

    def _churn(self) -> None:
        period = 1.0 / self.shape.churn_per_second
        api = self.api()
        while not self.stopping.is_set():
            if not self.churn_go.is_set():
                self.churn_idle.set()
                self.churn_go.wait(1.0)
                continue
            self.churn_idle.clear()
            started = time.monotonic()
            try:
                self._churn_once(api)
            except (ApiError, httpx.HTTPError, LookupError, AssertionError) as exc:
                self.report.churn_errors += 1
                if self.report.churn_errors <= 5:
                    self.log(f"churn error (the API server may be restarting): {str(exc)[:200]}")
                api.close()
                api = self.api()
            time.sleep(max(0.0, period - (time.monotonic() - started)))
        api.close()

    def pause_churn(self) -> None:
        self.churn_go.clear()
        self.churn_idle.wait(30)

    # -- the prober and the sampler ---------------------------------------------------------------

    def _probe(self) -> None:
        period = 1.0 / self.shape.probes_per_second
        api = self.api()
        while not self.stopping.wait(period):
            entitled = [n for n, e in self.world.entitled.items() if e] or [tenant(0)]
            ns = self.rng.choice(entitled)
            spec = self.rng.choice(CLASSES)
            body = selecting_vmi(ns, selection(spec))
            if self._admit(lambda a=api, b=body: a.create(b, dryRun="All")) is None:
                api.close()
                api = self.api()
        api.close()

    def _sample(self) -> None:
        api = self.api()
        while not self.stopping.wait(self.shape.sample_every):
            at = self.now()
            for tracked in self.fleet.tracked:
                found = rss_and_fds(tracked.pid)
                if found is None:
                    continue
                self.report.started.setdefault(tracked.label, tracked.started - self.t0)
                self.report.samples.setdefault(tracked.label, []).append((at, *found))
            with contextlib.suppress(ApiError, httpx.HTTPError):
                self.report.holders.append((at, self.fleet.leader(api)))
            for name, process in list(self.fleet.reconcilers.items()):
                value = process.metric("gpuclass_status_writes_total")
                if value is not None:
                    self.report.status_writes[name] = value
            with contextlib.suppress(ApiError, httpx.HTTPError):
                stored = api.get("v1", "Secret", CERT_SECRET, namespace=RELEASE_NS)
                data = (stored or {}).get("data") or {}
                if data.get("tls.crt"):
                    self._certs.add(data["tls.crt"])
                if data.get("ca.crt"):
                    self._cas.add(data["ca.crt"])
            self.report.certificates_seen = len(self._certs)
            self.report.cas_seen = len(self._cas)
        api.close()

    # -- the invariants ---------------------------------------------------------------------------

    def problems(self) -> list[str]:
        """What a from-scratch computation on a fresh list finds different, and a Lease held by
        no living replica; [] when consistent."""
        found: list[str] = []
        with self.api() as api:
            if self.fleet.leader(api) is None:
                # a SIGKILLed leader leaves a written state that may happen to be right; it only
                # stays right while a living replica holds the Lease
                found.append("no living reconciler holds the Lease")
        done = subprocess.run(
            [
                str(RECONCILER),
                f"--kubeconfig={self.plane.admin_kubeconfig}",
                "--once",
                "--dry-run",
                "--log-format=json",
                *reconciler_args(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            return [f"--once failed ({done.returncode}): {done.stderr[-500:]}"]
        report = json.loads(done.stdout)
        for name in report.get("statusWrites") or []:
            found.append(f"status of {name} differs from a fresh computation")
        copies = report.get("licenseCopies", report.get("licenceCopies")) or []
        for write in copies:
            found.append(f"license copy to write: {json.dumps(write, sort_keys=True)[:300]}")
        for write in report.get("finalizers") or []:
            found.append(f"finalizer to write: {json.dumps(write, sort_keys=True)[:300]}")
        with self.api() as api:
            found += self._contract_problems(api)
        return found

    def _contract_problems(self, api: Api) -> list[str]:
        found = []
        vmis = api.call("GET", "/apis/kubevirt.io/v1/virtualmachineinstances")["items"]
        mounted = {
            (v["metadata"]["namespace"], vol["secret"]["secretName"])
            for v in vmis
            for vol in v["spec"].get("volumes") or []
            if "secret" in vol
        }
        selector = ",".join(f"{k}={v}" for k, v in MANAGED.items())
        copies = api.call("GET", "/api/v1/secrets", params={"labelSelector": selector})["items"]
        sources = {c.name: c.source for c in CLASSES if c.source}
        for copy in copies:
            meta = copy["metadata"]
            if not meta["name"].startswith(COPY_PREFIX) or meta["namespace"] == RELEASE_NS:
                continue
            where = f"{meta['namespace']}/{meta['name']}"
            if (meta["namespace"], meta["name"]) not in mounted:
                found.append(f"license copy {where} left behind: no VMI there mounts it")
            source = sources.get(meta["name"][len(COPY_PREFIX) :])
            token = base64.b64decode((copy.get("data") or {}).get(TOKEN_KEY, "")).decode()
            if source is not None and token != self.world.tokens[source]:
                found.append(f"license copy {where} holds an old token")
        selected = {entry.get("className") for v in vmis for entry in _selection_of(v)}
        for cls in api.call("GET", GPUCLASSES)["items"]:
            if (
                FINALIZER in (cls["metadata"].get("finalizers") or [])
                and cls["metadata"]["name"] not in selected
            ):
                found.append(
                    f"class {cls['metadata']['name']} held in use with no VMI selecting it"
                )
        return found

    def settle(self, why: str) -> float | None:
        """Pause the churn and wait until the invariants hold; seconds waited, None when they
        did not hold within `settle_timeout` (a violation, with what differed)."""
        self.pause_churn()
        started = time.monotonic()
        last: list[str] = []
        seen: list[str] = []  # what each unmet attempt found first, to say why a settle was slow
        while time.monotonic() - started < self.shape.settle_timeout:
            try:
                last = self.problems()
            except (ApiError, httpx.HTTPError, subprocess.TimeoutExpired, ValueError) as exc:
                last = [f"check could not run: {str(exc)[:200]}"]
            if not last:
                self.report.checks += 1
                waited = time.monotonic() - started
                if waited > SLOW_SETTLE:
                    note = f"{self.now():.0f}s {why}: {waited:.0f} s; unmet: " + " | ".join(seen)
                    self.report.slow_settles.append(note)
                    self.log(f"slow settle after {note}")
                return waited
            seen.append(f"+{time.monotonic() - started:.0f}s {last[0][:160]} ({len(last)} in all)")
            time.sleep(2.0)
        self.report.checks += 1
        self.report.violations.append(f"{self.now():.0f}s after {why}: " + "; ".join(last[:5]))
        self.log(f"VIOLATION after {why}: {last[:5]}")
        return None

    # -- faults -----------------------------------------------------------------------------------

    def inject(self, kind: str) -> float:
        """Inflict the fault; returns when it ended (a kill at once, a roll once its last old
        replica has exited, a restart once the API server is ready again), in soak seconds."""
        ended = self.now()
        with self.api() as api:
            if kind == "leader-kill":
                leader = self.fleet.leader(api)
                if leader is not None:
                    self.fleet.kill_reconciler(leader)
                ended = self.now()
                self.fleet.start_reconciler()  # the Deployment makes a new Pod
                return ended
            elif kind == "webhook-roll":
                self.rolling = True
                try:
                    for old in list(self.fleet.webhooks):
                        self.fleet.roll_webhook(old)
                finally:
                    self.rolling = False
            elif kind == "apiserver-restart":
                self.apiserver_down = True
                try:
                    self.plane.restart_apiserver()
                finally:
                    self.apiserver_down = False
            elif kind == "etcd-compact-defrag":
                self.plane.compact_etcd()
                base = f"http://127.0.0.1:{self.plane.etcd_port}/v3"
                httpx.post(f"{base}/maintenance/defragment", json={}, timeout=60).raise_for_status()
            elif kind == "watch-cut":
                for proxy in self.fleet.proxies.values():
                    proxy.break_watches(lambda _path: True)
        return self.now()

    # -- the run ----------------------------------------------------------------------------------

    def run(self) -> Report:
        self.t0 = time.monotonic()
        threads = [
            threading.Thread(target=t, daemon=True)
            for t in (self._churn, self._probe, self._sample)
        ]
        for thread in threads:
            thread.start()
        self.churn_go.set()
        next_check = self.shape.check_every
        next_fault = self.shape.fault_every
        faults = 0
        while self.now() < self.shape.seconds or (
            self.shape.every_fault and faults < len(self.shape.faults)
        ):
            if self.now() >= next_fault:
                kind = self.shape.faults[faults % len(self.shape.faults)]
                faults += 1
                at = self.now()
                self.log(f"{at:.0f}s fault: {kind}")
                ended = self.inject(kind)
                waited = self.settle(kind)
                recovered = None if waited is None else self.now() - ended
                self.report.faults.append(
                    FaultRecord(kind, at, ended - at, recovered, self.shape.fault_goal(kind))
                )
                outcome = (
                    f"not consistent within {self.shape.settle_timeout:.0f} s"
                    if recovered is None
                    else f"consistent {recovered:.1f} s after it ended"
                )
                self.log(f"{at:.0f}s {kind}: {outcome}")
                self.churn_go.set()
                next_fault = self.now() + self.shape.fault_every
                next_check = self.now() + self.shape.check_every
            elif self.now() >= next_check:
                waited = self.settle("a periodic check")
                if waited is not None:
                    self.report.settle_seconds.append(waited)
                self.churn_go.set()
                next_check = self.now() + self.shape.check_every
            time.sleep(0.5)
        self.pause_churn()
        self.settle("the end of the churn")
        self.drain()
        self.stopping.set()
        for thread in threads:
            thread.join(30)
        self.report.elapsed = self.now()
        return self.report

    def drain(self) -> None:
        """Every VMI and launcher deleted: nothing of ours may be left behind."""
        with self.api() as api:
            while self.world.vmis:
                self._vmi_delete(api)
            # A create the API server stored while its answer was lost (a restart) made a VMI
            # the churn never learnt of: every VMI and launcher in the tenants goes.
            for i in range(self.shape.tenants):
                base = f"/namespaces/{tenant(i)}"
                for path, kind in (
                    (f"/apis/kubevirt.io/v1{base}/virtualmachineinstances", "VMI"),
                    (f"/api/v1{base}/pods", "launcher"),
                ):
                    for item in api.call("GET", path)["items"]:
                        self.report.unknown_at_drain += 1
                        self.log(
                            f"drain: a {kind} the churn did not know: {item['metadata']['name']}"
                        )
                        with contextlib.suppress(ApiError, LookupError):
                            force_delete(api, f"{path}/{item['metadata']['name']}")
            deadline = time.monotonic() + self.shape.settle_timeout
            while True:
                left = self._leftovers(api)
                if not left or time.monotonic() > deadline:
                    break
                time.sleep(2.0)
        self.report.leftovers = left
        if left:
            self.report.violations.append("left behind after the last VMI: " + "; ".join(left[:5]))

    def _leftovers(self, api: Api) -> list[str]:
        selector = ",".join(f"{k}={v}" for k, v in MANAGED.items())
        copies = api.call("GET", "/api/v1/secrets", params={"labelSelector": selector})["items"]
        left = [
            f"copy {c['metadata']['namespace']}/{c['metadata']['name']}"
            for c in copies
            if c["metadata"]["name"].startswith(COPY_PREFIX)
            and c["metadata"]["namespace"] != RELEASE_NS
        ]
        vmis = api.call("GET", "/apis/kubevirt.io/v1/virtualmachineinstances")["items"]
        for cls in api.call("GET", GPUCLASSES)["items"]:
            if FINALIZER in (cls["metadata"].get("finalizers") or []):
                name = cls["metadata"]["name"]
                users = [
                    f"{v['metadata']['namespace']}/{v['metadata']['name']}"
                    for v in vmis
                    if any(e.get("className") == name for e in _selection_of(v))
                ]
                left.append(f"finalizer on {name} (VMIs selecting it: {users or 'none'})")
        return left

    def keep_logs(self, folder: Path) -> None:
        """Each webhook and reconciler process's log, one file per process, and every memory and
        open-files sample (`samples.tsv`: process, seconds into the run, RSS MB, open files), for
        a post-mortem and for reading a slope's shape, not only its figure, and the whole report
        (`report.json`), from which `benchmarks/soak.py --figures-from` prints the figures again."""
        folder.mkdir(parents=True, exist_ok=True)
        for name, lines in self.fleet.logs().items():
            (folder / f"{name}.log").write_text("\n".join(lines) + "\n")
        rows = ["process\tseconds\trss_mb\tfds"] + [
            f"{label}\t{at:.0f}\t{rss:.1f}\t{fds}"
            for label, series in sorted(self.report.samples.items())
            for at, rss, fds in series
        ]
        (folder / "samples.tsv").write_text("\n".join(rows) + "\n")
        (folder / "report.json").write_text(self.report.to_json())

    def close(self) -> None:
        self.stopping.set()
        self.churn_go.set()
        self.fleet.close()
        with contextlib.suppress(Exception):
            self.launchers.close()
        with contextlib.suppress(Exception):
            self.kwok.stop()


def _selection_of(vmi: RawObject) -> list[dict[str, Any]]:
    text = (vmi["metadata"].get("annotations") or {}).get("gpu.cozystack.io/classes")
    try:
        found = json.loads(text) if text else []
    except ValueError:
        return []
    return [e for e in found if isinstance(e, dict)] if isinstance(found, list) else []


def percent(part: float, whole: float) -> str:
    return "n/a" if whole == 0 or math.isnan(whole) else f"{100 * part / whole:.1f}%"


def python() -> str:
    return sys.executable
