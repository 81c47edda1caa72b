"""List, then watch, one source into the state, forever.

A re-list replaces the source's state from scratch (`ClusterState.sweep` drops
what the list no longer holds). A watch the server ends normally (its timeout)
resumes from the last version seen; a 410 Gone re-lists at once
(kubernetes-asyncio would retry a 410 only once, with the same stale version, so
we do not use its Watch); a dropped watch or any other failure re-lists after an
exponential backoff with jitter. Events only update the state and wake the worker:
what to write is decided there, level-based.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable

from gpuclass.reconciler.ports import ApiError, KubeAPI
from gpuclass.shared.clusterstate import ClusterState, Key, Source, object_key, resource_version

log = logging.getLogger("gpuclass.reconciler.streams")


def backoff_delay(
    attempt: int, rng: random.Random, *, base: float = 0.5, cap: float = 60.0
) -> float:
    """Exponential backoff with jitter: half fixed, half random, so retries spread out."""
    ceiling = min(cap, base * 2 ** min(attempt, 16))
    return float(ceiling / 2 + rng.uniform(0, ceiling / 2))


class StreamRunner:
    def __init__(
        self,
        api: KubeAPI,
        state: ClusterState,
        *,
        on_change: Callable[[], None],
        on_synced: Callable[[Source], None],
        on_restart: Callable[[Source, str], None],
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        healthy_watch_seconds: float = 1.0,
    ) -> None:
        self.api, self.state = api, state
        self.on_change, self.on_synced, self.on_restart = on_change, on_synced, on_restart
        self.sleep, self.clock = sleep, clock
        self.rng = rng or random.Random()
        self.healthy_watch_seconds = healthy_watch_seconds

    async def relist(self, source: Source) -> str:
        """Replace the source's state with a fresh list; returns the version to watch from."""
        seen: set[Key] = set()
        version = ""
        async for page in self.api.list_pages(source):
            for obj in page.items:
                key = object_key(obj)
                if key is not None:
                    seen.add(key)
                    self.state.upsert(source, obj)
            version = page.resource_version or version
            self.on_change()
        self.state.sweep(source, seen)
        self.on_change()
        return version

    async def follow(self, source: Source, version: str) -> tuple[str, int]:
        """Apply watch events until the server ends the stream; returns the last version and the count."""
        count = 0
        async for event in self.api.watch(source, version):
            version = resource_version(event.object) or version
            if event.type == "DELETED":
                self.state.delete(source, event.object)
            elif event.type in ("ADDED", "MODIFIED"):
                self.state.upsert(source, event.object)
            else:
                continue
            count += 1
            self.on_change()
        return version, count

    async def run(self, source: Source) -> None:
        attempt = 0
        while True:
            try:
                version = await self.relist(source)
                self.on_synced(source)
                while True:
                    started = self.clock()
                    version, count = await self.follow(source, version)
                    if count == 0 and self.clock() - started < self.healthy_watch_seconds:
                        raise ApiError(0, "WatchEnded", "the watch ended at once")
                    attempt = 0
            except asyncio.CancelledError:
                raise
            except ApiError as exc:
                attempt = await self._restart(source, exc, attempt)
            except Exception as exc:  # a bug must not stop the loop; log it and re-list
                log.exception("stream failed", extra={"fields": {"resource": source}})
                attempt = await self._restart(source, exc, attempt)

    async def _restart(self, source: Source, exc: Exception, attempt: int) -> int:
        expired = isinstance(exc, ApiError) and exc.gone
        self.on_restart(source, "expired" if expired else "error")
        delay = 0.0 if expired and attempt == 0 else backoff_delay(attempt, self.rng)
        log.info(
            "re-listing" if expired else "list/watch failed; re-listing",
            extra={"fields": {"resource": source, "error": str(exc), "retry_in": round(delay, 2)}},
        )
        if delay:
            await self.sleep(delay)
        return attempt + 1
