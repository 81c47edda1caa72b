"""Giving freed heap back to the system, so a server's resident memory follows what it holds.

CPython asks the C library for every object larger than 512 bytes (a list page's text, dict
tables, long strings). glibc keeps what is freed inside its heap for the next request and gives
pages back only from the heap's top. A re-list after an API-server restart or a watch cut parses
pages of hundreds of objects at once; the store keeps a compact copy of each object, allocated
in between, so the freed pages sit below live data and stay resident. Each such burst can raise
the resident size to a new high, and never lower it: the two-hour soak measured
4.7 to 17 MB/h in the reconcilers and 1.0 to 2.5 MB/h in the webhooks while the heap in use
stayed flat (docs/testing.md, "What the soak found").

`malloc_trim(0)` walks glibc's heaps and returns every whole free page inside them, not only at
the top. :func:`keep_returning_memory` calls it on a fixed period; on a C library without it
(musl, macOS) it does nothing. A real leak (memory still referenced) is untouched by it, which
is what the soak's slope is meant to see.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import functools
from collections.abc import Callable

TRIM_PERIOD_SECONDS = 300.0
"""Often enough that a burst's pages go back within minutes; one trim costs well under a
millisecond at our heap sizes (docs/performance.md)."""


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        trim = libc.malloc_trim
    except (OSError, AttributeError, TypeError):  # no libc found, or not glibc
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def return_free_memory() -> bool | None:
    """Give glibc's free heap pages back to the system: True when some were given back, False
    when none were free, None when this C library has no `malloc_trim`."""
    trim = _malloc_trim()
    return None if trim is None else bool(trim(0))


async def keep_returning_memory(period: float = TRIM_PERIOD_SECONDS) -> None:
    """Every `period` seconds, :func:`return_free_memory`; runs until cancelled. Started by both
    servers beside their other background tasks; where there is no `malloc_trim` it only waits."""
    while True:
        await asyncio.sleep(period)
        return_free_memory()
