"""Client-side request rate limit: a token bucket, as client-go's `--kube-api-qps/--kube-api-burst`.

A burst of `burst` requests goes out at once, then `qps` per second on average.
It keeps a relist storm (every source after an API server restart, a big
cluster's pages) or a write burst from flooding the API server, which would
throttle every client with API Priority and Fairness. `qps <= 0` disables it.
The clock and sleep are passed in, so tests need no real time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


class TokenBucket:
    """One bucket per client, shared by its lists, watches and writes: `burst` requests at once,
    then `qps` per second; `qps <= 0` lets everything through."""

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.qps, self.burst = qps, max(1, burst)
        self.clock, self.sleep = clock, sleep
        self.tokens = float(self.burst)
        self.last = clock()

    def _refill(self) -> None:
        now = self.clock()
        self.tokens = min(float(self.burst), self.tokens + (now - self.last) * self.qps)
        self.last = now

    async def acquire(self) -> None:
        """Wait until one request may go out."""
        if self.qps <= 0:
            return
        while True:
            self._refill()
            if self.tokens >= 1:
                self.tokens -= 1
                return
            await self.sleep((1 - self.tokens) / self.qps)
