"""The one backoff formula (shared/kube/backoff.py): doubling from its base, capped, jitter within half."""

from __future__ import annotations

import random

import pytest

from gpuclass.shared.kube.backoff import exponential, jittered


@pytest.mark.parametrize(
    ("attempt", "expected"),
    [(0, 0.5), (1, 1.0), (2, 2.0), (6, 32.0), (7, 60.0), (1000, 60.0), (-3, 0.5)],
)
def test_exponential_doubles_from_its_base_up_to_the_cap(attempt: int, expected: float) -> None:
    assert exponential(attempt, base=0.5, cap=60.0) == expected


def test_jitter_stays_between_half_and_all_of_the_delay_and_varies() -> None:
    rng = random.Random(7)
    for attempt in range(12):
        ceiling = exponential(attempt, base=0.5, cap=60.0)
        seen = {jittered(attempt, rng) for _ in range(50)}
        assert all(ceiling / 2 <= d <= ceiling for d in seen)
        assert len(seen) > 1, "no jitter: replicas would retry in step"
