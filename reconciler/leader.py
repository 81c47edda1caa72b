"""Leader election on a coordination.k8s.io/v1 Lease, the controller-runtime way.

One replica writes at a time. The holder renews every `retry_period`; a candidate
takes the Lease only after it has seen the same record, unchanged, for a whole
`lease_duration` (measured on its own monotonic clock, so clock skew between nodes
does not matter). A leader that has not renewed within `renew_deadline` — shorter
than the lease — counts itself deposed at once: :meth:`LeaderElector.is_leader`
is checked before every write, so a replica that lost the Lease stops writing
before anyone else can take it. On shutdown the Lease is released (holder
cleared) so the next replica need not wait.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from gpuclass.reconciler.api.port import ApiError, KubeAPI, RawObject

log = logging.getLogger("gpuclass.reconciler.leader")


def micro_time() -> str:
    """metav1.MicroTime of now."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Leadership(Protocol):
    """What the worker asks before every write; :class:`LeaderElector` in a cluster,
    :class:`AlwaysLeader` where one writer is certain."""

    def is_leader(self) -> bool:
        """Whether this replica may write now; asked before each write, never cached."""
        ...


class AlwaysLeader:
    """For a single writer by construction: the offline twin, or `--no-leader-elect`."""

    def is_leader(self) -> bool:
        """Always: there is no other writer to fence off."""
        return True


@dataclass(frozen=True, slots=True)
class LeaseSettings:
    """Which Lease (`namespace`/`name`), who we are in it (`identity`), and client-go's timings:
    how long a Lease holds unrenewed, how soon a leader stops writing when renewals lag, and the
    period between attempts."""

    namespace: str
    name: str
    identity: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0


class LeaderElector:
    """Holds the Lease `namespace/name` as `identity`, client-go's leaderelection in small:
    durations in seconds (`lease_duration` > `renew_deadline` > `retry_period`),
    `on_change(leading)` on each gain or loss, clocks injected for tests."""

    def __init__(
        self,
        api: KubeAPI,
        lease: LeaseSettings,
        *,
        on_change: Callable[[bool], None] = lambda leading: None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], str] = micro_time,
        rng: random.Random | None = None,
    ) -> None:
        self.api, self.lease = api, lease
        self.namespace, self.name, self.identity = lease.namespace, lease.name, lease.identity
        self.lease_duration, self.renew_deadline = lease.lease_duration, lease.renew_deadline
        self.retry_period = lease.retry_period
        self.on_change, self.clock, self.wall = on_change, clock, wall
        self.rng = rng or random.Random()
        self._leading = False
        self._renewed = float("-inf")
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = float("-inf")

    def is_leader(self) -> bool:
        """We hold the Lease and renewed it less than `renew_deadline` ago; false at once when
        renewals lag, before any other replica could take it."""
        return self._leading and self.clock() - self._renewed < self.renew_deadline

    async def run(self) -> None:
        """Acquire, then renew, forever; leadership changes are reported through `on_change`."""
        while True:
            await asyncio.sleep(await self.step())

    async def step(self) -> float:
        """One acquire-or-renew; returns how long to wait before the next.

        A leader whose renewal came later than `renew_deadline` refused writes meanwhile
        (`is_leader` was false) without losing the Lease; when the renewal succeeds,
        `on_change(True)` is reported again so that those writes are made now.
        """
        was_leading, was_writable = self._leading, self.is_leader()
        try:
            renewed = await self.try_acquire_or_renew()
        except ApiError as exc:
            log.warning("lease update failed", extra={"fields": {"error": str(exc)}})
            renewed = False
        if renewed:
            self._renewed = self.clock()
        self._set_leading(renewed or self.is_leader())
        if was_leading and not was_writable and self.is_leader():
            log.info(
                "lease renewed late; writes resume", extra={"fields": {"identity": self.identity}}
            )
            self.on_change(True)
        if self._leading:
            return self.retry_period
        return self.retry_period * (1 + self.rng.uniform(0, 0.2))

    async def acquire(self, *, timeout: float) -> bool:
        """Try until the Lease is ours or `timeout` passes (`--once`: one pass, then release)."""
        deadline = self.clock() + timeout
        while True:
            try:
                renewed = await self.try_acquire_or_renew()
            except ApiError:
                renewed = False
            if renewed:
                self._renewed = self.clock()
                self._set_leading(True)
                return True
            if self.clock() >= deadline:
                return False
            await asyncio.sleep(self.retry_period)

    def _set_leading(self, leading: bool) -> None:
        if leading != self._leading:
            self._leading = leading
            log.info(
                "leadership " + ("acquired" if leading else "lost"),
                extra={"fields": {"identity": self.identity}},
            )
            self.on_change(leading)

    async def try_acquire_or_renew(self) -> bool:
        """One read and one write of the Lease: True when it is ours afterwards (created, renewed or
        taken over after the holder let it expire), False while another holder's lease runs. The
        write is pinned to the resourceVersion read, so a race raises 409."""
        lease = await self.api.get_lease(self.namespace, self.name)
        now = self.wall()
        if lease is None:
            await self._create(now)
            return True
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        observed = (
            holder,
            spec.get("renewTime"),
            (lease.get("metadata") or {}).get("resourceVersion"),
        )
        if observed != self._observed:
            self._observed, self._observed_at = observed, self.clock()
        if holder and holder != self.identity:
            if self._leading:
                self._set_leading(False)  # someone else holds it: deposed, stop writing now
            duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
            if self.clock() - self._observed_at < duration:
                return False
        await self._update(lease, holder, now=now)
        return True

    def _spec(self, now: str, *, acquired: str, transitions: int) -> RawObject:
        return {
            "holderIdentity": self.identity,
            # whole seconds, rounded up: a shorter advertised lease would let a candidate take
            # over before this replica's renew deadline (and 0 is invalid)
            "leaseDurationSeconds": math.ceil(self.lease_duration),
            "acquireTime": acquired,
            "renewTime": now,
            "leaseTransitions": transitions,
        }

    async def _create(self, now: str) -> None:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": self._spec(now, acquired=now, transitions=0),
        }
        await self.api.create_lease(self.namespace, body)

    async def _update(self, lease: RawObject, holder: str, *, now: str) -> None:
        spec = lease.get("spec") or {}
        ours = holder == self.identity
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if ours else 1)
        acquired = str(spec.get("acquireTime") or now) if ours else now
        body = {**lease, "spec": self._spec(now, acquired=acquired, transitions=transitions)}
        await self.api.replace_lease(self.namespace, self.name, body=body)

    async def release(self) -> None:
        """Give the Lease up (holder cleared) if we hold it, so a successor need not wait it out."""
        if not self._leading:
            return
        self._set_leading(False)
        try:
            lease = await self.api.get_lease(self.namespace, self.name)
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            spec = {
                **lease.get("spec", {}),
                "holderIdentity": None,
                "leaseDurationSeconds": 1,
                "renewTime": self.wall(),
            }
            await self.api.replace_lease(self.namespace, self.name, body={**lease, "spec": spec})
        except ApiError as exc:
            log.warning("lease not released", extra={"fields": {"error": str(exc)}})
