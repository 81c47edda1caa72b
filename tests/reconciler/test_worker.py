"""Acting only on a complete view: no write before every first list, no release on a partial view.

The cluster below is what a previous replica leaves behind: classes holding the
in-use finalizer for VMIs that use them, a license copy a running VM mounts, plus
one stale copy and one class nobody uses (the legitimate deletions). A new
replica whose VMI or Namespace list is slow must not see "no VMI" and release
what the VMs hold. The property test drives list pages, watch failures and a VMI
deletion in random order and checks every write against what a reconciler with
a complete view of the same cluster writes.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gpuclass.reconciler.api.fake import MemoryKube
from gpuclass.reconciler.api.port import ApiError, ListPage, WatchEvent
from gpuclass.reconciler.leader import AlwaysLeader
from gpuclass.reconciler.manager import Manager
from gpuclass.reconciler.settings import ReconcilerSettings
from gpuclass.reconciler.state.licenses import copy_digest, record_body
from gpuclass.reconciler.state.resources import RESOURCES, Resource
from gpuclass.shared.core.base import names
from gpuclass.shared.core.model.secrets import Redacted
from gpuclass.shared.kube.syncview import ResourceSync, SyncView, version_reached
from tests.builders import gpuclass, kubevirt, launcher, namespace, node, pod, secret, vmi

R = "example.com/gpu"
LIC = "example.com/lic"
HELD = [names.IN_USE_FINALIZER]
COPY = names.license_copy_name("lic")
MANAGED = {names.MANAGED_BY_LABEL: names.MANAGED_BY_VALUE}
NOW = "2026-06-01T00:00:00Z"
WRITES = {"patch_class_status", "patch_class_finalizers", "create_secret", "patch_secret"}
WRITES |= {"delete_secret", "create_event", "create_config_map", "replace_config_map"}


COPY_DATA = {names.TOKEN_KEY: "dG9rZW4=", names.GRIDD_KEY: "RmVhdHVyZVR5cGU9MQo="}
"""The token and FeatureType=1\n."""


def copy_secret(ns: str) -> dict[str, Any]:
    return secret(COPY, ns, data=dict(COPY_DATA), labels=MANAGED)


def copy_record(*namespaces: str) -> dict[str, Any]:
    digest = copy_digest({k: Redacted(v) for k, v in COPY_DATA.items()})
    return record_body({(ns, COPY): digest for ns in namespaces}, namespace="cozy-system")


def left_behind() -> list[dict[str, Any]]:
    """A cluster as a previous replica left it (statuses not yet written)."""
    return [
        kubevirt(R, LIC),
        gpuclass("c", R, finalizers=HELD),
        gpuclass("lic", LIC, license="src", finalizers=HELD),
        gpuclass("unused", "example.com/other", finalizers=HELD),
        node("n1", {R: 4, LIC: 4}),
        pod("p", "n1", {R: 1}),
        secret("src", data={names.TOKEN_KEY: "dG9rZW4="}),
        namespace("tenant-root"),
        namespace("tenant-a", entitled=True),
        namespace("tenant-b", entitled=True),
        vmi("vm-c", "tenant-a", classes=["c"], devices=[R]),
        vmi("vm-lic", "tenant-a", classes=["lic"], devices=[LIC], license_class="lic"),
        launcher("vm-lic", "tenant-a", license_class="lic"),
        copy_secret("tenant-a"),
        copy_secret("tenant-b"),  # no VMI mounts it: a legitimate deletion
        copy_record("tenant-a", "tenant-b"),
    ]


class GatedKube(MemoryKube):
    """MemoryKube whose list pages of gated sources wait until the test releases them."""

    def __init__(self, objects: Iterable[dict[str, Any]], *, gated: Iterable[Resource]) -> None:
        super().__init__(objects, page_size=1)
        self.allowed: dict[Resource, asyncio.Semaphore] = {s: asyncio.Semaphore(0) for s in gated}
        self.listed_all: Callable[[], bool] = lambda: True
        self.early_writes: list[str] = []

    def _check(self, method: str) -> None:
        if method in WRITES and not self.listed_all():
            self.early_writes.append(method)
        super()._check(method)

    def release(self, source: Resource, pages: int = 1) -> None:
        if source in self.allowed:
            for _ in range(pages):
                self.allowed[source].release()

    def open_all(self) -> None:
        for source in list(self.allowed):
            self.release(source, 10_000)
        self.allowed.clear()

    async def list_pages(self, source: Resource) -> AsyncIterator[ListPage]:
        async for page in super().list_pages(source):
            gate = self.allowed.get(source)
            if gate is not None:
                await gate.acquire()
            yield page

    def fail_watch(self, source: Resource, status: int) -> None:
        for watched, queue in self.watchers:
            if watched == source:
                queue.put_nowait(ApiError(status, "Expired" if status == 410 else "Dropped"))

    async def watch(self, source: Resource, resource_version: str) -> AsyncIterator[WatchEvent]:
        async for event in super().watch(source, resource_version):
            yield event


def make(kube: MemoryKube, **overrides: Any) -> Manager:
    values: dict[str, Any] = {
        "coalesce_seconds": 0.0,
        "catch_up_seconds": 0.0,  # a deletion behind a view re-lists at once (the wait: test_manager)
        "leader_elect": False,
        "vgpu_entitled": True,
    }
    reconciler = Manager(
        ReconcilerSettings(**{**values, **overrides}),
        api=kube,
        leadership=AlwaysLeader(),
        serve_http=False,
        now=lambda: NOW,
    )
    if isinstance(kube, GatedKube):
        kube.listed_all = reconciler.sync.all_listed
    return reconciler


def normalised(writes: Iterable[tuple[str, dict[str, Any]]]) -> set[tuple[str, ...]]:
    out: set[tuple[str, ...]] = set()
    for kind, w in writes:
        if kind == "status":
            out.add((kind, w["name"], json.dumps(w["patch"].get("status"), sort_keys=True)))
        elif kind == "finalizers":
            out.add((kind, w["name"], *w["finalizers"]))
        elif kind == "delete-secret":
            out.add((kind, w["namespace"], w["name"]))
        else:
            body = json.dumps(w["body"].get("data"), sort_keys=True)
            out.add((kind, w["namespace"], w["name"], body))
    return out


async def complete_view_writes(objects: list[dict[str, Any]]) -> set[tuple[str, ...]]:
    """What a reconciler that listed everything before acting writes for this cluster."""
    kube = MemoryKube(objects)
    reconciler = make(kube)
    await reconciler.load()
    await reconciler.reconcile_pending()
    return normalised(kube.writes)


async def turns(count: int = 30) -> None:
    for _ in range(count):
        await asyncio.sleep(0)


async def settle(reconciler: Manager, kube: MemoryKube) -> None:
    calm = 0
    for _ in range(2000):
        await asyncio.sleep(0.002)
        worker = reconciler.worker
        busy = bool(reconciler.store.dirty) or (worker is not None and worker._wake.is_set())
        calm = 0 if busy else calm + 1
        if calm >= 10:
            return
    raise AssertionError("never settled")


def finalizers(kube: MemoryKube, name: str) -> list[str]:
    obj = kube.store[names.KIND].get(("", name))
    return list(obj["metadata"].get("finalizers") or []) if obj else []


def secrets_of(kube: MemoryKube) -> set[tuple[str, str]]:
    return {key for key, obj in kube.store["Secret"].items() if key[1] == COPY}


# -- a slow first list ---------------------------------------------------------------------------


class BlindView:
    """A sync view that says every source is listed and current: no gate at all."""

    def __init__(self) -> None:
        self.state = {s: ResourceSync(listed_once=True, synced=True) for s in RESOURCES}

    def all_listed(self) -> bool:
        return True

    def synced(self, source: Resource) -> bool:
        return True

    def behind(self, sources: tuple[Resource, ...], version: str) -> tuple[Resource, ...]:
        return ()


async def slow_list_scenario(slow: Resource, *, guard: bool) -> tuple[GatedKube, list[str]]:
    """Every source lists at once except `slow`; watch what is written in the meantime."""
    kube = GatedKube(left_behind(), gated=[slow])
    reconciler = make(kube)
    task = asyncio.create_task(reconciler.run())
    await turns(200)
    if not guard:  # the behaviour before this rule: act on whatever has arrived
        assert reconciler.worker is not None
        reconciler.worker.sync = BlindView()  # type: ignore[assignment]
        reconciler.worker.wake()
    await asyncio.sleep(0.2)  # the old coalescing window, and then some
    during = [kind for kind, _ in kube.writes]
    kube.open_all()
    await settle(reconciler, kube)
    reconciler.stop()
    await asyncio.wait_for(task, 5)
    return kube, during


def test_nothing_is_written_while_the_vmi_list_is_slow_and_nothing_held_is_released() -> None:
    async def scenario() -> None:
        kube, during = await slow_list_scenario("vmis", guard=True)
        assert during == [] and kube.early_writes == []
        assert finalizers(kube, "c") == HELD and finalizers(kube, "lic") == HELD
        assert ("tenant-a", COPY) in secrets_of(kube)
        # the legitimate deletions still happen once the view is complete
        assert finalizers(kube, "unused") == []
        assert ("tenant-b", COPY) not in secrets_of(kube)

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_without_the_rule_a_slow_vmi_list_releases_what_running_vms_hold() -> None:
    """The fault the rule prevents, shown: acting on a partial view deletes a mounted copy."""

    async def scenario() -> None:
        kube, during = await slow_list_scenario("vmis", guard=False)
        deleted = [w for k, w in kube.writes if k == "delete-secret"]
        released = [w["name"] for k, w in kube.writes if k == "finalizers" and not w["finalizers"]]
        assert "delete-secret" in during
        assert {"namespace": "tenant-a", "name": COPY} in deleted  # while vm-lic mounts it
        assert {"c", "lic"} <= set(released)  # while vm-c and vm-lic use them

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_slow_namespace_list_deletes_no_copy() -> None:
    async def scenario() -> None:
        kube, during = await slow_list_scenario("namespaces", guard=True)
        assert during == [] and kube.early_writes == []
        assert ("tenant-a", COPY) in secrets_of(kube)

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_slow_pod_list_deletes_no_copy() -> None:
    """Launcher Pods say which copies are wanted: without them every copy looks unwanted."""

    async def scenario() -> None:
        kube, during = await slow_list_scenario("pods", guard=True)
        assert during == [] and kube.early_writes == []
        assert ("tenant-a", COPY) in secrets_of(kube)
        assert ("tenant-b", COPY) not in secrets_of(kube)

    asyncio.run(asyncio.wait_for(scenario(), 30))


# -- a re-list ----------------------------------------------------------------------------------


def test_a_relist_that_stalls_releases_nothing_until_it_completes() -> None:
    async def scenario() -> None:
        others = [vmi(f"plain-{i}", "tenant-b") for i in range(3)]  # a list of several pages
        kube = GatedKube([*left_behind(), *others], gated=[])
        reconciler = make(kube)
        task = asyncio.create_task(reconciler.run())
        await settle(reconciler, kube)
        assert finalizers(kube, "c") == HELD
        kube.allowed["vmis"] = asyncio.Semaphore(0)  # the next VMI list hangs after its snapshot
        for name in ("vm-c", "vm-lic"):  # gone while the watch was broken: only a list tells
            kube.store["VirtualMachineInstance"].pop(("tenant-a", name))
        kube.fail_watch("vmis", 410)
        await asyncio.sleep(0.3)
        assert not reconciler.sync.synced("vmis")
        assert finalizers(kube, "lic") == HELD and ("tenant-a", COPY) in secrets_of(kube)
        writes = len(kube.writes)
        kube.release("vmis", 1)  # one page of the new list: still not complete
        await asyncio.sleep(0.2)
        assert len(kube.writes) == writes
        kube.open_all()
        await settle(reconciler, kube)
        assert finalizers(kube, "lic") == [] and finalizers(kube, "c") == []
        assert ("tenant-a", COPY) not in secrets_of(kube)
        reconciler.stop()
        await asyncio.wait_for(task, 5)

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_readyz_drops_when_a_source_cannot_relist_for_too_long() -> None:
    async def scenario() -> None:
        kube = GatedKube(left_behind(), gated=[])
        reconciler = make(kube, relist_deadline_seconds=0.3)
        task = asyncio.create_task(reconciler.run())
        await settle(reconciler, kube)
        assert reconciler.ready and reconciler.readiness_problem() is None
        registry = reconciler.metrics.registry
        assert registry.get_sample_value("gpuclass_ready") == 1
        kube.errors["list"] = [ApiError(503, "ServiceUnavailable")] * 1000
        kube.fail_watch("pods", 0)
        await asyncio.sleep(0.1)
        assert registry.get_sample_value("gpuclass_source_synced", {"resource": "pods"}) == 0
        assert reconciler.ready  # a short re-list is no reason to leave the Service
        await asyncio.sleep(0.5)
        assert not reconciler.ready
        assert "pods" in (reconciler.readiness_problem() or "")
        assert registry.get_sample_value("gpuclass_ready") == 0
        kube.errors["list"] = []
        await asyncio.sleep(3)  # the stream's backoff
        assert reconciler.ready
        reconciler.stop()
        await asyncio.wait_for(task, 10)

    asyncio.run(asyncio.wait_for(scenario(), 30))


# -- the view's rules ---------------------------------------------------------------------------


def test_version_comparison() -> None:
    assert version_reached("10", "9") and version_reached("10", "10")
    assert not version_reached("9", "10")  # numerically, not as text
    assert version_reached("100", "99") and not version_reached("", "1")
    assert version_reached("anything", "")


def test_sync_view_states() -> None:
    now = [0.0]
    view = SyncView(("vmis", "pods"), clock=lambda: now[0], stale_after=5)
    assert not view.all_listed() and view.behind(("vmis",), "1") == ("vmis",)
    view.listed("vmis", "10")
    view.listed("pods", "12")
    assert view.all_listed() and view.behind(("vmis",), "10") == ()
    assert view.behind(("vmis",), "11") == ("vmis",)
    view.progressed("vmis", "11")
    assert view.behind(("vmis",), "11") == ()
    assert view.state["vmis"].lists == 0  # listed without a list begun: counted from relisting
    view.relisting("vmis")
    assert view.all_listed() and view.behind(("vmis",), "1") == ("vmis",)
    assert view.state["vmis"].lists == 1 and not view.synced("vmis")
    now[0] = 6
    assert view.stale() == ("vmis",)


# -- the property ---------------------------------------------------------------------------------

STEP = st.one_of(
    st.tuples(st.sampled_from(["page", "pages"]), st.sampled_from(RESOURCES)),
    st.tuples(st.sampled_from(["expire", "drop"]), st.sampled_from(RESOURCES)),
    st.tuples(st.just("delete-vmi"), st.sampled_from(["vm-c", "vm-lic"])),
)


def test_a_view_is_moving_while_its_watch_brings_events() -> None:
    now = [100.0]
    view: SyncView[str] = SyncView(("vmis",), clock=lambda: now[0])
    view.progressed("vmis", "5")
    assert not view.moving("vmis", within=5.0)  # not synced: a list is running
    view.listed("vmis", "10")
    assert not view.moving("vmis", within=5.0)  # listed, no event since
    now[0] = 101.0
    view.progressed("vmis", "12")
    now[0] = 106.0
    assert view.moving("vmis", within=5.0)
    now[0] = 106.5
    assert not view.moving("vmis", within=5.0)
    view.progressed("vmis", "11")  # older than the view: it does not move it
    assert not view.moving("vmis", within=5.0)


def test_every_write_is_one_a_complete_view_also_writes() -> None:
    seen: Counter[str] = Counter()
    world0 = left_behind()

    @settings(
        max_examples=60,
        deadline=None,
        derandomize=True,  # the same schedules on every run: reproducible, and the branches reached
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(st.lists(STEP, max_size=40))
    # Hypothesis derives its derandomized schedules from this function's source, so an edit of it
    # draws others: this schedule reaches a deferred deletion whatever they are (the three
    # Namespaces listed, then re-listing behind the gate while the others list for the first time).
    @example(
        [("page", "namespaces")] * 3
        + [("expire", "namespaces")]
        + [("pages", s) for s in RESOURCES if s != "namespaces"]
    )
    def check(steps: list[tuple[str, str]]) -> None:
        async def scenario() -> None:
            kube = GatedKube(world0, gated=RESOURCES)
            reconciler = make(kube)
            truth = list(world0)
            allowed = await complete_view_writes(truth)
            task = asyncio.create_task(reconciler.run())
            await turns()
            worker = reconciler.worker
            assert worker is not None
            may_delete = worker._may_delete

            def counted(*args: Any, **kwargs: Any) -> bool:
                go = may_delete(*args, **kwargs)
                seen["deletion deferred"] += int(not go)
                return go

            store_complete = worker.store_complete

            def held_back() -> bool:
                complete = store_complete()
                seen["pass held back on a partial view"] += int(
                    not complete and bool(reconciler.store.dirty)
                )
                return complete

            worker._may_delete = counted  # type: ignore[method-assign]
            worker.store_complete = held_back  # type: ignore[method-assign]
            for step, arg in steps:
                if step in ("page", "pages"):
                    kube.release(arg, 1 if step == "page" else 20)  # type: ignore[arg-type]
                elif step == "delete-vmi":
                    kube.remove("VirtualMachineInstance", "tenant-a", name=arg)
                    truth = [o for o in truth if o["metadata"].get("name") != arg]
                    allowed |= await complete_view_writes(truth)
                else:
                    kube.fail_watch(arg, 410 if step == "expire" else 0)  # type: ignore[arg-type]
                await turns()
            kube.open_all()
            await settle(reconciler, kube)
            reconciler.stop()
            await asyncio.wait_for(task, 5)
            issued = normalised(kube.writes)
            assert kube.early_writes == []
            assert issued <= allowed, issued - allowed
            seen["deletion issued"] += int(any(w[0] == "delete-secret" for w in issued))
            seen["vmi deleted mid-run"] += int(any(s == "delete-vmi" for s, _ in steps))

        asyncio.run(asyncio.wait_for(scenario(), 60))

    check()
    reached = (
        "pass held back on a partial view",
        "deletion deferred",
        "deletion issued",
        "vmi deleted mid-run",
    )
    assert all(seen[k] > 0 for k in reached), seen
