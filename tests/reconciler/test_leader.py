"""Lease rules on a fake clock: acquire, respect a live holder, take over a stale one, depose in time, release."""

from __future__ import annotations

import asyncio
from typing import Any

from gpuclass.reconciler.api.fake import MemoryKube
from gpuclass.reconciler.api.port import ApiError
from gpuclass.reconciler.leader import LeaderElector, LeaseSettings

KEY = ("ns", "lease")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


LEASE = LeaseSettings(namespace="ns", name="lease", identity="me")


def elector(kube: MemoryKube, clock: Clock, identity: str = "me") -> LeaderElector:
    return LeaderElector(
        kube,
        LeaseSettings(namespace="ns", name="lease", identity=identity),
        clock=clock,
        wall=lambda: f"wall-{clock.now}",
    )


def spec(kube: MemoryKube) -> dict[str, Any]:
    return dict(kube.store["Lease"][KEY]["spec"])


def test_acquires_a_missing_lease_and_renews_it() -> None:
    async def scenario() -> None:
        kube, clock = MemoryKube(), Clock()
        me = elector(kube, clock)
        assert await me.acquire(timeout=0)
        assert me.is_leader()
        assert spec(kube) == {
            "holderIdentity": "me",
            "leaseDurationSeconds": 15,
            "acquireTime": "wall-1000.0",
            "renewTime": "wall-1000.0",
            "leaseTransitions": 0,
        }
        clock.now += 2
        assert await me.try_acquire_or_renew()
        assert (
            spec(kube)["renewTime"] == "wall-1002.0" and spec(kube)["acquireTime"] == "wall-1000.0"
        )

    asyncio.run(scenario())


def test_live_holder_is_respected_and_stale_one_replaced() -> None:
    async def scenario() -> None:
        kube, clock = MemoryKube(), Clock()
        other, me = elector(kube, clock, "other"), elector(kube, clock, "me")
        assert await other.acquire(timeout=0)
        assert not await me.try_acquire_or_renew()
        clock.now += 14
        assert not await me.try_acquire_or_renew()  # 14 s unchanged: not yet stale
        clock.now += 1.5
        assert await me.try_acquire_or_renew()  # 15.5 s unchanged: take it over
        assert spec(kube)["holderIdentity"] == "me" and spec(kube)["leaseTransitions"] == 1

    asyncio.run(scenario())


def test_renewing_holder_keeps_the_lease() -> None:
    async def scenario() -> None:
        kube, clock = MemoryKube(), Clock()
        other, me = elector(kube, clock, "other"), elector(kube, clock, "me")
        assert await other.acquire(timeout=0)
        for _ in range(20):
            clock.now += 2
            assert await other.try_acquire_or_renew()
            assert not await me.try_acquire_or_renew()  # each renewal restarts my 15 s wait

    asyncio.run(scenario())


def test_deposed_after_renew_deadline_not_lease_duration() -> None:
    async def scenario() -> None:
        kube, clock = MemoryKube(), Clock()
        me = elector(kube, clock)
        assert await me.acquire(timeout=0)
        clock.now += 9.9
        assert me.is_leader()
        clock.now += 0.2  # 10.1 s without a renewal: stop writing, 5 s before anyone may take over
        assert not me.is_leader()

    asyncio.run(scenario())


def test_seeing_another_holder_deposes_at_once() -> None:
    async def scenario() -> None:
        kube, clock = MemoryKube(), Clock()
        changes: list[bool] = []
        me = LeaderElector(kube, LEASE, clock=clock, on_change=changes.append)
        assert await me.acquire(timeout=0)
        lease = kube.store["Lease"][KEY]
        kube.apply({**lease, "spec": {**lease["spec"], "holderIdentity": "usurper"}})
        assert not await me.try_acquire_or_renew()
        assert not me.is_leader()
        assert changes == [True, False]

    asyncio.run(scenario())


def test_release_clears_the_holder_so_a_successor_need_not_wait() -> None:
    async def scenario() -> None:
        kube, clock = MemoryKube(), Clock()
        me, next_ = elector(kube, clock, "me"), elector(kube, clock, "next")
        assert await me.acquire(timeout=0)
        await me.release()
        assert not me.is_leader()
        assert not spec(kube)["holderIdentity"]
        assert await next_.try_acquire_or_renew()

    asyncio.run(scenario())


def test_conflicting_update_is_not_leadership() -> None:
    async def scenario() -> None:
        kube, clock = MemoryKube(), Clock()
        me = elector(kube, clock)
        kube.errors["create_lease"] = [ApiError(409, "AlreadyExists")]
        assert not await me.acquire(timeout=0)
        assert not me.is_leader()

    asyncio.run(scenario())


def test_a_late_renewal_reports_leadership_again_so_refused_writes_are_made() -> None:
    """Writes refused while a renewal was late (is_leader false, Lease still ours) are not lost."""

    async def scenario() -> None:
        kube, clock = MemoryKube(), Clock()
        changes: list[bool] = []
        me = LeaderElector(
            kube,
            LEASE,
            clock=clock,
            wall=lambda: f"wall-{clock.now}",
            on_change=changes.append,
        )
        await me.step()
        assert changes == [True] and me.is_leader()
        clock.now += me.renew_deadline + 1  # the renewal is late: writes are refused meanwhile
        assert not me.is_leader()
        await me.step()  # renewed: the Lease was never lost
        assert me.is_leader() and changes == [True, True]
        clock.now += 1
        await me.step()  # an ordinary renewal reports nothing
        assert changes == [True, True]

    asyncio.run(scenario())
