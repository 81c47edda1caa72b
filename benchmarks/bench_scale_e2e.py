"""A scale run through a real kube-apiserver + etcd: 1,000 kwok nodes and 30,000 pods.

Starts its own control plane (tests/controlplane/) and kwok playing the kubelet of
every node (tests/controlplane/components.py), then builds the cluster through the
API: `BENCH_NODES` Nodes (default 1,000; one in four advertises 8 units of one of
8 GPU resources, each named by a GPUClass), `BENCH_PODS` Pods bound to them (default
30,000; `BENCH_GPU_PODS`, default 1,500, request one GPU unit, the rest only CPU)
that kwok runs. Then it prints:

1. **initial sync against a plain list**, in this process, with the same client
   (`reconciler.api.client.KubeAdapter`, same page size and selectors): (a) list every
   resource the reconciler watches and drop the pages; (b) the reconciler's own
   start-up work: the same lists into its store, then the first pass computing
   every class (dry run: nothing written). Alternated `BENCH_ROUNDS` times (default
   3); medians and the ratio (goal: sync <= 2x the plain list);
2. **the reconciler process**: `gpuclass-reconciler` started as in production
   (coalescing 0.2 s, 15 s Lease): time to every class's status, and its resident
   memory after the sync and after the churn (VmRSS, peak VmHWM; goal <= 200 MB);
3. **event-to-status latency under churn**: `BENCH_CHURN_SECONDS` (default 120) of
   `BENCH_CHURN_RATE` (default 20) pod changes a second — GPU and CPU pods created and
   deleted (gracefully: kwok removes them as a kubelet would) — of which every tenth
   is a probe: a one-unit pod created or deleted on the node of one of 4 probe classes;
   its latency runs from just before the write until a gpuclasses watch shows the
   class's new `status.free` (goal: p99 <= 1 s). The run ends with a positive
   control: one more probe must reach status;
4. **admission latency the webhook adds**: `gpuclass-webhook` (cluster mode) behind
   the chart's own Mutating/ValidatingWebhookConfigurations, rendered by Helm with
   only `clientConfig` pointed at the local process; `BENCH_VMIS` (default 200) VMI
   creates with them and as many without, in alternating blocks of 50, every response
   checked (patched with the class's GPUs with the webhook, untouched without);
   p50/p99 and the difference (goal: <= 10 ms added at p99).

Not run by pytest (tests/e2e/test_bench_scale_e2e.py runs it once at a tiny scale).
Exits 1 when a goal is missed. `.venv/bin/python benchmarks/bench_scale_e2e.py`
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bench_e2e_reconciler import ClassWatch, percentile  # noqa: E402
from gpuclass.reconciler.api.client import KubeAdapter  # noqa: E402
from gpuclass.reconciler.manager import Manager  # noqa: E402
from gpuclass.reconciler.settings import ReconcilerSettings  # noqa: E402
from gpuclass.reconciler.state.resources import RESOURCES  # noqa: E402
from tests.builders import api_gpuclass, api_namespace, api_pod  # noqa: E402
from tests.controlplane.api import Api, ApiError, RawObject  # noqa: E402
from tests.controlplane.cluster import ControlPlane, User, eventually, find_assets  # noqa: E402
from tests.controlplane.components import kwok, kwok_node, set_allocatable  # noqa: E402
from tests.controlplane.plugin import GPUCLASS_CRD, KUBEVIRT_CRDS, WebhookRegistry  # noqa: E402
from tests.e2e_reconciler_helpers import (  # noqa: E402
    GPUCLASSES,
    KUBEVIRT_NAMESPACE,
    LICENSE_NAMESPACE,
    MERGE,
    PRODUCTION,
    PermittedDevices,
    ReconcilerProcess,
    pod_path,
)
from tests.webhook_process import WebhookProcess  # noqa: E402

NODES = int(os.environ.get("BENCH_NODES", "1000"))
PODS = int(os.environ.get("BENCH_PODS", "30000"))
GPU_PODS = int(os.environ.get("BENCH_GPU_PODS", str(PODS // 20)))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
CHURN_SECONDS = float(os.environ.get("BENCH_CHURN_SECONDS", "120"))
CHURN_RATE = float(os.environ.get("BENCH_CHURN_RATE", "20"))
VMIS = int(os.environ.get("BENCH_VMIS", "200"))
KWOK_LEASE = int(os.environ.get("BENCH_KWOK_LEASE_SECONDS", "240"))  # renewed every quarter
WORKERS = 8
CLASSES = 8
PROBE_CLASSES = 4  # classes 0..3: only probes change them during the churn
UNITS = 8
GPU_NODE_EVERY = 4
PROBE_EVERY = 10  # one change in ten is a probe
LOST_AFTER = 10.0  # seconds after which a probe's status counts as never arrived
BLOCK = 50
NS, CHURN_NS, TENANT = "bench-scale", "bench-scale-churn", "tenant-bench"
LABELS = {"bench": "scale"}
NO_TAINTS = {"spec": {"taints": None}}
GOALS = {"rss_mb": 200.0, "sync_ratio": 2.0, "p99_s": 1.0, "admission_ms": 10.0}


def resource(index: int) -> str:
    return f"scale.example.com/gpu-{index}"


def node_name(index: int) -> str:
    return f"scale-{index:05d}"


def gpu_nodes() -> dict[str, int]:
    """GPU node -> its class index (one node in four, classes in turn)."""
    picked = [node_name(i) for i in range(0, NODES, GPU_NODE_EVERY)]
    return {name: i % CLASSES for i, name in enumerate(picked)}


# -- building the cluster ---------------------------------------------------------------------------


class Clients:
    """One Api per worker thread (each its own connection pool)."""

    def __init__(self, user: User) -> None:
        self.user = user
        self._local = threading.local()
        self._all: list[Api] = []
        self._lock = threading.Lock()

    def get(self) -> Api:
        api: Api | None = getattr(self._local, "api", None)
        if api is None:
            api = self._local.api = self.user.api()
            with self._lock:
                self._all.append(api)
        return api

    def close(self) -> None:
        for api in self._all:
            api.close()


def in_parallel(clients: Clients, tasks: Iterable[Callable[[Api], object]]) -> int:
    done = 0
    with ThreadPoolExecutor(WORKERS) as pool:
        for _ in pool.map(lambda task: task(clients.get()), tasks):
            done += 1
    return done


def create_nodes(clients: Clients) -> None:
    gpus = gpu_nodes()

    def make(name: str) -> Callable[[Api], object]:
        def task(api: Api) -> object:
            api.create(kwok_node(name, {}, labels={"bench.example.com/scale": "yes"}))
            units = {resource(gpus[name]): UNITS} if name in gpus else {}
            set_allocatable(api, name, units)
            # No node lifecycle controller runs here: lift the not-ready taint the API
            # server puts on a new Node, as that controller does once kwok reports Ready.
            return api.call("PATCH", f"/api/v1/nodes/{name}", body=NO_TAINTS, content_type=MERGE)

        return task

    in_parallel(clients, (make(node_name(i)) for i in range(NODES)))


def creation(body: RawObject) -> Callable[[Api], object]:
    return lambda api: api.create(body)


def pod_tasks() -> list[Callable[[Api], object]]:
    """GPU pods fill each GPU node to at most 6 of its 8 units; CPU pods go round the nodes."""
    gpus = list(gpu_nodes().items())
    tasks: list[Callable[[Api], object]] = []
    for i in range(GPU_PODS):
        node, index = gpus[i % len(gpus)]
        if i // len(gpus) >= UNITS - 2:
            break
        tasks.append(creation(api_pod(f"gpu-{i}", NS, node, {resource(index): 1}, labels=LABELS)))
    for i in range(PODS - len(tasks)):
        tasks.append(
            creation(api_pod(f"cpu-{i}", NS, node_name(i % NODES), {"cpu": 1}, labels=LABELS))
        )
    return tasks


def count(api: Api, path: str, **params: str) -> int:
    """Objects in a collection, listed page by page."""
    total, token = 0, ""
    while True:
        query = {**params, "limit": "500"}
        if token:
            query["continue"] = token
        page = api.call("GET", path, params=query)
        total += len(page["items"])
        token = page["metadata"].get("continue") or ""
        if not token:
            return total


def wait_running(api: Api, timeout: float) -> int:
    """Wait until kwok has run every pod; returns how many are still Pending at the end."""
    deadline = time.monotonic() + timeout
    while True:
        pending = count(api, "/api/v1/pods", fieldSelector="status.phase=Pending")
        if pending == 0 or time.monotonic() > deadline:
            return pending
        time.sleep(5)


def setup(plane: ControlPlane, clients: Clients) -> tuple[float, int]:
    """Classes, nodes, pods; returns (seconds taken, pods still Pending)."""
    started = time.monotonic()
    api = plane.admin
    api.apply(
        [api_namespace(n) for n in (LICENSE_NAMESPACE, KUBEVIRT_NAMESPACE, NS, CHURN_NS, TENANT)]
    )
    PermittedDevices().permit(api, [resource(i) for i in range(CLASSES)])
    for i in range(CLASSES):
        api.create(api_gpuclass(f"scale-{i}", resource(i), maxCount=8))
    create_nodes(clients)
    in_parallel(clients, pod_tasks())
    pending = wait_running(api, timeout=max(300.0, PODS / 20))
    return time.monotonic() - started, pending


# -- 1. initial sync against a plain list -----------------------------------------------------------


def settings(kubeconfig: Path) -> ReconcilerSettings:
    return ReconcilerSettings(kubeconfig=str(kubeconfig), dry_run=True, vgpu_entitled=True)


async def plain_list(kubeconfig: Path) -> tuple[float, int]:
    """Every source the reconciler lists, page by page with its client; nothing kept."""
    adapter = await KubeAdapter.connect(settings(kubeconfig))
    try:
        started, objects = time.perf_counter(), 0
        for source in RESOURCES:
            async for page in adapter.list_pages(source):
                objects += len(page.items)
        return time.perf_counter() - started, objects
    finally:
        await adapter.close()


async def initial_sync(kubeconfig: Path) -> float:
    """The reconciler's start-up: every list into its store, then the first full pass."""
    reconciler = Manager(settings(kubeconfig), serve_http=False)
    try:
        started = time.perf_counter()
        await reconciler.load()
        await reconciler.reconcile_pending()
        return time.perf_counter() - started
    finally:
        if reconciler.api is not None:
            await reconciler.api.close()


def sync_against_list(kubeconfig: Path) -> tuple[list[float], list[float], int]:
    lists, syncs, objects = [], [], 0
    for round_ in range(ROUNDS):
        order = (0, 1) if round_ % 2 == 0 else (1, 0)
        for which in order:
            if which == 0:
                seconds, objects = asyncio.run(plain_list(kubeconfig))
                lists.append(seconds)
            else:
                syncs.append(asyncio.run(initial_sync(kubeconfig)))
    return lists, syncs, objects


# -- 2. the reconciler process ----------------------------------------------------------------------


def memory_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of a process in MB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return tuple(int(fields[k].split()[0]) / 1024 for k in ("VmRSS", "VmHWM"))  # type: ignore[return-value]


def statuses(api: Api) -> dict[str, int | None]:
    items = api.call("GET", GPUCLASSES)["items"]
    return {
        o["metadata"]["name"]: (o.get("status") or {}).get("free")
        for o in items
        if o["metadata"]["name"].startswith("scale-")
    }


# -- 3. event-to-status latency under churn ---------------------------------------------------------


class Probes:
    """Probe writes on the probe classes and their latencies, matched from the watch.

    The expected `status.free` of a probe is the class's stored figure just before the
    write, plus or minus one; a probe whose status has not arrived after LOST_AFTER
    seconds is counted as lost (and printed), so one miss cannot stall the rest."""

    def __init__(self, api: Api, watch: ClassWatch) -> None:
        self.api, self.watch = api, watch
        gpus = gpu_nodes()
        self.node = {
            f"scale-{i}": next(n for n, c in gpus.items() if c == i) for i in range(PROBE_CLASSES)
        }
        self.placed: dict[str, str | None] = dict.fromkeys(self.node)
        self.pending: dict[str, tuple[float, int]] = {}
        self.seen: dict[str, int | None] = {}
        self.latencies: list[float] = []
        self.lost: list[str] = []
        self.skipped = 0
        self._turn = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._match, daemon=True)
        self._thread.start()

    def _match(self) -> None:
        while not self._stop.is_set():
            try:
                arrived, _, name, free = self.watch.events.get(timeout=0.2)
            except queue.Empty:
                continue
            with self._lock:
                self.seen[name] = free
                waiting = self.pending.get(name)
                if waiting is not None and free == waiting[1]:
                    self.latencies.append(arrived - waiting[0])
                    del self.pending[name]

    def write(self) -> None:
        """Create or delete the probe pod of the next class that is not waiting."""
        names = list(self.node)
        for _ in names:
            name = names[self._turn % len(names)]
            self._turn += 1
            with self._lock:
                waiting = self.pending.get(name)
                if waiting is not None and time.perf_counter() - waiting[0] > LOST_AFTER:
                    self.lost.append(
                        f"{name} wanted free={waiting[1]}, watch saw {self.seen.get(name)}"
                    )
                    del self.pending[name]
                    waiting = None
            if waiting is None:
                self._flip(name)
                return
        self.skipped += 1

    def _flip(self, name: str) -> None:
        placed = self.placed[name]
        stored = (self.api.get("cozystack.io/v1alpha1", "GPUClass", name) or {}).get("status") or {}
        expected = int(stored.get("free", 0)) + (1 if placed else -1)
        with self._lock:
            self.pending[name] = (time.perf_counter(), expected)
        if placed is None:
            pod_name = f"probe-{name}-{time.monotonic_ns()}"
            index = int(name.rsplit("-", 1)[1])
            self.api.create(api_pod(pod_name, NS, self.node[name], {resource(index): 1}))
            self.placed[name] = pod_name
        else:
            self.api.request("DELETE", pod_path(NS, placed), params={"gracePeriodSeconds": "0"})
            self.placed[name] = None

    def settle(self, timeout: float = 30.0) -> bool:
        """Wait until every probe written so far has reached status."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if not self.pending:
                    return True
            time.sleep(0.05)
        return False

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)


class Background:
    """Pod changes that are not probes: GPU pods of classes 4..7 and CPU pods, created
    and then deleted gracefully (kwok finishes the deletion, as a kubelet would)."""

    def __init__(self, api: Api) -> None:
        self.api = api
        gpus = [(n, c) for n, c in gpu_nodes().items() if c >= PROBE_CLASSES]
        self.gpu_nodes = gpus
        self.alive: list[str] = []
        self.made = 0

    def write(self) -> None:
        if len(self.alive) >= 20:
            self.api.request("DELETE", pod_path(CHURN_NS, self.alive.pop(0)))
            return
        self.made += 1
        node, index = self.gpu_nodes[self.made % len(self.gpu_nodes)]
        if self.made % 2:
            body = api_pod(f"churn-gpu-{self.made}", CHURN_NS, node, {resource(index): 1})
        else:
            body = api_pod(
                f"churn-cpu-{self.made}", CHURN_NS, node_name(self.made % NODES), {"cpu": 1}
            )
        self.api.create(body)
        self.alive.append(body["metadata"]["name"])


def churn(api: Api, probes: Probes, seconds: float) -> int:
    background = Background(api)
    writes, interval = 0, 1.0 / CHURN_RATE
    next_at, deadline = time.monotonic(), time.monotonic() + seconds
    while time.monotonic() < deadline:
        if writes % PROBE_EVERY == 0:
            probes.write()
        else:
            background.write()
        writes += 1
        next_at += interval
        time.sleep(max(0.0, next_at - time.monotonic()))
    return writes


# -- 4. admission latency the webhook adds ----------------------------------------------------------


def chart_webhooks(url: str, ca_pem: bytes) -> list[RawObject]:
    """The chart's own webhook configurations, pointed at the local webhook."""
    from tests.chart_helpers import chart_webhook_configurations

    return chart_webhook_configurations(url, ca_pem)


def vmi(index: int) -> RawObject:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {
            "name": f"bench-vmi-{index}",
            "namespace": TENANT,
            "annotations": {
                "gpu.cozystack.io/classes": json.dumps([{"className": "scale-0", "count": 2}])
            },
        },
        "spec": {"domain": {"devices": {}, "memory": {"guest": "1Gi"}}},
    }


def gpus_of(stored: RawObject) -> list[str]:
    devices = ((stored.get("spec") or {}).get("domain") or {}).get("devices") or {}
    return [d["deviceName"] for d in devices.get("gpus") or []]


def admission(plane: ControlPlane) -> tuple[list[float], list[float], int]:
    """Create times with and without the webhook (ms), and the responses that were wrong."""
    api = plane.admin
    server = WebhookProcess(
        ["--kubeconfig", str(plane.admin_kubeconfig)],
        tls_dir=Path(tempfile.mkdtemp(prefix="bench-scale-tls-")),
    )
    hooks = chart_webhooks(server.url, Path(server.ca).read_bytes())
    registry = WebhookRegistry(api)
    timings: dict[bool, list[float]] = {True: [], False: []}
    wrong, index = 0, 0
    expected = [resource(0)] * 2
    try:
        for block in range(max(2, 2 * VMIS // BLOCK)):
            registered = block % 2 == 0
            if registered:
                registry.register(hooks)
            else:
                registry.remove()
            probe, want = vmi(10**6 + block), expected if registered else []

            def in_effect(probe: RawObject = probe, want: list[str] = want) -> bool:
                # The API server reloads mutating and validating configurations separately: for
                # a moment the final validating webhook can judge a VMI the mutating one no
                # longer (or not yet) resolved, and refuses it. That is the change not yet in
                # effect, not an answer; one that lasts ends in the timeout below.
                try:
                    return gpus_of(api.create(probe, dryRun="All")) == want
                except ApiError as exc:
                    if exc.status_code == 422:
                        return False
                    raise

            eventually(
                in_effect,
                timeout=30,
                what="the webhook configuration to take effect",
            )
            for _ in range(min(BLOCK, VMIS)):
                index += 1
                started = time.perf_counter()
                stored = api.create(vmi(index))
                timings[registered].append((time.perf_counter() - started) * 1000)
                if gpus_of(stored) != (expected if registered else []):
                    wrong += 1
    finally:
        registry.remove()
        server.stop()
    return timings[True], timings[False], wrong


# -- the run ----------------------------------------------------------------------------------------


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def main() -> int:
    met: dict[str, bool] = {}
    with ControlPlane(find_assets()) as plane:
        plane.install_crds([GPUCLASS_CRD, *KUBEVIRT_CRDS])
        api = plane.admin
        kubelet = kwok(plane, lease_seconds=KWOK_LEASE)
        clients = Clients(plane.admin_user)
        try:
            took, pending = setup(plane, clients)
            print(
                f"setup: {NODES} kwok nodes ({len(gpu_nodes())} with GPUs, {CLASSES} classes), "
                f"{PODS} pods ({min(GPU_PODS, len(gpu_nodes()) * (UNITS - 2))} with a GPU) "
                f"through kube-apiserver {api.call('GET', '/version')['gitVersion']} in {took:.0f}s; "
                f"pods kwok has not run yet: {pending}"
            )
            met.update(run_reconciler(plane))
            with_hook, without, wrong = admission(plane)
            added = percentile(with_hook, 0.99) - percentile(without, 0.99)
            print(
                f"VMI creates through kube-apiserver ({len(with_hook)} with the chart's webhook "
                f"configurations, {len(without)} without, alternating blocks of {BLOCK}; wrong "
                f"responses {wrong}): without p50 {statistics.median(without):.1f} ms, p99 "
                f"{percentile(without, 0.99):.1f} ms; with p50 {statistics.median(with_hook):.1f} ms, "
                f"p99 {percentile(with_hook, 0.99):.1f} ms; added p50 "
                f"{statistics.median(with_hook) - statistics.median(without):.1f} ms, p99 "
                f"{added:.1f} ms (goal <= {GOALS['admission_ms']:.0f} ms)"
            )
            met["admission"] = added <= GOALS["admission_ms"] and wrong == 0
        finally:
            clients.close()
            kubelet.stop()
    missed = [k for k, ok in met.items() if not ok]
    print("goals missed: " + ", ".join(missed) if missed else "every goal met")
    return 1 if missed else 0


def run_reconciler(plane: ControlPlane) -> dict[str, bool]:
    api = plane.admin
    lists, syncs, objects = sync_against_list(plane.admin_kubeconfig)
    ratio = statistics.median(syncs) / statistics.median(lists)
    print(
        f"initial sync, same client, {ROUNDS} rounds each, {objects} objects: plain list "
        f"p50 {statistics.median(lists):.2f}s; reconciler lists into its state and computes "
        f"every class p50 {statistics.median(syncs):.2f}s; ratio {ratio:.2f} "
        f"(goal <= {GOALS['sync_ratio']:.1f})"
    )
    started = time.monotonic()
    process = ReconcilerProcess(
        plane.admin_kubeconfig, pod_name="bench-scale", timings=PRODUCTION, start_timeout=120
    )
    watch: ClassWatch | None = None
    probes: Probes | None = None
    try:
        eventually(process.ready, timeout=300, what="reconciler /readyz")
        ready = time.monotonic() - started
        eventually(
            lambda: all(v is not None for v in statuses(api).values()),
            timeout=120,
            what="every class's status",
        )
        rss, peak = memory_mb(process.proc.pid)
        print(
            f"reconciler process: ready (every watch synced) {ready:.1f}s after start, every "
            f"status written {time.monotonic() - started:.1f}s after start; RSS {rss:.0f} MB, "
            f"peak {peak:.0f} MB"
        )
        time.sleep(2 * PRODUCTION.coalesce + 1)  # the first statuses' echoes have passed
        listed = api.call("GET", GPUCLASSES)
        watch = ClassWatch(plane.admin_user, listed["metadata"]["resourceVersion"])
        probes = Probes(api, watch)
        writes = churn(api, probes, CHURN_SECONDS)
        probes.settle()
        latencies = list(probes.latencies)
        before = len(probes.latencies)
        probes.write()  # positive control: one more change must reach status
        control = probes.settle() and len(probes.latencies) == before + 1
        rss_after, peak = memory_mb(process.proc.pid)
        p99 = percentile(latencies, 0.99) if latencies else float("inf")
        print(
            f"churn {CHURN_SECONDS:.0f}s at {CHURN_RATE:.0f} pod changes/s ({writes} writes, "
            f"{len(latencies)} probes measured, {len(probes.lost)} lost, {probes.skipped} turns "
            f"skipped while every probe class had one in flight): "
            f"event-to-status p50 {ms(statistics.median(latencies)) if latencies else '-'}, "
            f"p99 {ms(p99)}, max {ms(max(latencies)) if latencies else '-'} "
            f"(goal p99 <= {ms(GOALS['p99_s'])}); positive control reached status: {control}"
        )
        if probes.lost:
            print(f"lost probes (first 5): {probes.lost[:5]}")
        print(
            f"reconciler memory after the churn: RSS {rss_after:.0f} MB, peak {peak:.0f} MB "
            f"(goal <= {GOALS['rss_mb']:.0f} MB)"
        )
        return {
            "sync": ratio <= GOALS["sync_ratio"],
            "rss": peak <= GOALS["rss_mb"],
            "latency": p99 <= GOALS["p99_s"] and control and not probes.lost,
        }
    finally:
        if probes is not None:
            probes.close()
        if watch is not None:
            watch.close()
        process.stop()


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (ApiError, TimeoutError, RuntimeError) as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
        sys.exit(2)
