"""The reconciler on a large cluster, in process: memory, first computation, per-event cost, no-op events.

Cluster: `benchmarks/gencluster.py` with 5,000 nodes, 150,000 pods, 64 classes
(BENCH_NODES, BENCH_PODS, BENCH_CLASSES override). The loop runs as in production —
`Manager.load()` (the informers' re-list path, page by page), the `Worker`, the pure
core — against an adapter that serves the generated objects a page at a time (so
the raw cluster never sits in memory at once, as with a real API server) and keeps
only the 64 GPUClass objects to apply status writes to. Its watches bring nothing; the
written classes reach the view as the class watch would bring them (`bring_writes`),
since the worker waits for its writes to come back before it writes a class again.

Prints, with the goals:
  1. peak RSS after loading everything (goal <= 300 MB);
  2. time of the first full computation: one worker pass over every class
     (statuses, finalizers, licence copies), writes included (goal <= 2 s);
  3. one pod event through to a recomputed and written status: the watch line
     parsed with orjson, applied to the state, the worker pass (goal <= 1 ms
     amortized), both one pass per event and coalesced (one pass per 200 events).
     Every event must change a class figure, or the figure would time no-ops: the
     GPU pods land on Ready, schedulable hosts of their class with a free unit (most
     generated nodes are full), and the run prints how many events caused a status
     write;
  4. status writes caused by replaying 10,000 unrelated pod events (goal 0).

No assertions on time: run it by hand (`make bench`) and read the figures.
"""

from __future__ import annotations

import asyncio
import gc
import os
import resource
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from random import Random
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.gencluster import DEDICATED, iter_cluster, pod
from benchmarks.gencluster import resource as resource_name
from gpuclass.reconciler.api.fake import apply_merge_patch
from gpuclass.reconciler.api.port import ListPage, RawObject, WatchEvent
from gpuclass.reconciler.leader import AlwaysLeader
from gpuclass.reconciler.manager import Manager
from gpuclass.reconciler.settings import ReconcilerSettings
from gpuclass.reconciler.state.sources import SPECS, Scope, Source, selected

NODES = int(os.environ.get("BENCH_NODES", 5000))
PODS = int(os.environ.get("BENCH_PODS", 150_000))
CLASSES = int(os.environ.get("BENCH_CLASSES", 64))
SEED = 1
EVENTS = 10_000
PAGE = 500


def rss_mb() -> tuple[float, float]:
    """(current, peak) resident set size in MB."""
    with open("/proc/self/statm") as statm:
        current = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return current / 1e6, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3


SCOPE = Scope(license_secret_names=frozenset({"vgpu-licence"}))
"""As the chart runs it: the licence source read by name (gencluster's one source Secret)."""


def served(source: Source, obj: RawObject) -> bool:
    """The server-side scope and selectors of each source (what reconciler/api/client.py asks for)."""
    return selected(SPECS[source], obj, SCOPE)


class GeneratedKube:
    """A KubeAPI serving the generated cluster page by page; writes go to the 64 class objects."""

    def __init__(self) -> None:
        self.classes = {
            o["metadata"]["name"]: o
            for o in iter_cluster(NODES, PODS, CLASSES, SEED, kinds=("GPUClass",))
        }
        self.version = 100
        self.writes: dict[str, int] = {}
        self.written: list[RawObject] = []
        """Classes as written, for the class watch's part (`bring_writes`)."""

    def _count(self, kind: str) -> None:
        self.writes[kind] = self.writes.get(kind, 0) + 1

    async def list_pages(self, source: Source) -> AsyncIterator[ListPage]:
        if source == "gpuclasses":  # as written so far, like a real server's list
            yield ListPage(
                [orjson.loads(orjson.dumps(o)) for o in self.classes.values()], str(self.version)
            )
            return
        page: list[RawObject] = []
        for obj in iter_cluster(NODES, PODS, CLASSES, SEED, kinds=(SPECS[source].kind,)):
            if served(source, obj):
                page.append(obj)
            if len(page) == PAGE:
                yield ListPage(page, "", last=False)
                page = []
        yield ListPage(page, "1", last=True)

    async def watch(self, source: Source, resource_version: str) -> AsyncIterator[WatchEvent]:
        await asyncio.Event().wait()
        yield WatchEvent("BOOKMARK")

    def _class(self, name: str, change: dict[str, Any]) -> RawObject:
        obj = apply_merge_patch(self.classes[name], change)
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        self.classes[name] = obj
        self.written.append(orjson.loads(orjson.dumps(obj)))
        result: RawObject = orjson.loads(orjson.dumps(obj))  # what comes back over the wire
        return result

    async def get_class(self, name: str) -> RawObject:
        return self._class(name, {})

    async def patch_class_status(self, name: str, patch: RawObject) -> RawObject | None:
        self._count("status")
        return self._class(name, {"status": patch["status"]})

    async def patch_class_finalizers(
        self, name: str, finalizers: list[str], resource_version: str
    ) -> RawObject | None:
        self._count("finalizers")
        return self._class(name, {"metadata": {"finalizers": finalizers}})

    async def create_secret(self, namespace: str, body: RawObject) -> RawObject | None:
        self._count("secret")
        return {**body, "metadata": {**body["metadata"], "resourceVersion": "1"}}

    async def patch_secret(
        self, namespace: str, name: str, patch: list[RawObject]
    ) -> RawObject | None:
        self._count("secret")
        return None

    async def delete_secret(self, namespace: str, name: str) -> None:
        self._count("secret")

    def _record(self, body: RawObject) -> RawObject:
        self.version += 1
        return {**body, "metadata": {**body["metadata"], "resourceVersion": str(self.version)}}

    async def create_config_map(self, namespace: str, body: RawObject) -> RawObject | None:
        self._count("copy-record")
        return self._record(body)

    async def replace_config_map(
        self, namespace: str, name: str, body: RawObject
    ) -> RawObject | None:
        self._count("copy-record")
        return self._record(body)

    async def create_event(self, namespace: str, body: RawObject) -> None:
        self._count("event")

    async def get_lease(self, namespace: str, name: str) -> RawObject | None:
        return None

    async def create_lease(self, namespace: str, body: RawObject) -> RawObject:
        return body

    async def replace_lease(self, namespace: str, name: str, body: RawObject) -> RawObject:
        return body

    async def close(self) -> None:
        return None


def nodes_with_a_free_unit() -> list[int]:
    """Indexes of nodes where one more unit of their main resource changes the class's `free`.

    Read from the generated objects, not from the reconciler: Ready, not cordoned,
    a host of the class (the dedicated taint only for classes that tolerate it), and
    fewer units requested by Pending/Running pods than allocatable.
    """
    eligible: dict[str, int] = {}
    for i, node in enumerate(iter_cluster(NODES, PODS, CLASSES, SEED, kinds=("Node",))):
        ready = any(
            c["type"] == "Ready" and c["status"] == "True" for c in node["status"]["conditions"]
        )
        tainted = any(t["key"] == DEDICATED for t in node["spec"].get("taints", []))
        tolerates = (i % CLASSES) % 5 == 0
        if ready and not node["spec"].get("unschedulable") and (tolerates or not tainted):
            eligible[node["metadata"]["name"]] = i
    used = dict.fromkeys(eligible, 0)
    for obj in iter_cluster(NODES, PODS, CLASSES, SEED, kinds=("Pod",)):
        name = obj["spec"]["nodeName"]
        if name in used and obj["status"]["phase"] in ("Pending", "Running"):
            limits = obj["spec"]["containers"][0]["resources"]["limits"]
            used[name] += int(limits.get(resource_name(eligible[name] % CLASSES), 0))
    return sorted(eligible[name] for name, units in used.items() if units < 8)


def gpu_events(rng: Random) -> list[bytes]:
    """Watch lines that move a class figure: a one-unit launcher pod ADDED on a node with a
    free unit (the node's free drops by one), then DELETED again (it comes back)."""
    targets = nodes_with_a_free_unit()
    lines = []
    for k in range(EVENTS // 2):
        obj = pod(PODS + k, nodes=NODES, classes=CLASSES, rng=rng, phase="Running")
        node_index = rng.choice(targets)
        obj["spec"]["nodeName"] = f"node-{node_index:05d}"
        obj["metadata"]["labels"] = {"kubevirt.io": "virt-launcher"}
        limits = {"cpu": "2", "memory": "4Gi", resource_name(node_index % CLASSES): "1"}
        obj["spec"]["containers"][0]["resources"] = {"limits": limits, "requests": limits}
        lines.append(orjson.dumps({"type": "ADDED", "object": obj}))
        lines.append(orjson.dumps({"type": "DELETED", "object": obj}))
    return lines


def unrelated_events(rng: Random) -> list[bytes]:
    """Watch lines that change nothing a class depends on.

    A quarter are status updates of existing GPU launcher pods (new IP, same
    requests); the rest are plain pods (no GPU) created and deleted.
    """
    existing = []
    for obj in iter_cluster(NODES, PODS, CLASSES, SEED, kinds=("Pod",)):
        if obj["metadata"]["labels"].get("kubevirt.io") and obj["status"]["phase"] == "Running":
            obj["status"]["podIP"] = "10.99.0.1"
            existing.append(obj)
            if len(existing) == EVENTS // 4:
                break
    lines = [orjson.dumps({"type": "MODIFIED", "object": obj}) for obj in existing]
    for k in range(EVENTS - len(lines)):
        obj = pod(2 * PODS + k, nodes=NODES, classes=CLASSES, rng=rng, phase="Running")
        limits = obj["spec"]["containers"][0]["resources"]["limits"]
        for key in [key for key in limits if key.startswith("gpu.example.com/")]:
            del limits[key]
        lines.append(orjson.dumps({"type": "ADDED", "object": obj}))
        if k % 2:
            lines.append(orjson.dumps({"type": "DELETED", "object": obj}))
    rng.shuffle(lines)
    return lines[:EVENTS]


def bring_writes(reconciler: Manager, kube: GeneratedKube) -> None:
    """The class watch's part: each written class reaches the view as the reflector puts it there."""
    for obj in kube.written:
        reconciler.sync.progressed("gpuclasses", obj["metadata"]["resourceVersion"])
        reconciler.state.upsert("gpuclasses", obj)
    kube.written.clear()


async def apply_lines(
    reconciler: Manager, kube: GeneratedKube, lines: list[bytes], *, batch: int
) -> float:
    """Parse and apply each watch line, with a worker pass every `batch` lines (and the classes it
    wrote brought back as their watch would); seconds taken."""
    state, worker = reconciler.state, reconciler.worker
    assert worker is not None
    started = time.perf_counter()
    for i, line in enumerate(lines, 1):
        event = orjson.loads(line)
        if event["type"] == "DELETED":
            state.delete("pods", event["object"])
        else:
            state.upsert("pods", event["object"])
        if i % batch == 0:
            await worker.reconcile_once()
            bring_writes(reconciler, kube)
    await worker.reconcile_once()
    bring_writes(reconciler, kube)
    return time.perf_counter() - started


async def main() -> None:
    gc.collect()
    base_now, _ = rss_mb()
    kube = GeneratedKube()
    settings = ReconcilerSettings(
        leader_elect=False,
        vgpu_entitled=True,
        coalesce_seconds=0.0,
        log_level="error",
        license_secret_names=sorted(SCOPE.license_secret_names or ()),
    )
    reconciler = Manager(
        settings,
        api=kube,
        leadership=AlwaysLeader(),
        serve_http=False,
        now=lambda: "2026-01-01T00:00:00Z",
    )
    print(
        f"cluster: {NODES} nodes, {PODS} pods, {CLASSES} classes (seed {SEED}); RSS after imports {base_now:.0f} MB"
    )

    started = time.perf_counter()
    generated = sum(1 for _ in iter_cluster(NODES, PODS, CLASSES, SEED))
    generating = time.perf_counter() - started
    started = time.perf_counter()
    await reconciler.load()
    loaded = time.perf_counter() - started
    gc.collect()
    now_mb, peak_mb = rss_mb()
    state = reconciler.state
    print(
        f"load (list every source, page by page): {loaded:.2f} s, of which generating the {generated} objects "
        f"~{generating:.2f} s; {len(state.pods)} pods with extended-resource requests kept of {PODS}"
    )
    print(f"  RSS after load {now_mb:.0f} MB, peak {peak_mb:.0f} MB   (goal: peak <= 300 MB)")

    worker = reconciler.worker
    assert worker is not None
    started = time.perf_counter()
    await worker.reconcile_once()
    first = time.perf_counter() - started
    bring_writes(reconciler, kube)
    print(
        f"first full computation (one worker pass, {len(state.classes)} classes, writes included): "
        f"{first * 1000:.0f} ms   (goal <= 2 s); writes {kube.writes}"
    )
    context = state.status_context()
    started = time.perf_counter()
    for name in state.classes:
        state.compute_status(name, context, now="2026-01-01T00:00:00Z")
    print(
        f"  of which computing all statuses alone: {(time.perf_counter() - started) * 1000:.1f} ms"
    )
    await reconciler.reconcile_pending()

    lines = gpu_events(Random(2))
    writes_before = kube.writes.get("status", 0)
    one_by_one = await apply_lines(reconciler, kube, lines, batch=1)
    changed = kube.writes.get("status", 0) - writes_before
    coalesced = await apply_lines(reconciler, kube, lines, batch=200)
    print(
        f"pod event -> recomputed, written status, {len(lines)} GPU pod events, "
        f"{changed} of them changed a class figure (status writes with a pass per event):"
    )
    print(
        f"  one worker pass per event: {one_by_one / len(lines) * 1000:.3f} ms per event   (goal <= 1 ms amortized)"
    )
    print(f"  coalesced (a pass per 200 events): {coalesced / len(lines) * 1000:.3f} ms per event")

    before = kube.writes.get("status", 0)
    unrelated = unrelated_events(Random(3))
    spent = await apply_lines(reconciler, kube, unrelated, batch=1)
    after = kube.writes.get("status", 0)
    print(
        f"replay of {len(unrelated)} unrelated pod events: {after - before} status writes   (goal 0); "
        f"{spent / len(unrelated) * 1000:.3f} ms per event with a pass each"
    )
    _, peak_mb = rss_mb()
    print(f"peak RSS at the end: {peak_mb:.0f} MB")


if __name__ == "__main__":
    asyncio.run(main())
