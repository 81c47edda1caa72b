"""The one backoff formula: exponential from `base`, capped, with optional jitter.

Every retry after a failure waits `exponential(attempt)`: the reflector's re-lists (with
jitter, so replicas do not retry in step), the reconciler's per-object backoff after a
refused write, its worker after a failed pass and its offline twin's file polling. Two loops
run on fixed periods instead, by design: leader election renews and retries every
`retry_period` (client-go's rule, reconciler/leader.py), and the certificate rotator waits
until the next step its plan names (webhook/certs/rotator.py).
"""

from __future__ import annotations

import random

MAX_DOUBLINGS = 20
"""Past this many doublings every useful cap is reached; it also keeps 2**n small."""


def exponential(attempt: int, *, base: float, cap: float) -> float:
    """`base * 2**attempt` seconds, at most `cap`; attempt 0 waits `base`."""
    return float(min(cap, base * 2 ** min(max(attempt, 0), MAX_DOUBLINGS)))


def jittered(attempt: int, rng: random.Random, *, base: float = 0.5, cap: float = 60.0) -> float:
    """:func:`exponential` with jitter: half fixed, half random, so retries spread out."""
    ceiling = exponential(attempt, base=base, cap=cap)
    return float(ceiling / 2 + rng.uniform(0, ceiling / 2))
