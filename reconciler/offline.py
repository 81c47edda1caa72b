"""The offline twin (docs/contract.md section 7): the same loop, run against files instead of a cluster.

With `--objects`, the files are loaded into a :class:`~reconciler.api.fake.MemoryKube`
— an API server in a dict — and the ordinary :class:`~reconciler.manager.Manager`
runs against it: the same informers, store, worker and writes. Nothing ever contacts
a cluster. `--once` prints what the reconciler wrote into that in-memory cluster
(what it *would* write to a real one); without `--once` the loop keeps serving
`/metrics`, `/healthz` and `/readyz`, and the files are re-read when they change.

The `--once` report (also used for `--once` against a cluster) is
`{"items": [{"name", "status"}], "statusWrites", "licenseCopies", "finalizers", "events"}`
(and `licenceCopies`, the same list under its deprecated key, for one release);
license copies show their keys, `gridd.conf` and a fingerprint of the token, never the token.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from gpuclass.reconciler.api.dryrun import RecordingKube
from gpuclass.reconciler.api.fake import MemoryKube
from gpuclass.reconciler.leader import AlwaysLeader
from gpuclass.reconciler.manager import Manager
from gpuclass.reconciler.settings import ReconcilerSettings
from gpuclass.reconciler.state.decisions import class_status, status_context
from gpuclass.shared.files.filesource import Stamp, stamp_of
from gpuclass.shared.files.loader import LoadError, iter_stored_objects
from gpuclass.shared.kube.backoff import exponential

log = logging.getLogger("gpuclass.reconciler.offline")


def load_objects(settings: ReconcilerSettings) -> list[dict[str, Any]]:
    """Every object in the files, as an API server would hold it (one rule: the loader's).

    Whatever a file holds, the error names the file and nothing crashes: any failure
    comes out as a LoadError.
    """
    try:
        return list(
            iter_stored_objects(settings.objects, kubevirt_namespace=settings.kubevirt_namespace)
        )
    except LoadError:
        raise
    except Exception as exc:  # a reload or --once must end in one line, never a traceback
        raise LoadError(f"objects cannot be read: {type(exc).__name__}: {exc}") from exc


def memory_cluster(settings: ReconcilerSettings) -> MemoryKube:
    """The files as an in-memory API server, scoped and paged as the settings say, so the informers
    list and watch it as they would a cluster."""
    return MemoryKube(
        load_objects(settings), scope=settings.scope(), page_size=settings.list_page_size
    )


def once_report(reconciler: Manager, recorder: RecordingKube) -> dict[str, Any]:
    """The `--once` report: each class's computed status, and what the pass wrote (status writes by
    class, license copies with their content fingerprinted, finalizer patches, Events), taken
    from the recorder."""
    store = reconciler.store
    context = status_context(store)
    now = reconciler.now()
    writes = recorder.writes

    def of(kind: str) -> list[dict[str, Any]]:
        return [{k: v for k, v in w.items() if k != "kind"} for w in writes if w["kind"] == kind]

    copies = of("licence-copy")  # the write recorder's kind, as the metrics label it
    return {
        "items": [
            {"name": n, "status": class_status(store, n, context=context, now=now)}
            for n in sorted(store.classes)
        ],
        "statusWrites": sorted({w["name"] for w in writes if w["kind"] == "status"}),
        "licenseCopies": copies,
        "licenceCopies": copies,  # deprecated: the same list under the old key, for one release
        "finalizers": of("finalizers"),
        "events": of("event"),
    }


async def run_once(settings: ReconcilerSettings) -> dict[str, Any]:
    """One full pass; returns the report. With `--objects`, against the files only."""
    if settings.objects:
        recorder = RecordingKube(memory_cluster(settings), forward=True)
        reconciler = Manager(settings, api=recorder, leadership=AlwaysLeader(), serve_http=False)
    else:
        from gpuclass.reconciler.api.client import KubeAdapter

        recorder = RecordingKube(await KubeAdapter.connect(settings), forward=not settings.dry_run)
        leadership = AlwaysLeader() if settings.dry_run or not settings.leader_elect else None
        reconciler = Manager(settings, api=recorder, leadership=leadership, serve_http=False)
    try:
        await reconciler.sync_once()
        return once_report(reconciler, recorder)
    finally:
        await recorder.close()


def file_reconciler(
    settings: ReconcilerSettings,
) -> tuple[Manager, Callable[[], Coroutine[Any, Any, None]]]:
    """A reconciler over the files, and the coroutine that re-reads them when they change.

    The coroutine never ends on bad files: whatever a reload raises (a node with
    `taints: 5`, an object nested 900 deep, a file removed mid-read) is logged once
    per distinct error with the file name, the last good objects stay served,
    `/readyz` says the state is stale, and the next good reload recovers. While
    reloads fail the poll backs off (up to 30 s); a success resets it.
    """
    cluster = memory_cluster(settings)
    reconciler = Manager(settings, api=cluster, leadership=AlwaysLeader())
    last: Stamp | None = stamp_of(settings.objects)

    async def reload() -> None:
        nonlocal last
        failures = 0
        while True:
            await asyncio.sleep(exponential(failures, base=settings.objects_poll_seconds, cap=30.0))
            try:
                stamp = stamp_of(settings.objects)
                if stamp == last:
                    continue
                last = stamp
                cluster.load(load_objects(settings))
            except Exception as exc:  # the loop outlives any file
                failures = min(failures + 1, 16)
                message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                if message != reconciler.stale_reason:
                    log.warning(
                        "objects not reloaded; keeping the last good state",
                        extra={"fields": {"error": message}},
                    )
                reconciler.stale_reason = message
                continue
            failures = 0
            reconciler.stale_reason = None
            log.info(
                "objects reloaded", extra={"fields": {"paths": [str(p) for p in settings.objects]}}
            )

    return reconciler, reload
