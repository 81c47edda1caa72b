"""The offline twin (docs/contract.md section 7): the same loop, run against files instead of a cluster.

With `--objects`, the files are loaded into a :class:`~reconciler.memory.MemoryKube`
— an API server in a dict — and the ordinary :class:`~reconciler.loop.Reconciler`
runs against it: the same streams, state, worker and writes. Nothing ever contacts
a cluster. `--once` prints what the reconciler wrote into that in-memory cluster
(what it *would* write to a real one); without `--once` the loop keeps serving
`/metrics`, `/healthz` and `/readyz`, and the files are re-read when they change.

The `--once` report (also used for `--once` against a cluster) is
`{"items": [{"name", "status"}], "statusWrites", "licenceCopies", "finalizers", "events"}`;
licence copies show their keys, `gridd.conf` and a fingerprint of the token, never the token.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from gpuclass.reconciler.leader import AlwaysLeader
from gpuclass.reconciler.loop import Reconciler
from gpuclass.reconciler.memory import MemoryKube
from gpuclass.reconciler.recording import RecordingKube
from gpuclass.reconciler.settings import ReconcilerSettings
from gpuclass.shared.runtime.filesource import FileSource
from gpuclass.shared.runtime.loader import LoadError, iter_named_objects

log = logging.getLogger("gpuclass.reconciler.offline")

_NAMESPACED_DEFAULT = {"Pod", "Secret", "VirtualMachineInstance"}


def load_objects(settings: ReconcilerSettings) -> list[dict[str, Any]]:
    """Every object in the files, as an API server would hold it.

    A KubeVirt CR written without a namespace counts as the one in
    `--kubevirt-namespace`; other namespaced objects without one land in
    `default` (as `kubectl apply` would put them); a nameless object gets a
    generated name, so that it is still counted.
    """
    objects: list[dict[str, Any]] = []
    for index, (_, raw) in enumerate(iter_named_objects(settings.objects)):
        obj = dict(raw)
        meta = dict(obj.get("metadata") or {}) if isinstance(obj.get("metadata"), dict) else {}
        kind = obj.get("kind")
        if not meta.get("namespace"):
            if kind == "KubeVirt":
                meta["namespace"] = settings.kubevirt_namespace
            elif kind in _NAMESPACED_DEFAULT:
                meta["namespace"] = "default"
        if not isinstance(meta.get("name"), str) or not meta["name"]:
            meta["name"] = f"unnamed-{index}"
        obj["metadata"] = meta
        objects.append(obj)
    return objects


def memory_cluster(settings: ReconcilerSettings) -> MemoryKube:
    return MemoryKube(
        load_objects(settings),
        licence_namespace=settings.licence_namespace,
        kubevirt_namespace=settings.kubevirt_namespace,
        page_size=settings.list_page_size,
    )


def once_report(reconciler: Reconciler, recorder: RecordingKube) -> dict[str, Any]:
    state = reconciler.state
    context = state.status_context()
    now = reconciler.now()
    writes = recorder.writes

    def of(kind: str) -> list[dict[str, Any]]:
        return [{k: v for k, v in w.items() if k != "kind"} for w in writes if w["kind"] == kind]

    return {
        "items": [
            {"name": n, "status": state.compute_status(n, context, now=now)}
            for n in sorted(state.classes)
        ],
        "statusWrites": sorted({w["name"] for w in writes if w["kind"] == "status"}),
        "licenceCopies": of("licence-copy"),
        "finalizers": of("finalizers"),
        "events": of("event"),
    }


async def run_once(settings: ReconcilerSettings) -> dict[str, Any]:
    """One full pass; returns the report. With `--objects`, against the files only."""
    if settings.objects:
        recorder = RecordingKube(memory_cluster(settings), forward=True)
        reconciler = Reconciler(settings, api=recorder, leadership=AlwaysLeader(), serve_http=False)
    else:
        from gpuclass.reconciler.kube import KubeAdapter

        recorder = RecordingKube(await KubeAdapter.connect(settings), forward=not settings.dry_run)
        leadership = AlwaysLeader() if settings.dry_run or not settings.leader_elect else None
        reconciler = Reconciler(settings, api=recorder, leadership=leadership, serve_http=False)
    try:
        await reconciler.sync_once()
        return once_report(reconciler, recorder)
    finally:
        await recorder.close()


def file_reconciler(
    settings: ReconcilerSettings,
) -> tuple[Reconciler, Callable[[], Coroutine[Any, Any, None]]]:
    """A reconciler over the files, and the coroutine that re-reads them when they change."""
    files = FileSource(settings.objects)
    files.refresh()
    cluster = memory_cluster(settings)
    reconciler = Reconciler(settings, api=cluster, leadership=AlwaysLeader())

    async def reload() -> None:
        while True:
            await asyncio.sleep(settings.objects_poll_seconds)
            if not files.refresh():
                continue
            try:
                cluster.load(load_objects(settings))
            except (LoadError, OSError) as exc:
                log.warning("objects not reloaded", extra={"fields": {"error": str(exc)}})
                continue
            log.info(
                "objects reloaded", extra={"fields": {"paths": [str(p) for p in settings.objects]}}
            )

    return reconciler, reload
