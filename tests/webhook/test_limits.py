"""The shared body budget (webhook/limits.py): small bodies keep a reserve large ones cannot take."""

from __future__ import annotations

from gpuclass.webhook.limits import BodyBudget

KIB = 1024


def budget() -> BodyBudget:
    return BodyBudget(limit=1024 * KIB, small_bytes=64 * KIB, reserve=256 * KIB)


def test_large_bodies_stop_at_the_reserve_and_small_ones_still_fit() -> None:
    b = budget()
    held = 0
    while b.take(64 * KIB, body_so_far=held + 64 * KIB):
        held += 64 * KIB
    assert held == 768 * KIB, "one large body may fill the budget only up to limit - reserve"
    assert not b.has_room(128 * KIB)
    assert b.has_room(16 * KIB) and b.take(16 * KIB, body_so_far=16 * KIB)
    b.give(held)
    assert b.used == 16 * KIB and b.has_room(512 * KIB)


def test_small_bodies_may_use_all_of_it_and_no_more() -> None:
    b = budget()
    taken = sum(32 * KIB for _ in range(64) if b.take(32 * KIB, body_so_far=32 * KIB))
    assert taken == 1024 * KIB == b.used
    assert not b.has_room(1) and not b.take(1, body_so_far=1)
