"""Per-object backoff (reconciler/backoff.py) on a fake clock: doubling, the cap, reset, keys apart."""

from __future__ import annotations

from gpuclass.reconciler.backoff import KeyedBackoff


def test_delays_double_from_the_base_up_to_the_cap() -> None:
    backoff = KeyedBackoff(base=1.0, cap=10.0, clock=lambda: 0.0)
    delays = [backoff.failure("secret")[1] for _ in range(6)]
    assert delays == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert backoff.failure("secret") == (7, 10.0)


def test_a_long_run_of_failures_stays_at_the_cap() -> None:
    backoff = KeyedBackoff(base=0.5, cap=300.0, clock=lambda: 0.0)
    for _ in range(2000):  # the exponent is bounded, so 2**count never grows without end
        count, delay = backoff.failure("k")
    assert (count, delay) == (2000, 300.0)


def test_remaining_counts_down_on_the_clock_and_success_clears_it() -> None:
    now = [100.0]
    backoff = KeyedBackoff(base=4.0, cap=60.0, clock=lambda: now[0])
    assert backoff.remaining("k") == 0.0  # never failed: try now
    backoff.failure("k")
    now[0] = 101.5
    assert backoff.remaining("k") == 2.5
    now[0] = 200.0
    assert backoff.remaining("k") == 0.0  # past the delay, never negative
    backoff.success("k")
    assert backoff.failure("k") == (1, 4.0)  # a success starts the count again


def test_keys_back_off_independently() -> None:
    backoff = KeyedBackoff(base=1.0, cap=60.0, clock=lambda: 0.0)
    backoff.failure(("tenant-a", "copy"))
    backoff.failure(("tenant-a", "copy"))
    assert backoff.remaining(("tenant-a", "copy")) == 2.0
    assert backoff.remaining(("tenant-b", "copy")) == 0.0
    backoff.success(("tenant-b", "copy"))  # a key that never failed: nothing to clear
    assert backoff.remaining(("tenant-a", "copy")) == 2.0
