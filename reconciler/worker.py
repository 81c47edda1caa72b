"""The worker: coalesce dirty marks, recompute, and write only what changed.

Events only mark work dirty (:class:`reconciler.state.cache.Dirty`); the worker
wakes, waits a short coalescing window (so a burst of pod events costs one
recompute per class), takes the whole dirty set and, per item:

- status: computed by `shared.core.status.availability.compute_status` over the live counters,
  compared whole with the stored status, written as a merge patch pinned to the
  stored resourceVersion;
- finalizer: `reconciler.state.inuse.finalizer_change`, patched the same way;
- licence copies: see :mod:`reconciler.copies`.

Nothing is written before every source has completed its first list (the marks
wait). A deletion — a finalizer removal, a licence-copy delete — also needs the
sources it depends on synced now and at least as recent as the object it
releases (:meth:`shared.core.base.syncview.SyncView.behind`); otherwise it waits, and a
source whose watch has not brought it that far is re-listed (at most every
`relist_interval` seconds).

Every write first asks the Lease (`is_leader`), so a replica that lost it stops at
once, and the per-object backoff, so a refused write is not retried in a storm.

The reflector is the view's only writer; a write's response never goes into it, so a
late response cannot roll it back. Read-your-writes comes from resourceVersions
instead (:mod:`reconciler.state.expect`), as controller-runtime's controllers wait for
their informer: after a write the object is left alone until the view has reached the
version the write returned, and after a 409 until the view has moved past the version
the write was pinned to (a conflict is not retried at once, nor read again with a GET:
the watch brings the newer object and marks it again). A view that has not caught up
after `relist_interval` seconds (a watch that is stuck) has its source re-listed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Hashable
from typing import Any

from gpuclass.reconciler.api.port import ApiError, KubeAPI
from gpuclass.reconciler.backoff import KeyedBackoff
from gpuclass.reconciler.copies import CopyWriter
from gpuclass.reconciler.events import EventRecorder
from gpuclass.reconciler.leader import Leadership
from gpuclass.reconciler.metrics import ReconcilerMetrics
from gpuclass.reconciler.state.cache import ClusterCache, StatusContext
from gpuclass.reconciler.state.expect import Expectation, Expectations
from gpuclass.reconciler.state.inuse import finalizer_change
from gpuclass.reconciler.state.sources import Source
from gpuclass.reconciler.state.statusdiff import status_patch, transitions
from gpuclass.shared.core.base.meta import Key, object_key, resource_version
from gpuclass.shared.core.base.syncview import SyncView
from gpuclass.shared.kube.backoff import exponential

log = logging.getLogger("gpuclass.reconciler.worker")

FINALIZER_DEPENDS_ON: tuple[Source, ...] = ("vmis",)
COPY_DELETE_DEPENDS_ON: tuple[Source, ...] = ("vmis", "pods", "namespaces")


class Worker:
    """The reconciler's only writer of classes and copies: it works off the cache's dirty marks in
    coalesced passes, writing statuses and in-use finalizers itself and licence copies through
    its :class:`CopyWriter`.

    Every write asks `leadership` and the per-object `backoff`; nothing is written before every
    source's first list, and a deletion waits for a recent enough view (`sync`, required, with
    `request_relist` to ask for a newer one). An object written (or refused with a 409) waits
    until the view shows that write or a newer version (`expectations`), re-listing its source
    after `relist_interval` seconds. `dry_run` means `api` records instead of sending, so
    nothing is logged or counted as written, and nothing is waited for.
    """

    def __init__(
        self,
        api: KubeAPI,
        state: ClusterCache,
        leadership: Leadership,
        metrics: ReconcilerMetrics,
        *,
        events: EventRecorder,
        vgpu_entitled: bool,
        record_namespace: str,
        now: Callable[[], str],
        sync: SyncView[Source],
        request_relist: Callable[[Source], None],
        coalesce_seconds: float = 0.2,
        backoff: KeyedBackoff | None = None,
        on_pass: Callable[[], None] = lambda: None,
        relist_interval: float = 10.0,
        dry_run: bool = False,
    ) -> None:
        self.api, self.state, self.leadership, self.metrics = api, state, leadership, metrics
        self.events, self.now, self.coalesce_seconds, self.on_pass = (
            events,
            now,
            coalesce_seconds,
            on_pass,
        )
        self.backoff = backoff or KeyedBackoff()
        self.sync, self.request_relist, self.relist_interval = sync, request_relist, relist_interval
        self.dry_run = dry_run
        """Writes go to a recorder that sends nothing: never log or count them as written."""
        self.copies = CopyWriter(
            api,
            state,
            events,
            vgpu_entitled=vgpu_entitled,
            record_namespace=record_namespace,
            may_write=self._may_write,
            may_delete=self._may_delete,
            view_caught_up=self._view_caught_up,
            wrote=self._wrote,
            conflicted=self._conflicted,
            delete_depends_on=COPY_DELETE_DEPENDS_ON,
            failed=self._failed,
            metrics=metrics,
            dry_run=dry_run,
        )
        self._wake = asyncio.Event()
        self._timers: dict[Hashable, asyncio.TimerHandle] = {}
        self._waiting: list[Callable[[], None]] = []
        self._relist_asked: dict[Source, float] = {}
        self.expectations = Expectations()
        """What the view must show of the objects written, before they are acted on again."""
        self._view_waits: dict[Hashable, tuple[Source, Key, Callable[[], None]]] = {}
        """Deferred work (by write key) waiting for the view to show an object: source, key, retry."""

    def wake(self) -> None:
        """Something was marked dirty: run a pass after the coalescing window (called per event, so
        it only sets a flag and the queue-depth gauge)."""
        self.metrics.queue_depth.set(len(self.state.dirty))
        self._wake.set()

    async def run(self) -> None:
        """The worker loop, until cancelled: wait for a wake, let a burst of events settle for
        `coalesce_seconds`, reconcile. A pass that raises is logged and retried after a growing
        pause with everything marked, so a bug cannot end the loop."""
        failures = 0
        while True:
            await self._wake.wait()
            await asyncio.sleep(self.coalesce_seconds)
            self._wake.clear()
            try:
                await self.reconcile_once()
                failures = 0
            except Exception:  # a bug must not end the loop: log it, wait, look at everything again
                failures += 1
                log.exception("reconcile pass failed", extra={"fields": {"failures": failures}})
                await asyncio.sleep(exponential(failures, base=0.5, cap=60.0))
                self.state.mark_all()
                self.wake()

    def sync_changed(self) -> None:
        """A source listed or moved on: deletions that waited for it are looked at again."""
        if self._waiting:
            waiting, self._waiting = self._waiting, []
            for retry in waiting:
                retry()
            self.wake()

    def view_complete(self) -> bool:
        """Every source has completed its first list: before that, a pass writes nothing and the
        marks wait."""
        return self.sync.all_listed()

    async def reconcile_once(self) -> None:
        """One pass over everything dirty now (none before every source's first list)."""
        if not self.view_complete():
            return  # the marks stay; the last first list wakes the worker
        self.view_arrived()
        dirty = self.state.take_dirty()
        self.metrics.queue_depth.set(0)
        started = time.perf_counter()
        if dirty.statuses:
            context, now = self.state.status_context(), self.now()
            for name in sorted(dirty.statuses):
                await self._status(name, context, now)
        for name in sorted(dirty.finalizers):
            await self._finalizer(name)
        if dirty.copies:
            await self.copies.reconcile(verify=dirty.verify_copies)
        usage = self.state.vmi_usage
        if usage.changed:
            usage.changed = False
            self.metrics.set_usage(usage.units, usage.waiting)
        self.metrics.duration.observe(time.perf_counter() - started)
        self.on_pass()

    # -- write gating -------------------------------------------------------------------------------

    def _may_write(self, key: Hashable, retry: Callable[[], None]) -> bool:
        """Leader now, and the object is not backing off (if it is, come back when it may)."""
        if not self.leadership.is_leader():
            return False  # regaining the Lease marks everything dirty again
        wait = self.backoff.remaining(key)
        if wait > 0:
            self._retry_later(key, wait, retry)
            return False
        return True

    def _may_delete(
        self, sources: tuple[Source, ...], version: str, retry: Callable[[], None]
    ) -> bool:
        """The view of `sources` is synced and has reached `version`; else wait for it."""
        behind = self.sync.behind(sources, version)
        if not behind:
            return True
        self._waiting.append(retry)
        for source in behind:
            if not self.sync.synced(source):
                continue  # a list is running: its end wakes us
            wait = self._relist(source, version, "deletion waits for a newer view; re-listing")
            if wait:
                self._retry_later(("relist", source), wait, retry)
        return False

    def _relist(self, source: Source, version: str, message: str) -> float:
        """Ask for a re-list of `source` unless one was asked for less than `relist_interval`
        seconds ago; returns 0 when asked now, else the seconds until it may be asked again."""
        now = time.monotonic()
        asked = self._relist_asked.get(source)
        if asked is not None and now - asked < self.relist_interval:
            return self.relist_interval - (now - asked)
        self._relist_asked[source] = now
        log.info(message, extra={"fields": {"resource": source, "version": version}})
        self.request_relist(source)
        return 0.0

    def _failed(self, key: Hashable, retry: Callable[[], None], exc: ApiError) -> int:
        count, delay = self.backoff.failure(key)
        log.warning(
            "write failed; backing off",
            extra={
                "fields": {
                    "object": str(key),
                    "error": str(exc),
                    "failures": count,
                    "retry_in": delay,
                }
            },
        )
        self._retry_later(key, delay, retry)
        return count

    def _retry_later(self, key: Hashable, delay: float, retry: Callable[[], None]) -> None:
        if key in self._timers:
            return

        def fire() -> None:
            self._timers.pop(key, None)
            retry()
            self.wake()

        self._timers[key] = asyncio.get_running_loop().call_later(delay, fire)

    # -- read-your-writes ---------------------------------------------------------------------------

    def _wrote(self, source: Source, written: dict[str, Any] | None) -> None:
        """A write the server took: the object waits until the view reaches the version it returned
        (nothing in a dry run, where no write returns an object)."""
        key = object_key(written) if written is not None else None
        if written is None or key is None:
            return
        lists = self.sync.state[source].lists
        version = resource_version(written)
        self.expectations.written(source, key, version, now=time.monotonic(), lists=lists)

    def _conflicted(self, source: Source, key: Key, stale: str) -> None:
        """A write pinned to `stale` met a 409: the object waits until the view moves past it."""
        lists = self.sync.state[source].lists
        self.expectations.conflicted(source, key, stale, now=time.monotonic(), lists=lists)

    def _view_caught_up(
        self, gate: Hashable, source: Source, key: Key, retry: Callable[[], None]
    ) -> bool:
        """The view shows the object's last write (or a version past the one its 409 was pinned to);
        else `gate`'s work waits, and `retry` marks it again when the view catches up."""
        expectation = self._unmet(source, key)
        if expectation is None:
            self._view_waits.pop(gate, None)
            return True
        self._view_waits[gate] = (source, key, retry)
        self._chase(source, expectation.since, expectation.version)
        return False

    def view_arrived(self) -> None:
        """Mark again the work that waited for the view and whose object the view now shows (an event
        that brings a class marks it anyway; the copy record's may not). Every pass starts with it;
        for work still waiting, the re-list deadline is checked."""
        for gate, (source, key, retry) in list(self._view_waits.items()):
            expectation = self._unmet(source, key)
            if expectation is None:
                del self._view_waits[gate]
                retry()
            else:
                self._chase(source, expectation.since, expectation.version)

    def _chase(self, source: Source, since: float, version: str) -> None:
        """A view still behind a write made at `since` (monotonic seconds): re-list its source once
        `relist_interval` has passed (the watch may be stuck); until then, look again then."""
        due = since + self.relist_interval - time.monotonic()
        if due <= 0 and self.sync.synced(source):  # while a list runs, its end wakes us
            due = self._relist(source, version, "the view is behind a write; re-listing")
        if due > 0:
            self._retry_later(("view", source), due, lambda: None)

    def sources_behind(self) -> set[Source]:
        """The sources whose view deferred work still waits for (`--once`, which has no watch, lists
        them again)."""
        return {s for s, key, _ in self._view_waits.values() if self._unmet(s, key) is not None}

    def _unmet(self, source: Source, key: Key) -> Expectation | None:
        held = self.state.held_version(source, key)
        return self.expectations.unmet(source, key, held=held, view=self.sync.state[source])

    # -- status -------------------------------------------------------------------------------------

    def _result(self, result: str) -> None:
        self.metrics.reconcile.labels(result).inc()

    async def _status(self, name: str, context: StatusContext, now: str) -> None:
        entry = self.state.classes.get(name)
        if entry is None:
            self.metrics.forget_class(name)
            self.expectations.drop("gpuclasses", ("", name))
            return
        status = self.state.compute_status(name, context, now=now)
        self.metrics.set_class(name, status, self.state.figures(name, context))
        patch = status_patch(entry.raw_status, status)
        if patch is None:
            self._result("unchanged")
            return
        key = ("status", name)

        def retry() -> None:
            self.state.dirty.statuses.add(name)

        if not self._view_caught_up(key, "gpuclasses", ("", name), retry) or not self._may_write(
            key, retry
        ):
            self._result("deferred")
            return
        body = {"metadata": {"resourceVersion": entry.resource_version}, "status": patch}
        try:
            written = await self.api.patch_class_status(name, body)
        except ApiError as exc:
            if exc.conflict:  # the view is behind the server: decide again on a newer version
                self._conflicted("gpuclasses", ("", name), entry.resource_version)
                self._view_caught_up(key, "gpuclasses", ("", name), retry)
                self._result("deferred")
                return
            self._result("error")
            if not exc.not_found:
                self._failed(key, retry, exc)
            return
        self.backoff.success(key)
        self._wrote("gpuclasses", written)
        if self.dry_run:
            self._result("dry-run")
        else:
            self._result("written")
            self.metrics.status_writes.inc()
            log.info(
                "status written", extra={"fields": {"class": name, "free": status.get("free")}}
            )
        for change in transitions(entry.raw_status, status):
            await self.events.emit(
                name,
                reason=change.reason,
                type_=change.type,
                message=f"{change.condition} is {change.status}: {change.message}",
            )

    # -- finalizer ----------------------------------------------------------------------------------

    async def _finalizer(self, name: str) -> None:
        entry = self.state.classes.get(name)
        if entry is None:
            return
        change = finalizer_change(entry.record, in_use=self.state.in_use(name))
        if change is None:
            return
        key = ("finalizer", name)

        def retry() -> None:
            self.state.dirty.finalizers.add(name)

        if not self._view_caught_up(key, "gpuclasses", ("", name), retry) or not self._may_write(
            key, retry
        ):
            return
        if change.action == "remove" and not self._may_delete(
            FINALIZER_DEPENDS_ON, entry.hold_version, retry
        ):
            return
        try:
            written = await self.api.patch_class_finalizers(
                name, list(change.finalizers), entry.resource_version
            )
        except ApiError as exc:
            self.metrics.object_writes.labels("finalizer", change.action, "error").inc()
            if exc.conflict:  # stale: decide again when the view shows a newer version
                self._conflicted("gpuclasses", ("", name), entry.resource_version)
                self._view_caught_up(key, "gpuclasses", ("", name), retry)
            elif not exc.not_found:
                self._failed(key, retry, exc)
            return
        self.backoff.success(key)
        self._wrote("gpuclasses", written)
        if not self.dry_run:
            self.metrics.object_writes.labels("finalizer", change.action, "ok").inc()
            log.info(
                "in-use finalizer " + ("added" if change.action == "add" else "removed"),
                extra={"fields": {"class": name}},
            )
