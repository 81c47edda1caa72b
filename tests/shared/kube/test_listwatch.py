"""The shared reflector (shared/kube/listwatch.py): a store that raises is a bug, not bad input.

The stores read raw objects through tolerant accessors; if one raises anyway, the
reflector logs a `store bug` at error level with its traceback and no payload, counts it
through `on_store_error`, skips the object and goes on with the rest of the source.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from gpuclass.shared.core.base.meta import Key, object_key
from gpuclass.shared.kube.backoff import jittered
from gpuclass.shared.kube.errors import ApiError
from gpuclass.shared.kube.listwatch import ListPage, Reflector, WatchEvent
from gpuclass.shared.kube.syncview import SyncView

SECRET = "s3cr3t-payload"


def obj(name: str, **extra: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "t", "resourceVersion": "1"}, **extra}


class OneListing:
    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items

    async def list_pages(self, resource: str) -> AsyncIterator[ListPage]:
        yield ListPage(self.items, "10")

    async def watch(self, resource: str, resource_version: str) -> AsyncIterator[WatchEvent]:
        await asyncio.sleep(3600)
        yield WatchEvent("ADDED", {})  # never reached


class BuggyStore:
    """Keeps names; raises on an object carrying `boom` (a bug a future change could add)."""

    def __init__(self) -> None:
        self.names: set[Key] = set()

    def upsert(self, resource: str, o: Mapping[str, Any]) -> None:
        if "boom" in o:
            raise KeyError("a bug")
        key = object_key(o)
        assert key is not None
        self.names.add(key)

    def delete(self, resource: str, o: Mapping[str, Any]) -> None:
        self.names.discard(object_key(o))  # type: ignore[arg-type]

    def sweep(self, resource: str, seen: set[Key]) -> None:
        self.names &= seen


def test_a_store_that_raises_is_logged_as_a_bug_counted_and_skipped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store, errors = BuggyStore(), []
    reflector: Reflector[str] = Reflector(
        OneListing([obj("a"), obj("b", boom={"data": SECRET}), obj("c")]),
        store,
        sync=SyncView(("things",), clock=lambda: 0.0),
        on_change=lambda: None,
        on_restart=lambda source, reason: None,
        on_store_error=errors.append,
    )
    with caplog.at_level(logging.INFO):
        asyncio.run(reflector.relist("things"))
    assert store.names == {object_key(obj("a")), object_key(obj("c"))}
    assert errors == ["things"]
    bugs = [r for r in caplog.records if "store bug" in r.getMessage()]
    assert len(bugs) == 1 and bugs[0].levelno == logging.ERROR and bugs[0].exc_info
    assert all(
        SECRET not in r.getMessage() and SECRET not in str(r.__dict__) for r in caplog.records
    )


class BreakingWatch:
    """Lists at once; each watch runs `lasts` seconds of the fake clock, then breaks (a proxy
    cutting it, an API server restarting)."""

    def __init__(self, clock: list[float], lasts: float) -> None:
        self.clock, self.lasts = clock, lasts

    async def list_pages(self, resource: str) -> AsyncIterator[ListPage]:
        yield ListPage([], "10")

    async def watch(self, resource: str, resource_version: str) -> AsyncIterator[WatchEvent]:
        self.clock[0] += self.lasts
        raise ApiError(0, "ConnectionReset", message="the watch was cut")
        yield WatchEvent("BOOKMARK", {})  # never reached


def _delays_of_breaks(lasts: float, breaks: int) -> list[float]:
    """The re-list delays the reflector asks for over `breaks` breaks of watches lasting `lasts`."""
    clock, delays = [0.0], []

    async def sleep(seconds: float) -> None:
        delays.append(seconds)
        if len(delays) >= breaks:
            raise asyncio.CancelledError

    reflector: Reflector[str] = Reflector(
        BreakingWatch(clock, lasts),
        BuggyStore(),
        sync=SyncView(("things",), clock=lambda: clock[0]),
        on_change=lambda: None,
        on_restart=lambda resource, reason: None,
        on_store_error=lambda resource: None,
        sleep=sleep,
        clock=lambda: clock[0],
        rng=random.Random(7),
    )
    with contextlib.suppress(asyncio.CancelledError):
        asyncio.run(reflector.run("things"))
    return delays


def test_a_watch_broken_after_a_long_healthy_run_relists_at_the_first_delay() -> None:
    """A watch cut after ten minutes of health is a first failure, every time. The soak saw a
    long-lived reconciler take 63 s and 70 s to be consistent again after its 11th and 15th
    fault: only a watch that ended normally reset the doublings, so every cut or restart over the
    process's life added one, and re-lists waited 30-60 s (the cap)."""
    delays = _delays_of_breaks(lasts=600.0, breaks=12)
    assert len(delays) == 12
    assert max(delays) <= jittered(0, random.Random(0)) * 2  # a first failure: 0.25-0.5 s


def test_watches_that_break_at_once_back_off_to_the_cap() -> None:
    """The other side: a watch that keeps breaking at once doubles its delay up to the cap."""
    delays = _delays_of_breaks(lasts=0.0, breaks=12)
    assert delays[0] <= 0.5
    assert delays[-1] >= 30.0  # half of the 60 s cap at least (half fixed, half jitter)


def test_requested_relists_are_not_failures() -> None:
    """A re-list the worker asks for (a copy deletion waiting for a newer store) is not a
    failure: it starts at once however many came before. The soak found each one counted as a
    failure; the worker asks often under churn, so the doublings reached the 60 s cap and a copy
    deletion waited that long (a settle of 19 s after a watch cut, and 63 s and 70 s in the
    two-hour run)."""
    delays: list[float] = []
    lists = [0]

    class Lister:
        async def list_pages(self, resource: str) -> AsyncIterator[ListPage]:
            lists[0] += 1
            yield ListPage([], "10")

        async def watch(self, resource: str, resource_version: str) -> AsyncIterator[WatchEvent]:
            await asyncio.sleep(3600)  # a healthy, quiet watch
            yield WatchEvent("BOOKMARK", {})  # never reached

    async def sleep(seconds: float) -> None:
        delays.append(seconds)

    async def main() -> None:
        reflector: Reflector[str] = Reflector(
            Lister(),
            BuggyStore(),
            sync=SyncView(("things",), clock=lambda: 0.0),
            on_change=lambda: None,
            on_restart=lambda resource, reason: None,
            on_store_error=lambda resource: None,
            sleep=sleep,
            rng=random.Random(7),
        )
        task = asyncio.ensure_future(reflector.run("things"))
        for _ in range(10):
            await asyncio.sleep(0.01)
            reflector.request_relist("things")
        await asyncio.sleep(0.05)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert lists[0] == 11  # the first list and one per request
    assert [d for d in delays if d > 0] == []
