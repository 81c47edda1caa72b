"""List, then watch, one source into the state, forever.

A re-list replaces the source's state from scratch (`ClusterState.sweep` drops
what the list no longer holds, and only once the last page is in). While a list
is running the source is not synced (:class:`reconciler.sync.SyncView`): the
worker writes nothing before every source's first list, and releases nothing
that depends on a source while that source re-lists. A watch the server ends normally (its timeout)
resumes from the last version seen; a 410 Gone re-lists at once
(kubernetes-asyncio would retry a 410 only once, with the same stale version, so
we do not use its Watch); a dropped watch or any other failure re-lists after an
exponential backoff with jitter. The worker may also ask for a re-list
(:meth:`StreamRunner.request_relist`) when a deletion waits for a source to reach
a newer version than its watch has brought. Events only update the state and
wake the worker: what to write is decided there, level-based.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable

from reconciler.ports import ApiError, KubeAPI, RawObject
from reconciler.sync import SyncView
from shared.clusterstate import ClusterState, Key, Source, object_key, resource_version

log = logging.getLogger("gpuclass.reconciler.streams")


def backoff_delay(
    attempt: int, rng: random.Random, *, base: float = 0.5, cap: float = 60.0
) -> float:
    """Exponential backoff with jitter: half fixed, half random, so retries spread out."""
    ceiling = min(cap, base * 2 ** min(attempt, 16))
    return float(ceiling / 2 + rng.uniform(0, ceiling / 2))


class RelistRequested(Exception):
    """The worker wants a fresh list of this source (a deletion waits for a newer view)."""


class StreamRunner:
    def __init__(
        self,
        api: KubeAPI,
        state: ClusterState,
        *,
        sync: SyncView,
        on_change: Callable[[], None],
        on_restart: Callable[[Source, str], None],
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        healthy_watch_seconds: float = 1.0,
    ) -> None:
        self.api, self.state = api, state
        self.sync, self.on_change, self.on_restart = sync, on_change, on_restart
        self.sleep, self.clock = sleep, clock
        self.rng = rng or random.Random()
        self.healthy_watch_seconds = healthy_watch_seconds
        self._relist_wanted: dict[Source, asyncio.Event] = {}
        self._skipped: set[tuple[Source, Key | None, str]] = set()

    def request_relist(self, source: Source) -> None:
        """End the source's watch and list it again (the caller rate-limits)."""
        self._relist_wanted.setdefault(source, asyncio.Event()).set()

    async def relist(self, source: Source) -> str:
        """Replace the source's state with a fresh list; returns the version to watch from.

        Pages go into the state as they come (a 150,000-pod list is never held
        whole), but nothing is swept before the last page: until then the state
        holds the previous view plus what the new list has shown, never less.
        """
        self.sync.relisting(source)
        seen: set[Key] = set()
        version = ""
        async for page in self.api.list_pages(source):
            for obj in page.items:
                key = object_key(obj)
                if key is not None:
                    seen.add(key)
                    self._apply(source, obj, deleted=False)
            version = page.resource_version or version
            self.on_change()
        self.state.sweep(source, seen)
        self.sync.listed(source, version)
        self.on_change()
        return version

    async def follow(self, source: Source, version: str) -> tuple[str, int]:
        """Apply watch events until the server ends the stream; returns the last version and the count."""
        count = 0
        async for event in self.api.watch(source, version):
            version = resource_version(event.object) or version
            self.sync.progressed(source, version)
            if event.type in ("ADDED", "MODIFIED", "DELETED"):
                self._apply(source, event.object, deleted=event.type == "DELETED")
            else:
                continue
            count += 1
            self.on_change()
        return version, count

    def _apply(self, source: Source, obj: RawObject, *, deleted: bool) -> None:
        """Fold one object into the state; one the state cannot read is skipped, logged once."""
        try:
            if deleted:
                self.state.delete(source, obj)
            else:
                self.state.upsert(source, obj)
        except Exception as exc:  # one odd object must not stop a whole source
            marker = (source, object_key(obj), resource_version(obj))
            if marker not in self._skipped:
                if len(self._skipped) > 10_000:  # bounded memory, at worst a repeated line
                    self._skipped.clear()
                self._skipped.add(marker)
                log.warning(
                    "object skipped: cannot be read",
                    extra={
                        "fields": {"resource": source, "object": str(marker[1]), "error": repr(exc)}
                    },
                )

    async def run(self, source: Source) -> None:
        attempt = 0
        while True:
            try:
                version = await self.relist(source)
                while True:
                    started = self.clock()
                    version, count = await self._follow_unless_relist(source, version)
                    if count == 0 and self.clock() - started < self.healthy_watch_seconds:
                        raise ApiError(0, "WatchEnded", "the watch ended at once")
                    attempt = 0
            except asyncio.CancelledError:
                raise
            except (ApiError, RelistRequested) as exc:
                attempt = await self._restart(source, exc, attempt)
            except Exception as exc:  # a bug must not stop the loop; log it and re-list
                log.exception("stream failed", extra={"fields": {"resource": source}})
                attempt = await self._restart(source, exc, attempt)

    async def _follow_unless_relist(self, source: Source, version: str) -> tuple[str, int]:
        wanted = self._relist_wanted.setdefault(source, asyncio.Event())
        wanted.clear()
        follow = asyncio.ensure_future(self.follow(source, version))
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
        raise RelistRequested("a deletion waits for a newer view")

    async def _restart(self, source: Source, exc: Exception, attempt: int) -> int:
        self.sync.relisting(source)  # the view stops at the break until a new list completes
        requested = isinstance(exc, RelistRequested)
        expired = requested or (isinstance(exc, ApiError) and exc.gone)
        self.on_restart(source, "requested" if requested else "expired" if expired else "error")
        delay = 0.0 if expired and attempt == 0 else backoff_delay(attempt, self.rng)
        log.info(
            "re-listing" if expired else "list/watch failed; re-listing",
            extra={"fields": {"resource": source, "error": str(exc), "retry_in": round(delay, 2)}},
        )
        if delay:
            await self.sleep(delay)
        return attempt + 1
