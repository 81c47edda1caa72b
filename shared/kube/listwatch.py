"""The one list/watch loop both binaries use: list, then watch, each resource into a store.

This is client-go's reflector, small: a (re-)list goes into the store page by
page (a 150,000-pod list is never held whole) and `Store.sweep` drops what the
list no longer holds only once the last page is in, so a re-list never looks like
"everything was deleted". A watch the server ends normally (its timeout) resumes
from the last version or bookmark; a 410 Gone re-lists at once; a dropped watch,
a watch that ends at once or any other failure re-lists after an exponential
backoff with jitter, which resets after a healthy watch. The caller may ask for a
re-list of one resource (:meth:`Reflector.request_relist`). Per resource, a
:class:`~shared.kube.syncview.SyncView` records whether what the store holds of it is
complete (listed, not re-listing) and how recent it is. An object the store cannot take
is skipped and logged once, never the end of a resource.

The seam below is :class:`ListerWatcher` (client-go's word; pages and events of raw dicts, errors
as :class:`ApiError`): `shared.kube.kubeclient.RawClient` over HTTP for both
binaries, `reconciler.api.fake.MemoryKube` offline and in tests.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from gpuclass.shared.core.base.meta import Key, object_key, resource_version
from gpuclass.shared.kube.backoff import jittered
from gpuclass.shared.kube.errors import ApiError
from gpuclass.shared.kube.syncview import SyncView

log = logging.getLogger("gpuclass.listwatch")

RawObject = dict[str, Any]
R = TypeVar("R", bound=str)
R_contra = TypeVar("R_contra", bound=str, contravariant=True)


@dataclass(frozen=True, slots=True)
class ListPage:
    """One page of a list; the last page's `resource_version` is where the watch starts."""

    items: list[RawObject]
    resource_version: str = ""
    last: bool = True


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One event of a watch; for a BOOKMARK only the object's resourceVersion counts (where to
    resume)."""

    type: str
    """ADDED, MODIFIED, DELETED or BOOKMARK (errors are raised as ApiError)."""
    object: RawObject = field(default_factory=dict)


class ListerWatcher(Protocol[R_contra]):
    """What a :class:`Reflector` reads from: `shared.kube.kubeclient.RawClient` over HTTP,
    `reconciler.api.fake.MemoryKube` offline and in tests, or a scripted client that ends streams
    and raises 410 on cue."""

    def list_pages(self, resource: R_contra) -> AsyncIterator[ListPage]:
        """Pages of the resource's collection (selectors applied), consistent at one version."""
        ...

    def watch(self, resource: R_contra, resource_version: str) -> AsyncIterator[WatchEvent]:
        """Changes after `resource_version` until the server ends the stream."""
        ...


class Store(Protocol[R_contra]):
    """Where a reflector keeps what it lists and watches: it calls `upsert`, `delete` and
    `sweep` with what lists and watches bring.

    The reflector is the store's only writer, as an informer's is in client-go and
    controller-runtime. The webhook's `webhook.catalogs.CatalogStore` has no other; nor has the
    reconciler's `reconciler.state.store.ClusterStore`: the responses to its own writes are not put into it
    (so a late response cannot roll it back), and the worker waits until the watch brings the
    version a write returned (`reconciler.state.expect`).
    """

    def upsert(self, resource: R_contra, obj: Mapping[str, Any]) -> None:
        """An object of a list page or an ADDED/MODIFIED event: replace what the store holds under
        its key."""
        ...

    def delete(self, resource: R_contra, obj: Mapping[str, Any]) -> None:
        """A DELETED event: forget the object (the event carries its last state)."""
        ...

    def sweep(self, resource: R_contra, seen: set[Key]) -> None:
        """After a complete list: forget what it no longer holds."""
        ...


class RelistRequested(Exception):
    """A fresh list of this resource was asked for (e.g. a deletion waits for a newer view)."""


class Reflector(Generic[R]):
    """List, then watch, each resource into a :class:`Store`, forever (one task per resource)."""

    def __init__(
        self,
        lister_watcher: ListerWatcher[R],
        store: Store[R],
        *,
        sync: SyncView[R],
        on_change: Callable[[], None],
        on_restart: Callable[[R, str], None],
        on_store_error: Callable[[R], None],
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        healthy_watch_seconds: float = 1.0,
        backoff_reset_seconds: float = 60.0,
    ) -> None:
        self.lister_watcher, self.store = lister_watcher, store
        self.sync, self.on_change, self.on_restart = sync, on_change, on_restart
        self.on_store_error = on_store_error
        """Called when the store raised on an object: a bug in our code, counted by the binary."""
        self.sleep, self.clock = sleep, clock
        self.rng = rng or random.Random()
        self.healthy_watch_seconds = healthy_watch_seconds
        self.backoff_reset_seconds = backoff_reset_seconds
        """A watch that ran this long before it broke makes its failure the first in a row again
        (client-go's backoff manager resets after a quiet period likewise): without it, every
        fault over the months adds a doubling and a cut watch waits the full cap to re-list."""
        self._relist_wanted: dict[R, asyncio.Event] = {}
        self._skipped: set[tuple[R, Key | None, str]] = set()

    def request_relist(self, resource: R) -> None:
        """End the resource's watch and list it again (the caller rate-limits)."""
        self._relist_wanted.setdefault(resource, asyncio.Event()).set()

    async def relist(self, resource: R) -> str:
        """Replace what the store holds of the resource with a fresh list; returns the version to watch from.

        Pages go into the store as they come (a 150,000-pod list is never held
        whole), but nothing is swept before the last page: until then the store
        holds what it held plus what the new list has shown, never less.
        """
        self.sync.relisting(resource)
        seen: set[Key] = set()
        version = ""
        async for page in self.lister_watcher.list_pages(resource):
            for obj in page.items:
                key = object_key(obj)
                if key is not None:
                    seen.add(key)
                    self._apply(resource, obj, deleted=False)
            version = page.resource_version or version
            self.on_change()
        self.store.sweep(resource, seen)
        self.sync.listed(resource, version)
        self.on_change()
        return version

    async def follow(self, resource: R, version: str) -> tuple[str, int]:
        """Apply watch events until the server ends the stream; returns the last version and the count."""
        count = 0
        async for event in self.lister_watcher.watch(resource, version):
            version = resource_version(event.object) or version
            self.sync.progressed(resource, version)
            if event.type in ("ADDED", "MODIFIED", "DELETED"):
                self._apply(resource, event.object, deleted=event.type == "DELETED")
            else:
                continue
            count += 1
            self.on_change()
        return version, count

    def _apply(self, resource: R, obj: RawObject, *, deleted: bool) -> None:
        """Fold one object into the store.

        The stores read raw objects through tolerant accessors and never raise on what a
        client may send; an exception here is a bug in the store, not bad input. It is
        logged as one (with its traceback, once per object version, no payload), counted
        through `on_store_error`, and the object skipped, so one bug does not stop a resource.
        """
        try:
            if deleted:
                self.store.delete(resource, obj)
            else:
                self.store.upsert(resource, obj)
        except Exception:  # a store bug must not stop the whole resource; see the docstring
            self.on_store_error(resource)
            marker = (resource, object_key(obj), resource_version(obj))
            if marker not in self._skipped:
                if len(self._skipped) > 10_000:  # bounded memory, at worst a repeated line
                    self._skipped.clear()
                self._skipped.add(marker)
                log.exception(
                    "store bug: object skipped (please report)",
                    extra={"fields": {"resource": resource, "object": str(marker[1])}},
                )

    async def run(self, resource: R) -> None:
        """The loop of one resource, forever: list, watch until the stream ends, then re-list after a
        410 or a request at once, after any failure with backoff. Only cancellation ends it."""
        attempt = 0
        while True:
            started: float | None = None
            try:
                version = await self.relist(resource)
                while True:
                    started = self.clock()
                    version, count = await self._follow_unless_relist(resource, version)
                    if count == 0 and self.clock() - started < self.healthy_watch_seconds:
                        raise ApiError(0, "WatchEnded", message="the watch ended at once")
                    attempt = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a bug must not stop the loop either; log it and re-list
                if not isinstance(exc, ApiError | RelistRequested):
                    log.exception("stream failed", extra={"fields": {"resource": resource}})
                if started is not None and self.clock() - started >= self.backoff_reset_seconds:
                    attempt = 0  # it broke after a long healthy watch: a first failure
                attempt = await self._restart(resource, exc, attempt=attempt)

    async def _follow_unless_relist(self, resource: R, version: str) -> tuple[str, int]:
        wanted = self._relist_wanted.setdefault(resource, asyncio.Event())
        wanted.clear()
        follow = asyncio.ensure_future(self.follow(resource, version))
        waiting = asyncio.ensure_future(wanted.wait())
        try:
            await asyncio.wait({follow, waiting}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (follow, waiting):
                task.cancel()
            await asyncio.gather(follow, waiting, return_exceptions=True)
        if not follow.cancelled() and follow.exception() is None:
            return follow.result()
        if not follow.cancelled():
            raise follow.exception()  # type: ignore[misc]
        raise RelistRequested("a fresh list was asked for")

    async def _restart(self, resource: R, exc: Exception, *, attempt: int) -> int:
        self.sync.relisting(resource)  # the view stops at the break until a new list completes
        requested = isinstance(exc, RelistRequested)
        expired = requested or (isinstance(exc, ApiError) and exc.gone)
        self.on_restart(resource, "requested" if requested else "expired" if expired else "error")
        if requested:  # asked for while the watch was healthy (the caller rate-limits): no failure
            delay, failures = 0.0, attempt
        else:
            delay = 0.0 if expired and attempt == 0 else jittered(attempt, self.rng)
            failures = attempt + 1
        log.info(
            "re-listing" if expired else "list/watch failed; re-listing",
            extra={
                "fields": {"resource": resource, "error": str(exc), "retry_in": round(delay, 2)}
            },
        )
        if delay:
            await self.sleep(delay)
        return failures
