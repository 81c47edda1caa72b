"""Usage metrics for capacity planning and billing (docs/metrics.md, "Usage").

Per class: allocatable, used and free units over eligible nodes. Per tenant namespace and
class: units held by admitted VMIs whose launcher Pod is bound (phase Scheduled or Running),
bounded to the 500 largest series plus one `_other` series per class. Per class: admitted
VMIs still waiting for a node (phase unset, Pending or Scheduling). Expected values are
counted by hand from the objects each test creates.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from gpuclass.reconciler.api.fake import MemoryKube
from gpuclass.reconciler.leader import AlwaysLeader
from gpuclass.reconciler.manager import Manager
from gpuclass.reconciler.metrics import MAX_TENANT_SERIES, ReconcilerMetrics, bounded_tenant_units
from gpuclass.reconciler.settings import ReconcilerSettings
from gpuclass.shared.core.status.availability import Figures
from tests.builders import gpuclass, kubevirt, namespace, node, pod, vmi

R = "example.com/gpu"


@pytest.mark.parametrize(
    ("units", "cap", "expected"),
    [
        pytest.param({("a", "c"): 2}, 500, {("a", "c"): 2}, id="under-the-cap"),
        pytest.param(
            {("a", "c"): 5, ("b", "c"): 1, ("d", "c"): 2, ("e", "k"): 1},
            2,
            {("a", "c"): 5, ("d", "c"): 2, ("_other", "c"): 1, ("_other", "k"): 1},
            id="rest-summed-per-class",
        ),
        pytest.param(
            {("b", "c"): 1, ("a", "c"): 1, ("c", "c"): 1},
            1,
            {("a", "c"): 1, ("_other", "c"): 2},
            id="ties-broken-by-namespace",
        ),
        pytest.param({}, 500, {}, id="nothing"),
    ],
)
def test_bounded_tenant_units(
    units: dict[tuple[str, str], int], cap: int, expected: dict[tuple[str, str], int]
) -> None:
    assert bounded_tenant_units(units, cap) == expected


def test_the_cap_is_500_and_totals_are_kept() -> None:
    assert MAX_TENANT_SERIES == 500
    units = {(f"tenant-{i:04d}", "c"): 1 + i % 3 for i in range(2000)}
    bounded = bounded_tenant_units(units)
    assert len(bounded) == 501
    assert sum(bounded.values()) == sum(units.values())


def phased(obj: dict[str, Any], phase: str | None) -> dict[str, Any]:
    if phase is not None:
        obj["status"] = {"phase": phase}
    return obj


def world() -> list[dict[str, Any]]:
    return [
        kubevirt(R),
        gpuclass("c", R),
        node("n1", {R: 4}),
        node("n2", {R: 8}, ready=False),  # not eligible: outside allocatable/used/free
        pod("launcher-a", "n1", {R: 2}, namespace="tenant-a"),
        namespace("tenant-a"),
        namespace("tenant-b"),
        phased(vmi("vm-a", "tenant-a", classes=["c", "c"], devices=[R, R]), "Running"),
        phased(vmi("vm-b", "tenant-b", classes=["c"], devices=[R]), "Scheduling"),
        phased(vmi("vm-new", "tenant-b", classes=["c"], devices=[R]), None),
        # Not admitted (no GPU entries of admission's shape): counts nowhere.
        phased(vmi("vm-raw", "tenant-b", classes=["c"], devices=[]), "Running"),
        phased(vmi("vm-done", "tenant-a", classes=["c"], devices=[R]), "Succeeded"),
    ]


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), 30))


async def settle(manager: Manager) -> None:
    for _ in range(50):
        await asyncio.sleep(0.02)
        worker = manager.worker
        if manager.ready and not manager.store.dirty and worker and not worker._wake.is_set():
            await asyncio.sleep(0.05)
            return
    raise AssertionError("never settled")


def test_usage_series_follow_the_cluster() -> None:
    async def scenario() -> None:
        kube = MemoryKube(world())
        settings = ReconcilerSettings(coalesce_seconds=0.0, leader_elect=False)
        manager = Manager(settings, api=kube, leadership=AlwaysLeader(), serve_http=False)
        task = asyncio.create_task(manager.run())
        try:
            await settle(manager)

            def sample(metric: str, **labels: str) -> float | None:
                return manager.metrics.registry.get_sample_value(metric, labels)

            c = {"class": "c"}
            assert sample("gpuclass_allocatable_units", **c) == 4
            assert sample("gpuclass_used_units", **c) == 2
            assert sample("gpuclass_free_units", **c) == 2
            assert sample("gpuclass_tenant_units", namespace="tenant-a", **c) == 2
            assert sample("gpuclass_tenant_units", namespace="tenant-b", **c) is None
            assert sample("gpuclass_waiting_vmis", **c) == 2, "vm-b (Scheduling), vm-new (no phase)"
            assert sample("gpuclass_condition", type="Schedulable", status="True", **c) == 1, (
                "the fifth condition is exported like the other four"
            )

            kube.apply(phased(vmi("vm-b", "tenant-b", classes=["c"], devices=[R]), "Running"))
            await settle(manager)
            assert sample("gpuclass_tenant_units", namespace="tenant-b", **c) == 1
            assert sample("gpuclass_waiting_vmis", **c) == 1

            kube.remove("VirtualMachineInstance", "tenant-b", name="vm-new")
            kube.remove("VirtualMachineInstance", "tenant-a", name="vm-a")
            await settle(manager)
            assert sample("gpuclass_waiting_vmis", **c) is None, "no stale series"
            assert sample("gpuclass_tenant_units", namespace="tenant-a", **c) is None
        finally:
            manager.stop()
            await asyncio.wait_for(task, 5)

    run(scenario)


def _status(schedulable: tuple[str, str]) -> dict[str, Any]:
    return {
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "Ready"},
            {"type": "Schedulable", "status": schedulable[0], "reason": schedulable[1]},
        ]
    }


def test_condition_reason_is_one_series_per_condition() -> None:
    """`gpuclass_condition_reason` (docs/metrics.md): the current reason of each condition, so an
    alert can tell a sold-out class (AllUnitsInUse) from one whose capacity cannot be used."""
    metrics = ReconcilerMetrics()

    def reason(type_: str, value: str) -> float | None:
        labels = {"class": "c", "type": type_, "reason": value}
        return metrics.registry.get_sample_value("gpuclass_condition_reason", labels)

    metrics.set_class("c", _status(("False", "AllUnitsInUse")), figures=Figures())
    assert reason("Schedulable", "AllUnitsInUse") == 1
    assert reason("Ready", "Ready") == 1

    metrics.set_class("c", _status(("False", "NoEligibleNode")), figures=Figures())
    assert reason("Schedulable", "NoEligibleNode") == 1
    assert reason("Schedulable", "AllUnitsInUse") is None, "the old reason's series is gone"

    metrics.forget_class("c")
    assert reason("Schedulable", "NoEligibleNode") is None
    assert reason("Ready", "Ready") is None


def test_class_series_follow_every_pass_and_come_back_after_forget() -> None:
    """`set_class` sets the condition series again only when a condition changed: the figures
    still move every pass, a flip shows, and a forgotten class's series return when it is set."""
    metrics = ReconcilerMetrics()

    def sample(name: str, **labels: str) -> float | None:
        return metrics.registry.get_sample_value(name, {"class": "c", **labels})

    def condition(type_: str, value: str) -> float | None:
        return sample("gpuclass_condition", type=type_, status=value)

    metrics.set_class("c", {**_status(("True", "CanStart")), "free": 3}, figures=Figures(free=3))
    metrics.set_class("c", {**_status(("True", "CanStart")), "free": 2}, figures=Figures(free=2))
    assert sample("gpuclass_free_units") == 2
    assert condition("Schedulable", "True") == 1

    metrics.set_class("c", {**_status(("False", "CanStart")), "free": 0}, figures=Figures())
    assert (condition("Schedulable", "True"), condition("Schedulable", "False")) == (0, 1)

    metrics.forget_class("c")
    assert sample("gpuclass_free_units") is None
    assert condition("Schedulable", "False") is None
    metrics.set_class("c", {**_status(("False", "CanStart")), "free": 0}, figures=Figures())
    assert sample("gpuclass_free_units") == 0
    assert condition("Schedulable", "False") == 1
    assert sample("gpuclass_condition_reason", type="Ready", reason="Ready") == 1


def test_a_wake_with_nothing_dirty_is_a_pass_that_writes_nothing() -> None:
    """docs/metrics.md: every watched event wakes the worker; an event that marks nothing dirty
    still makes a pass (observed, and the last-sync timestamp moves) but writes nothing."""

    async def scenario() -> None:
        kube = MemoryKube(world())
        settings = ReconcilerSettings(coalesce_seconds=0.0, leader_elect=False)
        manager = Manager(settings, api=kube, leadership=AlwaysLeader(), serve_http=False)
        task = asyncio.create_task(manager.run())
        try:
            await settle(manager)
            registry = manager.metrics.registry

            def sample(metric: str) -> float:
                return registry.get_sample_value(metric) or 0.0

            synced = sample("gpuclass_last_sync_timestamp_seconds")
            writes = sample("gpuclass_status_writes_total")
            passes = sample("gpuclass_reconcile_duration_seconds_count")
            await asyncio.sleep(0.01)
            kube.apply(pod("web", "n1", {"cpu": 1}, namespace="tenant-a"))  # no GPU: marks nothing
            await settle(manager)
            assert sample("gpuclass_reconcile_duration_seconds_count") > passes
            assert sample("gpuclass_last_sync_timestamp_seconds") > synced
            assert sample("gpuclass_status_writes_total") == writes
        finally:
            manager.stop()
            await asyncio.wait_for(task, 5)

    run(scenario)
