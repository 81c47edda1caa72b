"""The worker: coalesce dirty marks, recompute, and write only what changed.

Events only mark work dirty (:class:`reconciler.state.records.Dirty`); the worker
wakes, waits a short coalescing window (so a burst of pod events costs one
recompute per class), takes the whole dirty set and, per item:

- status: computed by `shared.core.status.availability.compute_status` over the live counters
  (:mod:`reconciler.state.decisions`), compared whole with the stored status, written as a merge
  patch pinned to the stored resourceVersion (:mod:`reconciler.classwrites`);
- finalizer: `reconciler.state.inuse.finalizer_change`, patched the same way;
- license copies: planned by :func:`reconciler.state.decisions.copy_actions`, written by
  :mod:`reconciler.copies`.

The writers send one write each and return what happened (:mod:`reconciler.outcomes`); the
worker alone gates a write before asking for it and applies its outcome (backoff, what the
store must show before the object is touched again, a requeue), as a controller-runtime
controller does with its reconcile handler's result.

Nothing is written before every resource has completed its first list (the marks
wait). A deletion — a finalizer removal, a license-copy delete — also needs the
resources it depends on synced now and at least as recent as the object it
releases (:meth:`shared.kube.syncview.SyncView.behind`); otherwise it waits. A busy
watch is given `catch_up_seconds` to bring it that far; a quiet one, or one still behind
then, has its resource re-listed (at most every `relist_interval` seconds).

Every write first asks the Lease (`is_leader`), so a replica that lost it stops at
once, and the per-object backoff, so a refused write is not retried in a storm.

The reflector is the store's only writer; a write's response never goes into it, so a
late response cannot roll it back. Read-your-writes comes from resourceVersions
instead (:mod:`reconciler.state.expect`), as controller-runtime's controllers wait for
their informer: after a write the object is left alone until the store has reached the
version the write returned, and after a 409 until the store has moved past the version
the write was pinned to (a conflict is not retried at once, nor read again with a GET:
the watch brings the newer object and marks it again). A store that has not caught up
after `relist_interval` seconds (a watch that is stuck) has its resource re-listed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from gpuclass.reconciler.api.port import ApiError
from gpuclass.reconciler.backoff import KeyedBackoff
from gpuclass.reconciler.classwrites import ClassWriter
from gpuclass.reconciler.copies import RECORD_GATE, CopyWriter, secret_gate
from gpuclass.reconciler.leader import Leadership
from gpuclass.reconciler.outcomes import Conflicted, Failed, Gone, Outcome, WriterDeps, Written
from gpuclass.reconciler.settings import WorkerSettings
from gpuclass.reconciler.state import decisions
from gpuclass.reconciler.state.decisions import StatusContext
from gpuclass.reconciler.state.expect import Expectation, Expectations
from gpuclass.reconciler.state.inuse import finalizer_change
from gpuclass.reconciler.state.resources import Resource
from gpuclass.reconciler.state.statusdiff import status_patch
from gpuclass.reconciler.state.store import ClusterStore
from gpuclass.shared.core.base.meta import Key
from gpuclass.shared.kube.backoff import exponential
from gpuclass.shared.kube.syncview import SyncView

log = logging.getLogger("gpuclass.reconciler.worker")

FINALIZER_DEPENDS_ON: tuple[Resource, ...] = ("vmis",)
COPY_DELETE_DEPENDS_ON: tuple[Resource, ...] = ("vmis", "pods", "namespaces")
STATUS_RESULTS = {Conflicted: "deferred", Gone: "error", Failed: "error"}
"""The `reconcile` metric's result for a status write's outcome (Written: written or dry-run)."""


@dataclass(frozen=True, slots=True)
class WorkerDeps:
    """What the worker works with: the store it reads, the writers' dependencies, the Lease, the
    resources' sync state, and the manager's hooks (`request_relist`, `on_pass`)."""

    store: ClusterStore
    writers: WriterDeps
    leadership: Leadership
    sync: SyncView[Resource]
    request_relist: Callable[[Resource], None]
    now: Callable[[], str]
    backoff: KeyedBackoff = field(default_factory=KeyedBackoff)
    on_pass: Callable[[], None] = lambda: None


class Worker:
    """The reconciler's only writer of classes and copies: it works off the store's dirty marks in
    coalesced passes, asks its writers for each write it allows and applies their outcomes.

    Every write asks the Lease and the per-object backoff; nothing is written before every
    resource's first list, and a deletion waits for a recent enough store (`sync`, with
    `request_relist` to ask for a newer one). An object written (or refused with a 409) waits
    until the store shows that write or a newer version (`expectations`), re-listing its resource
    after `relist_interval` seconds.
    """

    def __init__(self, deps: WorkerDeps, settings: WorkerSettings) -> None:
        self.deps, self.settings = deps, settings
        self.store, self.sync, self.backoff = deps.store, deps.sync, deps.backoff
        self.metrics = deps.writers.metrics
        self.relist_interval = settings.relist_interval
        self.classes = ClassWriter(deps.writers)
        self.copies = CopyWriter(deps.writers, record_namespace=settings.record_namespace)
        self._wake = asyncio.Event()
        self._timers: dict[Hashable, asyncio.TimerHandle] = {}
        self._waiting: list[Callable[[], None]] = []
        self._relist_asked: dict[Resource, float] = {}
        self._behind_since: dict[Resource, float] = {}
        """Since when (monotonic seconds) a synced view has kept a deletion waiting."""
        self.expectations = Expectations()
        """What the store must show of the objects written, before they are acted on again."""
        self._store_waits: dict[Hashable, tuple[Resource, Key, Callable[[], None]]] = {}
        """Deferred work (by gate) waiting for the store to show an object: resource, key, retry."""

    def wake(self) -> None:
        """Something was marked dirty: run a pass after the coalescing window (called per event, so
        it only sets a flag and the queue-depth gauge)."""
        self.metrics.queue_depth.set(len(self.store.dirty))
        self._wake.set()

    async def run(self) -> None:
        """The worker loop, until cancelled: wait for a wake, let a burst of events settle for
        `coalesce_seconds`, reconcile. A pass that raises is logged and retried after a growing
        pause with everything marked, so a bug cannot end the loop."""
        failures = 0
        while True:
            await self._wake.wait()
            await asyncio.sleep(self.settings.coalesce_seconds)
            self._wake.clear()
            try:
                await self.reconcile_once()
                failures = 0
            except Exception:  # a bug must not end the loop: log it, wait, look at everything again
                failures += 1
                log.exception("reconcile pass failed", extra={"fields": {"failures": failures}})
                await asyncio.sleep(exponential(failures, base=0.5, cap=60.0))
                self.store.mark_all()
                self.wake()

    def sync_changed(self) -> None:
        """A resource listed or moved on: deletions that waited for it are looked at again."""
        if self._waiting:
            waiting, self._waiting = self._waiting, []
            for retry in waiting:
                retry()
            self.wake()

    def store_complete(self) -> bool:
        """Every resource has completed its first list: before that, a pass writes nothing and the
        marks wait."""
        return self.sync.all_listed()

    async def reconcile_once(self) -> None:
        """One pass over everything dirty now (none before every resource's first list)."""
        if not self.store_complete():
            return  # the marks stay; the last first list wakes the worker
        self.store_arrived()
        dirty = self.store.take_dirty()
        self.metrics.queue_depth.set(0)
        started = time.perf_counter()
        if dirty.statuses:
            context, now = decisions.status_context(self.store), self.deps.now()
            for name in sorted(dirty.statuses):
                await self._status(name, context, now=now)
        for name in sorted(dirty.finalizers):
            await self._finalizer(name)
        if dirty.copies:
            await self._copies(verify=dirty.verify_copies)
        usage = self.store.vmi_usage
        if usage.changed:
            usage.changed = False
            self.metrics.set_usage(usage.units, usage.waiting)
        self.metrics.duration.observe(time.perf_counter() - started)
        self.deps.on_pass()

    # -- gates: may this write be asked for now? -----------------------------------------------------

    def _may_write(self, gate: Hashable, retry: Callable[[], None]) -> bool:
        """Leader now, and the object is not backing off (if it is, come back when it may)."""
        if not self.deps.leadership.is_leader():
            return False  # regaining the Lease marks everything dirty again
        wait = self.backoff.remaining(gate)
        if wait > 0:
            self._retry_later(gate, wait, retry=retry)
            return False
        return True

    def _may_delete(
        self, resources: tuple[Resource, ...], version: str, *, retry: Callable[[], None]
    ) -> bool:
        """The store of `resources` is synced and has reached `version`; else wait for it."""
        behind = self.sync.behind(resources, version)
        for resource in resources:
            if resource not in behind:
                self._behind_since.pop(resource, None)
        if not behind:
            return True
        self._waiting.append(retry)
        now, grace = time.monotonic(), self.settings.catch_up_seconds
        for resource in behind:
            if not self.sync.synced(resource):
                continue  # a list is running: its end wakes us
            since = self._behind_since.setdefault(resource, now)
            if now - since < grace and self.sync.moving(resource, within=grace):
                # A busy watch gets there on its own (its next event wakes us through
                # `sync_changed`); a quiet one, or one still behind after `grace`, is re-listed.
                self._retry_later(("catch-up", resource), since + grace - now, retry=retry)
                continue
            wait = self._relist(
                resource, version, message="deletion waits for a newer store; re-listing"
            )
            if wait:
                self._retry_later(("relist", resource), wait, retry=retry)
            else:
                self._behind_since.pop(resource, None)
        return False

    def _store_caught_up(
        self, gate: Hashable, resource: Resource, *, key: Key, retry: Callable[[], None]
    ) -> bool:
        """The store shows the object's last write (or a version past the one its 409 was pinned
        to); else `gate`'s work waits, and `retry` marks it again when the store catches up."""
        expectation = self._unmet(resource, key)
        if expectation is None:
            self._store_waits.pop(gate, None)
            return True
        self._store_waits[gate] = (resource, key, retry)
        self._chase(resource, expectation.since, version=expectation.version)
        return False

    # -- outcomes: what the worker does with a writer's answer ------------------------------------

    async def _apply(self, outcome: Outcome, retry: Callable[[], None]) -> None:
        """Turn one write's outcome into backoff, an expectation and a requeue (`retry`)."""
        if isinstance(outcome, Written):
            self.backoff.success(outcome.gate)
            if outcome.watched is not None:  # the store must reach the version the write returned
                resource, key = outcome.watched.resource, outcome.watched.key
                lists = self.sync.state[resource].lists
                self.expectations.written(
                    resource, key, version=outcome.version, now=time.monotonic(), lists=lists
                )
        elif isinstance(outcome, Conflicted):  # the store must move past the version pinned to
            resource, key = outcome.watched.resource, outcome.watched.key
            lists = self.sync.state[resource].lists
            self.expectations.conflicted(
                resource, key, stale=outcome.stale, now=time.monotonic(), lists=lists
            )
            self._store_caught_up(outcome.gate, resource, key=key, retry=retry)
        elif isinstance(outcome, Failed):
            count = self._failed(outcome.gate, retry, exc=outcome.error)
            if count == 1 and (report := outcome.report) is not None:
                events, why = self.deps.writers.events, report.reason
                await events.emit(
                    report.class_name, reason=why, type_=report.type_, message=report.message
                )

    def _failed(self, gate: Hashable, retry: Callable[[], None], *, exc: ApiError) -> int:
        count, delay = self.backoff.failure(gate)
        fields = {"object": str(gate), "error": str(exc), "failures": count, "retry_in": delay}
        log.warning("write failed; backing off", extra={"fields": fields})
        self._retry_later(gate, delay, retry=retry)
        return count

    # -- requeues -----------------------------------------------------------------------------------

    def _relist(self, resource: Resource, version: str, *, message: str) -> float:
        """Ask for a re-list of `resource` unless one was asked for less than `relist_interval`
        seconds ago; returns 0 when asked now, else the seconds until it may be asked again."""
        now = time.monotonic()
        asked = self._relist_asked.get(resource)
        if asked is not None and now - asked < self.relist_interval:
            return self.relist_interval - (now - asked)
        self._relist_asked[resource] = now
        log.info(message, extra={"fields": {"resource": resource, "version": version}})
        self.deps.request_relist(resource)
        return 0.0

    def _retry_later(self, key: Hashable, delay: float, *, retry: Callable[[], None]) -> None:
        if key in self._timers:
            return

        def fire() -> None:
            self._timers.pop(key, None)
            retry()
            self.wake()

        self._timers[key] = asyncio.get_running_loop().call_later(delay, fire)

    def store_arrived(self) -> None:
        """Mark again the work that waited for the store and whose object the store now shows (an
        event that brings a class marks it anyway; the copy record's may not). Every pass starts
        with it; for work still waiting, the re-list deadline is checked."""
        for gate, (resource, key, retry) in list(self._store_waits.items()):
            expectation = self._unmet(resource, key)
            if expectation is None:
                del self._store_waits[gate]
                retry()
            else:
                self._chase(resource, expectation.since, version=expectation.version)

    def _chase(self, resource: Resource, since: float, *, version: str) -> None:
        """A store still behind a write made at `since` (monotonic seconds): re-list its resource
        once `relist_interval` has passed (the watch may be stuck); until then, look again then."""
        due = since + self.relist_interval - time.monotonic()
        if due <= 0 and self.sync.synced(resource):  # while a list runs, its end wakes us
            due = self._relist(resource, version, message="the store is behind a write; re-listing")
        if due > 0:
            self._retry_later(("store", resource), due, retry=lambda: None)

    def resources_behind(self) -> set[Resource]:
        """The resources whose store deferred work still waits for (`--once`, which has no watch,
        lists them again)."""
        return {s for s, key, _ in self._store_waits.values() if self._unmet(s, key) is not None}

    def _unmet(self, resource: Resource, key: Key) -> Expectation | None:
        held = self.store.held_version(resource, key)
        return self.expectations.unmet(resource, key, held=held, sync=self.sync.state[resource])

    # -- the three kinds of work ------------------------------------------------------------------

    def _may_write_class(self, gate: Hashable, name: str, *, retry: Callable[[], None]) -> bool:
        """The store shows the class as our last write left it, and `_may_write`."""
        caught_up = self._store_caught_up(gate, "gpuclasses", key=("", name), retry=retry)
        return caught_up and self._may_write(gate, retry)

    def _result(self, result: str) -> None:
        self.metrics.reconcile.labels(result).inc()

    async def _status(self, name: str, context: StatusContext, *, now: str) -> None:
        entry = self.store.classes.get(name)
        if entry is None:
            self.metrics.forget_class(name)
            self.expectations.drop("gpuclasses", ("", name))
            return
        status = decisions.class_status(self.store, name, context=context, now=now)
        figures = decisions.class_figures(self.store, name, context=context)
        self.metrics.set_class(name, status, figures=figures)
        patch = status_patch(entry.raw_status, status)
        if patch is None:
            self._result("unchanged")
            return
        gate = ("status", name)

        def retry() -> None:
            self.store.dirty.statuses.add(name)

        if not self._may_write_class(gate, name, retry=retry):
            self._result("deferred")
            return
        outcome = await self.classes.write_status(entry, status=status, patch=patch)
        await self._apply(outcome, retry)
        if not isinstance(outcome, Written):
            self._result(STATUS_RESULTS[type(outcome)])
            return
        self._result("dry-run" if self.settings.dry_run else "written")
        await self.classes.announce(entry, status=status)

    async def _finalizer(self, name: str) -> None:
        entry = self.store.classes.get(name)
        if entry is None:
            return
        change = finalizer_change(entry.record, in_use=decisions.in_use(self.store, name))
        if change is None:
            return
        gate = ("finalizer", name)

        def retry() -> None:
            self.store.dirty.finalizers.add(name)

        if not self._may_write_class(gate, name, retry=retry):
            return
        if change.action == "remove" and not self._may_delete(
            FINALIZER_DEPENDS_ON, entry.hold_version, retry=retry
        ):
            return
        await self._apply(await self.classes.write_finalizers(entry, change), retry)

    async def _copies(self, *, verify: bool) -> None:
        """One license-copy pass: plan on the record the store holds once it shows our last write,
        keep the writes allowed now, and apply each outcome as the copy writer yields it."""

        def retry() -> None:
            self.store.dirty.copies = True

        def retry_verify() -> None:
            self.store.dirty.copies = self.store.dirty.verify_copies = True

        again = retry_verify if verify else retry
        if not self._store_caught_up(
            RECORD_GATE, "copy-record", key=self.copies.record_key, retry=again
        ):
            return  # the store's record is older than our last write of it: plan on the newer one
        record = self.store.copy_record
        planned = decisions.copy_actions(
            self.store, vgpu_entitled=self.settings.vgpu_entitled, verify=verify
        )
        actions = [
            a
            for a in planned
            if self._may_write(secret_gate(a), retry)
            and (
                a.action != "delete"
                or self._may_delete(COPY_DELETE_DEPENDS_ON, record.resource_version, retry=retry)
            )
        ]
        if not actions or not self._may_write(RECORD_GATE, retry):
            return
        async for outcome in self.copies.write(actions, record):
            await self._apply(outcome, retry)
