"""Giving freed heap back to the system, so a server's resident memory follows what it holds.

CPython asks the C library for every object larger than 512 bytes (a list page's text, dict
tables, long strings). glibc keeps what is freed inside its heap for the next request and gives
pages back only from the heap's top. A re-list after an API-server restart or a watch cut parses
pages of hundreds of objects at once; the store keeps a compact copy of each object, allocated
in between, so the freed pages sit below live data and stay resident. Each such burst can raise
the resident size to a new high, and never lower it, while the heap in use stays flat: what the
two-hour soak found (its figures are in docs/testing.md, "What the soak found").

`malloc_trim(0)` walks glibc's heaps and returns every whole free page inside them, not only at
the top. :func:`keep_returning_memory` calls it every `--memory-return-seconds` (default 300; its
cost is in docs/operations.md, "Resident memory"); on a C library without it (musl, macOS) it
does nothing. A real leak (memory still referenced) is untouched by it, which is what the
soak's slope is meant to see.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import functools
import logging
from collections.abc import Callable

log = logging.getLogger("gpuclass.memory")


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


async def keep_returning_memory(period: float) -> None:
    """Every `period` seconds (`--memory-return-seconds`; 0: never), :func:`return_free_memory`,
    with a debug line saying whether pages went back; runs until cancelled. Both servers start
    it beside their other background tasks; without `malloc_trim` it only waits."""
    if period <= 0 or _malloc_trim() is None:
        await asyncio.Event().wait()
    while True:
        await asyncio.sleep(period)
        returned = return_free_memory()
        log.debug("free heap pages returned", extra={"fields": {"returned": returned}})
