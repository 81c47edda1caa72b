"""The list-then-watch loop, independent of any client library.

A `ListWatchSource` lists a resource (items and a resourceVersion) and watches
it from a version. `list_watch` keeps a cache in step through the callbacks:
`on_reset` with every item after each (re)list, `on_event` for each change. A
watch that ends is resumed from the last version seen; an expired version (410
Gone, raised as `Expired`) or a dropped watch re-lists from scratch; other
errors back off exponentially with jitter. It runs until cancelled.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

log = logging.getLogger(__name__)

RawObject = dict[str, Any]


class Expired(Exception):
    """The watch's resourceVersion is too old (HTTP 410 Gone): re-list."""


class ListWatchSource(Protocol):
    name: str

    async def list(self) -> tuple[list[RawObject], str]: ...

    def watch(self, resource_version: str) -> AsyncIterator[tuple[str, RawObject]]: ...


def backoff_delay(attempt: int, *, base: float = 0.5, cap: float = 30.0) -> float:
    """Full-jitter exponential backoff."""
    return float(random.uniform(0, min(cap, base * 2 ** min(attempt, 16))))


def resource_version(obj: RawObject) -> str | None:
    meta = obj.get("metadata")
    rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
    return rv if isinstance(rv, str) else None


async def list_watch(
    source: ListWatchSource,
    *,
    on_reset: Callable[[list[RawObject]], None],
    on_event: Callable[[str, RawObject], None],
    on_restart: Callable[[str], None] = lambda reason: None,
    sleep: Callable[[float], Any] = asyncio.sleep,
) -> None:
    attempt = 0
    while True:
        try:
            items, version = await source.list()
            on_reset(items)
            attempt = 0
            while True:
                async for event_type, obj in source.watch(version):
                    version = resource_version(obj) or version
                    if event_type in ("ADDED", "MODIFIED", "DELETED"):
                        on_event(event_type, obj)
        except Expired:
            log.info("watch expired; re-listing", extra={"fields": {"resource": source.name}})
            on_restart("expired")
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the loop must outlive any API or network failure
            delay = backoff_delay(attempt)
            attempt += 1
            log.warning(
                "list/watch failed; retrying",
                extra={
                    "fields": {
                        "resource": source.name,
                        "error": f"{type(exc).__name__}: {exc}",
                        "retry_in": round(delay, 2),
                    }
                },
            )
            on_restart("error")
            await sleep(delay)
