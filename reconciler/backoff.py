"""Per-object backoff, so one refused write (403 from the policy, a foreign Secret) is retried
rarely, while every other object keeps being reconciled at full speed."""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable

from gpuclass.shared.kube.backoff import exponential


class KeyedBackoff:
    """Failures per key (a class's status, its finalizer, one copy, the record): each failure
    doubles the wait from `base` up to `cap` seconds, a success forgets the key. Keys are only
    remembered while failing."""

    def __init__(
        self, *, base: float = 1.0, cap: float = 300.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.base, self.cap, self.clock = base, cap, clock
        self._failures: dict[Hashable, tuple[int, float]] = {}

    def remaining(self, key: Hashable) -> float:
        """Seconds until `key` may be tried again (0: now)."""
        entry = self._failures.get(key)
        return max(entry[1] - self.clock(), 0.0) if entry else 0.0

    def failure(self, key: Hashable) -> tuple[int, float]:
        """Record a failure; returns how many in a row, and the delay before the next try."""
        count = self._failures.get(key, (0, 0.0))[0] + 1
        delay = exponential(count - 1, base=self.base, cap=self.cap)
        self._failures[key] = (count, self.clock() + delay)
        return count, delay

    def success(self, key: Hashable) -> None:
        """The key's write went through: forget its failures, so the next failure starts from `base`
        again."""
        self._failures.pop(key, None)
