"""The whole loop against a fake at the adapter seam (`reconciler.api.fake.MemoryKube`).

The fake checks what the API server checks for our writes (resourceVersion
preconditions, AlreadyExists, the Secret admission policy) and takes injected
failures, so these tests cover the loop's contract: one write per change and none
in steady state, 410/dropped watch re-lists, the Lease gating every write, license
copies, foreign Secrets, refused writes without a retry storm, the in-use
finalizer, and read-your-writes: the watch is the view's only writer, and an object
the worker wrote (or met a 409 on) waits until the watch brings it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from gpuclass.reconciler.api.dryrun import RecordingKube
from gpuclass.reconciler.api.fake import Change, MemoryKube
from gpuclass.reconciler.api.port import ApiError
from gpuclass.reconciler.leader import AlwaysLeader, Leadership
from gpuclass.reconciler.manager import Manager
from gpuclass.reconciler.settings import ReconcilerSettings
from gpuclass.reconciler.state.licenses import copy_digest, parse_record
from gpuclass.reconciler.state.resources import Resource
from gpuclass.shared.core.base import names
from gpuclass.shared.core.model.secrets import Redacted
from tests.builders import (
    TOKEN,
    gpuclass,
    kubevirt,
    launcher,
    namespace,
    node,
    pod,
    secret,
    vmi,
)

R = "example.com/gpu"
LIC = "example.com/lic"
COPY = names.license_copy_name("lic")
MANAGED = {names.MANAGED_BY_LABEL: names.MANAGED_BY_VALUE}


def world() -> list[dict[str, Any]]:
    return [
        kubevirt(R, LIC),
        gpuclass("c", R),
        gpuclass("lic", LIC, license="src"),
        node("n1", {R: 4, LIC: 4}),
        pod("p", "n1", {R: 1}),
        secret("src"),
        namespace("tenant-root"),
        namespace("tenant-a", entitled=True),
        namespace("tenant-c"),
    ]


def settings(**overrides: Any) -> ReconcilerSettings:
    values: dict[str, Any] = {
        "coalesce_seconds": 0.0,
        "catch_up_seconds": 0.0,  # a deletion behind a view re-lists at once (below: the wait)
        "leader_elect": False,
        "vgpu_entitled": True,
    }
    return ReconcilerSettings(**{**values, **overrides})


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)


class Running:
    """A reconciler running against `kube` for the duration of a test."""

    def __init__(
        self, kube: Any, *, leadership: Leadership | None = None, **overrides: Any
    ) -> None:
        self.kube = kube
        self.reconciler = Manager(
            settings(**overrides),
            api=kube,
            leadership=leadership or AlwaysLeader(),
            serve_http=False,
        )
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Running:
        self.task = asyncio.create_task(self.reconciler.run())
        await until(lambda: self.reconciler.ready)
        await self.settle()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.reconciler.stop()
        assert self.task is not None
        await asyncio.wait_for(self.task, 5)

    async def settle(self, quiet: int = 5) -> None:
        """Until the worker has had nothing to do for a few loop turns."""
        worker = self.reconciler.worker
        calm = 0
        for _ in range(500):
            await asyncio.sleep(0.01)
            busy = bool(self.reconciler.store.dirty) or (
                worker is not None and worker._wake.is_set()
            )
            calm = 0 if busy else calm + 1
            if calm >= quiet:
                return
        raise AssertionError("the worker never settled")

    def status(self, name: str) -> dict[str, Any]:
        return dict(self.kube.store[names.KIND][("", name)].get("status") or {})

    def writes(self, kind: str = "status") -> list[Any]:
        return [w for k, w in self.kube.writes if k == kind]

    def sample(self, metric: str, **labels: str) -> float | None:
        value = self.reconciler.metrics.registry.get_sample_value(metric, labels)
        return value


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), 30))


# -- statuses ------------------------------------------------------------------------------------


def test_first_sync_writes_each_status_once_then_nothing() -> None:
    async def scenario() -> None:
        kube = MemoryKube(world())
        async with Running(kube) as r:
            assert sorted(w["name"] for w in r.writes()) == ["c", "lic"]
            assert r.status("c")["free"] == 3
            assert r.status("lic")["conditions"][3] == {
                **r.status("lic")["conditions"][3],
                "status": "True",
            }
            ready_events = [e["reason"] for e in kube.events]
            assert ready_events == ["Ready", "Ready"]
            # unrelated churn: plain pods, a node label, a namespace without effect, a pod status update
            for i in range(20):
                kube.apply(pod(f"web-{i}", "n1", {}))
            labelled = node("n1", {R: 4, LIC: 4})
            labelled["metadata"]["labels"]["zone"] = "a"  # beside virt-handler's label
            kube.apply(labelled)
            kube.apply(namespace("other"))
            running = pod("p", "n1", {R: 1})
            running["status"]["podIP"] = "10.0.0.1"
            kube.apply(running)
            await r.settle()
            assert len(r.writes()) == 2
            assert r.sample("gpuclass_status_writes_total") == 2

    run(scenario)


def test_pod_event_moves_free_with_one_write() -> None:
    async def scenario() -> None:
        kube = MemoryKube(world())
        async with Running(kube) as r:
            kube.apply(pod("q", "n1", {R: 2}))
            await r.settle()
            assert r.status("c")["free"] == 1
            assert [w["name"] for w in r.writes()][2:] == ["c"]
            kube.remove("Pod", "tenant-a", name="q")
            await r.settle()
            assert r.status("c")["free"] == 3
            assert r.sample("gpuclass_free_units", **{"class": "c"}) == 3

    run(scenario)


def test_hand_edited_status_is_repaired() -> None:
    async def scenario() -> None:
        kube = MemoryKube(world())
        async with Running(kube) as r:
            edited = kube.store[names.KIND][("", "c")]
            kube.apply({**edited, "status": {**edited["status"], "free": 999, "extra": "x"}})
            await r.settle()
            assert r.status("c")["free"] == 3
            assert "extra" not in r.status("c")

    run(scenario)


def test_failed_write_backs_off_and_recovers() -> None:
    async def scenario() -> None:
        kube = MemoryKube(world())
        async with Running(kube) as r:
            r.reconciler.worker.backoff.base = 0.05  # type: ignore[union-attr]
            kube.errors["patch_class_status"] = [ApiError(500, "InternalError")] * 2
            kube.apply(pod("q", "n1", {R: 2}))
            await until(lambda: r.status("c")["free"] == 1)
            assert r.sample("gpuclass_reconcile_total", result="error") == 2

    run(scenario)


# -- read-your-writes --------------------------------------------------------------------------------


class HeldWatch(MemoryKube):
    """MemoryKube whose watch of one source holds its events while `holding`: a slow or stuck watch,
    so the view stays behind the server until the test lets the events through."""

    def __init__(self, objects: list[dict[str, Any]], *, source: Resource) -> None:
        super().__init__(objects)
        self.held_source, self.holding = source, False
        self.held: list[tuple[asyncio.Queue[Any], Change]] = []
        self.record_writes: list[tuple[str, str]] = []
        """Record ConfigMap writes: (create or replace, the resourceVersion it is pinned to)."""

    def _offer(self, source: Resource, queue: asyncio.Queue[Any], change: Change) -> None:
        if self.holding and source == self.held_source:
            self.held.append((queue, change))
        else:
            super()._offer(source, queue, change=change)

    def let_through(self) -> None:
        self.holding = False
        held, self.held = self.held, []
        for queue, change in held:
            super()._offer(self.held_source, queue, change=change)

    async def create_config_map(
        self, namespace: str, body: dict[str, Any]
    ) -> dict[str, Any] | None:
        self.record_writes.append(("create", body["metadata"].get("resourceVersion", "")))
        return await super().create_config_map(namespace, body)

    async def replace_config_map(
        self, namespace: str, name: str, body: dict[str, Any]
    ) -> dict[str, Any] | None:
        self.record_writes.append(("replace", body["metadata"].get("resourceVersion", "")))
        return await super().replace_config_map(namespace, name, body=body)


def stored_version(kube: MemoryKube, kind: str, key: tuple[str, str]) -> str:
    return str(kube.store[kind][key]["metadata"]["resourceVersion"])


async def meanwhile() -> None:
    """Time for the worker to act if it would (it acts within milliseconds of an event), before a
    test asserts that it did not. `Running.settle` cannot tell: it waits for the dirty marks to be
    worked off, and work waiting for the view leaves none."""
    await asyncio.sleep(0.3)


def test_only_the_watch_moves_the_view_never_a_write_response() -> None:
    """The status write's response is not put into the view (so a late one cannot roll it back):
    the class changes in the view when the watch brings it, and then to what the server holds."""

    async def scenario() -> None:
        kube = HeldWatch(world(), source="gpuclasses")
        async with Running(kube) as r:
            state = r.reconciler.store
            before = state.classes["c"]
            kube.holding = True
            kube.apply(pod("q", "n1", {R: 2}))
            await until(lambda: r.status("c")["free"] == 1)  # written on the server
            await meanwhile()
            assert state.classes["c"] == before
            kube.let_through()
            await r.settle()
            stored = kube.store[names.KIND][("", "c")]
            assert state.classes["c"].resource_version == stored["metadata"]["resourceVersion"]
            assert state.classes["c"].raw_status == stored["status"]

    run(scenario)


def test_a_written_class_waits_until_the_watch_brings_the_written_version() -> None:
    async def scenario() -> None:
        kube = HeldWatch(world(), source="gpuclasses")
        async with Running(kube) as r:
            kube.holding = True
            kube.apply(pod("q", "n1", {R: 2}))
            await until(lambda: r.status("c")["free"] == 1)
            kube.apply(pod("q2", "n1", {R: 1}))  # c changes again while the view lacks the write
            await meanwhile()
            assert len(r.writes()) == 3  # c and lic at start, then c once
            await until(lambda: (r.sample("gpuclass_reconcile_total", result="deferred") or 0) >= 1)
            kube.let_through()
            await r.settle()
            assert len(r.writes()) == 4
            assert r.status("c")["free"] == 0

    run(scenario)


def test_a_conflict_waits_for_a_newer_class_then_writes_once() -> None:
    """A 409 is neither retried at once nor read back with a GET: the class waits until the watch
    brings a version past the one the write was pinned to, then is written once."""

    async def scenario() -> None:
        kube = HeldWatch(world(), source="gpuclasses")
        async with Running(kube) as r:
            kube.holding = True
            labelled = kube.store[names.KIND][("", "c")]
            kube.apply({**labelled, "metadata": {**labelled["metadata"], "labels": {"x": "y"}}})
            kube.apply(pod("q", "n1", {R: 2}))  # decided on the view's older class: 409
            await until(lambda: kube.calls["patch_class_status"] >= 3)
            kube.apply(pod("q2", "n1", {R: 1}))
            await meanwhile()
            assert kube.calls["patch_class_status"] == 3 and "get_class" not in kube.calls
            assert r.status("c")["free"] == 3
            kube.let_through()
            await r.settle()
            assert kube.calls["patch_class_status"] == 4
            assert r.status("c")["free"] == 0

    run(scenario)


def test_a_view_that_never_catches_up_is_relisted_after_the_interval() -> None:
    async def scenario() -> None:
        kube = HeldWatch(world(), source="gpuclasses")
        async with Running(kube) as r:
            assert r.reconciler.worker is not None
            r.reconciler.worker.relist_interval = 2.0
            kube.holding = True  # the class watch is stuck: it brings nothing from now on
            kube.apply(pod("q", "n1", {R: 2}))
            await until(lambda: r.status("c")["free"] == 1)
            kube.apply(pod("q2", "n1", {R: 1}))
            await meanwhile()
            assert r.status("c")["free"] == 1
            assert r.sample("gpuclass_watch_restarts_total", resource="gpuclasses") is None
            await until(
                lambda: r.sample("gpuclass_watch_restarts_total", resource="gpuclasses") == 1
            )
            await until(lambda: r.status("c")["free"] == 0)
            assert len(r.writes()) == 4

    run(scenario)


def test_the_second_record_write_of_a_pass_is_pinned_to_the_first_ones_version() -> None:
    """Within one pass the record's second write uses the version its first returned, not the view
    (whose watch has not brought the first write yet)."""

    async def scenario() -> None:
        kube = HeldWatch(world(), source="copy-record")
        async with Running(kube) as r:
            kube.holding = True
            started(kube)
            await until(lambda: len(kube.record_writes) == 2)
            await meanwhile()
            key = ("cozy-system", names.COPY_RECORD_NAME)
            first = next(c.version for c in kube.history if c.kind == "ConfigMap" and not c.old)
            assert r.reconciler.store.copy_records == {}  # the view has seen neither write
            assert kube.record_writes == [("create", ""), ("replace", str(first))]
            assert record(kube) == {("tenant-a", COPY): copy_digest_of(kube, "tenant-a")}
            kube.let_through()
            await r.settle()
            assert r.reconciler.store.copy_record.resource_version == stored_version(
                kube, "ConfigMap", key
            )
            assert len(kube.record_writes) == 2

    run(scenario)


# -- watches ---------------------------------------------------------------------------------------


def test_410_relists_from_scratch() -> None:
    async def scenario() -> None:
        kube = MemoryKube(world())
        async with Running(kube) as r:
            # a deletion the watch never reports: only a re-list can see it
            del kube.store["Pod"][("tenant-a", "p")]
            kube.expire_watches()
            await until(lambda: ("tenant-a", "p") not in r.reconciler.store.pods)
            await r.settle()
            assert r.status("c")["free"] == 4
            assert r.sample("gpuclass_watch_restarts_total", resource="pods") == 1

    run(scenario)


def test_watch_from_expired_version_relists() -> None:
    async def scenario() -> None:
        kube = MemoryKube(world())
        async with Running(kube) as r:
            kube.apply(pod("q", "n1", {R: 1}))
            await r.settle()
            kube.oldest = kube.version + 1  # history compacted: resuming at our version is 410
            kube.end_watches()  # the server's timeout: the pod watch resumes from its last version
            kube.apply(pod("q2", "n1", {R: 1}))
            await until(lambda: r.status("c").get("free") == 1)
            assert r.sample("gpuclass_watch_restarts_total", resource="pods") == 1

    run(scenario)


def test_dropped_watch_relists() -> None:
    async def scenario() -> None:
        kube = MemoryKube(world())
        async with Running(kube) as r:
            lists = kube.calls["list"]
            kube.drop_watches()
            kube.apply(pod("q", "n1", {R: 2}))
            await until(lambda: r.status("c").get("free") == 1)
            await until(lambda: kube.calls["list"] == lists + 8)
            assert r.sample("gpuclass_watch_restarts_total", resource="vmis") == 1

    run(scenario)


def test_list_failure_backs_off_then_syncs() -> None:
    async def scenario() -> None:
        kube = MemoryKube(world())
        kube.errors["list"] = [ApiError(0, "ConnectionError", message="refused")]
        async with Running(kube) as r:
            assert r.reconciler.ready
            assert r.status("c")["free"] == 3

    run(scenario)


# -- the Lease -------------------------------------------------------------------------------------


class Elected(Running):
    def __init__(self, kube: MemoryKube, identity: str) -> None:
        super().__init__(
            kube,
            leader_elect=True,
            pod_name=identity,
            lease_duration_seconds=0.6,
            renew_deadline_seconds=0.4,
            retry_period_seconds=0.05,
        )
        self.reconciler.leadership = None


def test_lease_loss_stops_writes_at_once() -> None:
    async def scenario() -> None:
        kube = MemoryKube(world())
        key = ("cozy-system", "gpuclass-reconciler")

        async def other_replica_holds(stop: asyncio.Event) -> None:
            beat = 0
            while not stop.is_set():
                lease = kube.store["Lease"][key]
                beat += 1
                kube.apply(
                    {
                        **lease,
                        "spec": {
                            **lease["spec"],
                            "holderIdentity": "other",
                            "renewTime": str(beat),
                        },
                    }
                )
                await asyncio.sleep(0.05)

        async with Elected(kube, "me") as r:
            elected = r.reconciler.elector
            assert elected is not None
            await until(elected.is_leader)
            await r.settle()
            written = len(r.writes())
            stop = asyncio.Event()
            other = asyncio.create_task(other_replica_holds(stop))
            await until(lambda: not elected.is_leader())
            assert r.sample("gpuclass_leader") == 0
            kube.apply(pod("q", "n1", {R: 2}))
            await asyncio.sleep(0.3)
            await r.settle()
            assert len(r.writes()) == written  # following: no write
            assert (
                r.sample("gpuclass_free_units", **{"class": "c"}) == 1
            )  # metrics still follow the cluster
            stop.set()
            await other
            current = kube.store["Lease"][key]
            kube.apply(
                {**current, "spec": {**current["spec"], "holderIdentity": None}}
            )  # the other released
            await until(
                lambda: r.status("c").get("free") == 1
            )  # leader again: held-back write happens
            assert r.sample("gpuclass_leader") == 1

    run(scenario)


def test_renew_failures_depose_before_the_lease_expires() -> None:
    async def scenario() -> None:
        kube = MemoryKube(world())
        async with Elected(kube, "me") as r:
            elected = r.reconciler.elector
            assert elected is not None
            await until(elected.is_leader)
            kube.errors["get_lease"] = [ApiError(0, "ConnectionError")] * 1000
            await until(lambda: not elected.is_leader())
            kube.apply(pod("q", "n1", {R: 2}))
            await r.settle()
            assert r.status("c")["free"] == 3  # no write while deposed
            kube.errors["get_lease"] = []
            await until(lambda: r.status("c").get("free") == 1)

    run(scenario)


def test_two_replicas_never_both_lead_and_hand_over_on_stop() -> None:
    async def scenario() -> None:
        kube = MemoryKube(world())
        first, second = Elected(kube, "one"), Elected(kube, "two")
        await first.__aenter__()
        await second.__aenter__()
        try:
            leaders: list[int] = []
            for _ in range(60):
                both = [r.reconciler.elector.is_leader() for r in (first, second)]  # type: ignore[union-attr]
                assert not all(both)
                leaders.append(sum(both))
                await asyncio.sleep(0.02)
            assert leaders[-1] == 1
            holder = first if first.reconciler.elector.is_leader() else second  # type: ignore[union-attr]
            other = second if holder is first else first
            await holder.__aexit__()
            lease = kube.store["Lease"][("cozy-system", "gpuclass-reconciler")]
            assert not lease["spec"]["holderIdentity"]  # released on stop
            await until(lambda: other.reconciler.elector.is_leader(), timeout=2)  # type: ignore[union-attr]
        finally:
            for r in (first, second):
                if r.task is not None and not r.task.done():
                    await r.__aexit__()

    run(scenario)


# -- license copies ----------------------------------------------------------------------------------


def licensed_vmi(namespace_: str = "tenant-a", name: str = "vm") -> dict[str, Any]:
    return vmi(name, namespace_, classes=["lic"], devices=[LIC], license_class="lic")


def started(kube: MemoryKube, namespace_: str = "tenant-a", name: str = "vm") -> None:
    """The licensed VMI and its launcher Pod, bound to a node: the VMI is really starting."""
    kube.apply(licensed_vmi(namespace_, name))
    kube.apply(launcher(name, namespace_, license_class="lic"))


def record(kube: MemoryKube) -> dict[Any, str]:
    return parse_record(kube.store["ConfigMap"].get(("cozy-system", names.COPY_RECORD_NAME)))


def test_license_copy_created_updated_deleted() -> None:
    async def scenario() -> None:
        kube = MemoryKube(world())
        async with Running(kube) as r:
            started(kube)
            started(kube, "tenant-c")  # not entitled: no copy there
            await r.settle()
            copy = kube.store["Secret"][("tenant-a", COPY)]
            assert copy["metadata"]["labels"] == MANAGED
            assert copy["data"][names.TOKEN_KEY] == TOKEN
            assert ("tenant-c", COPY) not in kube.store["Secret"]
            kube.apply(secret("src", data={names.TOKEN_KEY: "bmV3"}))
            await r.settle()
            assert kube.store["Secret"][("tenant-a", COPY)]["data"][names.TOKEN_KEY] == "bmV3"
            kube.apply(gpuclass("lic", LIC, license="src", feature_type=4))
            await r.settle()
            assert (
                kube.store["Secret"][("tenant-a", COPY)]["data"][names.GRIDD_KEY]
                == "RmVhdHVyZVR5cGU9NAo="
            )
            assert record(kube) == {("tenant-a", COPY): copy_digest_of(kube, "tenant-a")}
            kube.remove("VirtualMachineInstance", "tenant-a", name="vm")
            await r.settle()
            assert ("tenant-a", COPY) not in kube.store["Secret"]
            assert record(kube) == {}
            assert [k for k, _ in kube.writes if "secret" in k] == [
                "create-secret",
                "patch-secret",
                "patch-secret",
                "delete-secret",
            ]

    run(scenario)


def copy_digest_of(kube: MemoryKube, namespace_: str) -> str:
    data = kube.store["Secret"][(namespace_, COPY)]["data"]
    return copy_digest({k: Redacted(v) for k, v in data.items()})


def test_no_copy_until_the_launcher_pod_is_bound_and_none_after_it_stops() -> None:
    """A licensed VMI whose launcher Pod never gets a node (pinned to a node that does not
    exist) gets no token; once its Pod is bound it does; once the Pod ends, the copy goes."""

    async def scenario() -> None:
        kube = MemoryKube(world())
        async with Running(kube) as r:
            kube.apply(licensed_vmi())
            kube.apply(launcher("vm", "tenant-a", None, license_class="lic"))  # not scheduled
            await r.settle()
            assert ("tenant-a", COPY) not in kube.store["Secret"]
            assert not kube.calls.get("create_secret")
            kube.apply(launcher("vm", "tenant-a", "n1", license_class="lic"))  # bound
            await r.settle()
            assert ("tenant-a", COPY) in kube.store["Secret"]
            kube.apply(launcher("vm", "tenant-a", "n1", license_class="lic", phase="Succeeded"))
            await r.settle()
            assert ("tenant-a", COPY) not in kube.store["Secret"]
            assert record(kube) == {}

    run(scenario)


def test_a_labelled_copy_from_before_the_record_is_adopted_not_reported() -> None:
    """An upgrade: copies written before the record existed are taken over, not reported."""

    async def scenario() -> None:
        old = secret(COPY, "tenant-a", data={names.TOKEN_KEY: "b2xk", names.GRIDD_KEY: "eA=="})
        old["metadata"]["labels"] = dict(MANAGED)
        kube = MemoryKube([*world(), old])
        async with Running(kube) as r:
            started(kube)
            await r.settle()
            assert kube.store["Secret"][("tenant-a", COPY)]["data"][names.TOKEN_KEY] == TOKEN
            assert record(kube) == {("tenant-a", COPY): copy_digest_of(kube, "tenant-a")}
            assert not [e for e in kube.events if e["reason"] == "ForeignLicenseSecret"]

    run(scenario)


def test_a_copy_its_tenant_edited_is_repaired_on_the_next_update() -> None:
    """A key, an annotation or a finalizer a tenant adds to its copy would make every later
    write of the copy refused by the policy; the update sets them back instead."""

    async def scenario() -> None:
        kube = MemoryKube(world())
        async with Running(kube) as r:
            started(kube)
            await r.settle()
            edited = kube.store["Secret"][("tenant-a", COPY)]
            edited = {**edited, "data": {**edited["data"], "extra": "eA=="}}
            edited["metadata"] = {
                **edited["metadata"],
                "annotations": {"tenant.example/note": "mine"},
                "finalizers": ["tenant.example/keep"],
            }
            kube.apply(edited)
            kube.apply(secret("src", data={names.TOKEN_KEY: "bmV3"}))
            await r.settle()
            stored = kube.store["Secret"][("tenant-a", COPY)]
            assert set(stored["data"]) == {names.TOKEN_KEY, names.GRIDD_KEY}
            assert stored["data"][names.TOKEN_KEY] == "bmV3"
            assert not stored["metadata"]["annotations"] and not stored["metadata"]["finalizers"]

    run(scenario)


def test_a_full_record_stops_new_copies_but_not_deletions(monkeypatch: Any) -> None:
    monkeypatch.setattr("gpuclass.reconciler.copies.MAX_RECORD_BYTES", 80)  # one entry fits

    async def scenario() -> None:
        kube = MemoryKube(world())
        async with Running(kube) as r:
            started(kube)  # recorded: about 60 bytes
            await r.settle()
            assert ("tenant-a", COPY) in kube.store["Secret"]
            started(kube, "tenant-root")  # a second entry no longer fits
            await r.settle()
            assert ("tenant-root", COPY) not in kube.store["Secret"]
            kube.remove("Pod", "tenant-a", name="virt-launcher-vm-x1")  # the first VM stops
            await r.settle()
            assert ("tenant-a", COPY) not in kube.store["Secret"]  # deleted although full
            assert set(record(kube)) == {("tenant-root", COPY)}  # and the room it left is used

    run(scenario)


def test_a_copy_removed_by_hand_comes_back_on_resync() -> None:
    async def scenario() -> None:
        kube = MemoryKube(world())
        async with Running(kube) as r:
            started(kube)
            await r.settle()
            kube.remove("Secret", "tenant-a", name=COPY)  # the tenant deletes its copy
            await r.settle()
            assert ("tenant-a", COPY) not in kube.store["Secret"]  # nothing watches it ...
            r.reconciler.store.mark_all()  # ... until the periodic resync
            assert r.reconciler.worker is not None
            r.reconciler.worker.wake()
            await r.settle()
            assert kube.store["Secret"][("tenant-a", COPY)]["data"][names.TOKEN_KEY] == TOKEN

    run(scenario)


def test_entitlement_loss_deletes_copy() -> None:
    async def scenario() -> None:
        kube = MemoryKube(world())
        async with Running(kube) as r:
            started(kube)
            await r.settle()
            assert ("tenant-a", COPY) in kube.store["Secret"]
            kube.apply(namespace("tenant-a"))
            await r.settle()
            assert ("tenant-a", COPY) not in kube.store["Secret"]

    run(scenario)


def test_foreign_secret_left_alone_with_an_event() -> None:
    async def scenario() -> None:
        foreign = secret(COPY, "tenant-a", data={"mine": "eA=="})
        kube = MemoryKube([*world(), foreign])
        async with Running(kube) as r:
            started(kube)
            await r.settle()
            for i in range(10):  # more reasons to look again: still no storm
                started(kube, name=f"vm-{i}")
            await r.settle()
            stored = kube.store["Secret"][("tenant-a", COPY)]
            assert stored["data"] == {"mine": "eA=="} and "labels" not in stored["metadata"]
            assert [e["reason"] for e in kube.events].count("ForeignLicenseSecret") == 1
            assert kube.calls.get("create_secret", 0) == 1
            assert kube.calls.get("patch_secret", 0) == 1  # its label test fails: not ours
            assert not kube.calls.get("delete_secret")
            assert record(kube) == {}  # the refused pending entry is not kept

    run(scenario)


def test_policy_refusal_is_an_event_without_retry_storm() -> None:
    async def scenario() -> None:
        kube = MemoryKube(world())
        kube.errors["create_secret"] = [
            ApiError(403, "Forbidden", message="denied by ValidatingAdmissionPolicy")
        ] * 100
        async with Running(kube) as r:
            started(kube)
            await r.settle()
            for i in range(20):
                kube.apply(
                    namespace("tenant-a", entitled=True)
                    | {
                        "metadata": {
                            "name": "tenant-a",
                            "labels": {names.VGPU_ENTITLEMENT_LABEL: "true", "n": str(i)},
                        }
                    }
                )
                started(kube, name=f"vm-{i}")
                await asyncio.sleep(0.01)
            await r.settle()
            assert kube.calls["create_secret"] == 1
            refused = [e for e in kube.events if e["reason"] == "LicenseCopyRefused"]
            assert len(refused) == 1 and "tenant-a/" + COPY in refused[0]["message"]
            assert TOKEN not in str(kube.events)

    run(scenario)


# -- the in-use finalizer -------------------------------------------------------------------------------


def finalizers(kube: MemoryKube, name: str) -> list[str]:
    obj = kube.store[names.KIND].get(("", name))
    return list(obj["metadata"].get("finalizers") or []) if obj else []


def test_finalizer_added_while_used_and_removed_after() -> None:
    async def scenario() -> None:
        kube = MemoryKube(world())
        async with Running(kube) as r:
            kube.apply(vmi("annotated-only", "tenant-a", classes=["c"]))
            await r.settle()
            assert finalizers(kube, "c") == []
            kube.apply(vmi("vm", "tenant-a", classes=["c"], devices=[R]))
            await r.settle()
            assert finalizers(kube, "c") == [names.IN_USE_FINALIZER]
            kube.remove("VirtualMachineInstance", "tenant-a", name="vm")
            await r.settle()
            assert finalizers(kube, "c") == []
            assert [w["finalizers"] for w in r.writes("finalizers")] == [
                [names.IN_USE_FINALIZER],
                [],
            ]

    run(scenario)


def test_a_finalizer_removal_waits_for_a_busy_watch_instead_of_relisting() -> None:
    """docs/reconciler.md, start-up step 4: a view behind the version a deletion needs, whose
    watch is moving, is given `--catch-up-seconds` to get there; the next event does, no list."""

    async def scenario() -> None:
        kube = MemoryKube(world())
        async with Running(kube, catch_up_seconds=30.0) as r:
            kube.apply(vmi("vm", "tenant-a", classes=["c"], devices=[R]))
            await r.settle()
            assert finalizers(kube, "c") == [names.IN_USE_FINALIZER]
            kube.remove("VirtualMachineInstance", "tenant-a", name="vm")
            worker = r.reconciler.worker
            assert worker is not None
            await until(lambda: "vmis" in worker._behind_since)  # the removal waits on the view
            assert finalizers(kube, "c") == [names.IN_USE_FINALIZER]
            kube.apply(vmi("other", "tenant-b", classes=["c"]))  # the next VMI event
            await until(lambda: finalizers(kube, "c") == [])
            assert r.sample("gpuclass_watch_restarts_total", resource="vmis") is None

    run(scenario)


def test_a_view_still_behind_after_the_catch_up_time_is_relisted() -> None:
    async def scenario() -> None:
        kube = MemoryKube(world())
        async with Running(kube, catch_up_seconds=0.5) as r:
            kube.apply(vmi("vm", "tenant-a", classes=["c"], devices=[R]))
            await r.settle()
            kube.remove("VirtualMachineInstance", "tenant-a", name="vm")
            await until(lambda: finalizers(kube, "c") == [])  # no further event: a list did it
            assert r.sample("gpuclass_watch_restarts_total", resource="vmis") == 1

    run(scenario)


def test_deleting_class_released_when_unused_and_series_removed() -> None:
    async def scenario() -> None:
        kube = MemoryKube(world())
        async with Running(kube) as r:
            kube.apply(vmi("vm", "tenant-a", classes=["c"], devices=[R]))
            await r.settle()
            held = kube.store[names.KIND][("", "c")]
            kube.apply(
                {
                    **held,
                    "metadata": {**held["metadata"], "deletionTimestamp": "2026-06-01T00:00:00Z"},
                }
            )
            await r.settle()
            assert finalizers(kube, "c") == [names.IN_USE_FINALIZER]  # still used: held
            kube.remove("VirtualMachineInstance", "tenant-a", name="vm")
            await r.settle()
            assert ("", "c") not in kube.store[names.KIND]  # released: the API server deleted it
            assert r.sample("gpuclass_free_units", **{"class": "c"}) is None
            assert (
                r.sample("gpuclass_condition", **{"class": "c", "type": "Ready", "status": "True"})
                is None
            )
            assert r.sample("gpuclass_free_units", **{"class": "lic"}) == 4

    run(scenario)


# -- dry run ---------------------------------------------------------------------------------------------


def test_dry_run_writes_nothing_but_records_everything() -> None:
    async def scenario() -> None:
        kube = MemoryKube(world())
        recorder = RecordingKube(kube, forward=False)
        async with Running(recorder) as r:
            started(kube)
            await r.settle()
            assert kube.writes == [] and kube.events == []
            kinds = sorted({w["kind"] for w in recorder.writes})
            assert kinds == ["copy-record", "event", "finalizers", "licence-copy", "status"]
            assert TOKEN not in str(recorder.writes)

    run(scenario)


def test_unexpected_error_does_not_end_the_worker() -> None:
    async def scenario() -> None:
        kube = MemoryKube(world())
        async with Running(kube) as r:
            kube.errors["patch_class_status"] = [RuntimeError("a bug")]  # type: ignore[list-item]
            kube.apply(pod("q", "n1", {R: 2}))
            await until(lambda: r.status("c")["free"] == 1)
            assert r.reconciler.healthy()

    run(scenario)


def test_renamed_class_keeps_its_finalizer_while_vms_admitted_under_the_old_name_run() -> None:
    async def scenario() -> None:
        kube = MemoryKube(world())
        async with Running(kube) as r:
            kube.apply(vmi("vm", "tenant-a", classes=["c"], devices=[R]))
            await r.settle()
            assert finalizers(kube, "c") == [names.IN_USE_FINALIZER]
            renamed = kube.store[names.KIND][("", "c")]
            renamed["spec"]["source"]["devicePlugin"]["resourceName"] = "example.com/gpu-v2"
            kube.apply(renamed)
            await r.settle()
            assert finalizers(kube, "c") == [names.IN_USE_FINALIZER]  # the VM keeps its class
            kube.remove("VirtualMachineInstance", "tenant-a", name="vm")
            await r.settle()
            assert finalizers(kube, "c") == []

    run(scenario)


def test_periodic_resync_repairs_what_no_event_marked() -> None:
    async def scenario() -> None:
        kube = MemoryKube(world())
        async with Running(kube, resync_seconds=0.3) as r:
            state = r.reconciler.store
            stored = kube.store[names.KIND][("", "c")]
            stored["status"] = {**stored["status"], "free": 999}  # behind the watch's back
            state.upsert("gpuclasses", stored)
            state.take_dirty()  # as if the mark had been lost
            await asyncio.sleep(0.5)
            await r.settle()
            assert r.status("c")["free"] == 3

    run(scenario)


def test_lease_timings_are_checked_as_client_go_does() -> None:
    import pytest
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="must be greater than --renew-deadline"):
        settings(leader_elect=True, lease_duration_seconds=10, renew_deadline_seconds=10)
    with pytest.raises(ValidationError, match=r"1.2 x --retry-period-seconds \(9\)"):
        settings(leader_elect=True, renew_deadline_seconds=10, retry_period_seconds=9)
    settings(leader_elect=True, renew_deadline_seconds=10, retry_period_seconds=8)
    settings(leader_elect=False, lease_duration_seconds=1, renew_deadline_seconds=10)


def test_dry_run_never_logs_or_counts_a_write(caplog: Any) -> None:
    async def scenario() -> None:
        kube = MemoryKube(world())
        async with Running(kube, dry_run=True) as r:
            kube.apply(licensed_vmi())
            kube.apply(vmi("vm-c", "tenant-a", classes=["c"], devices=[R]))
            await r.settle()
            assert kube.writes == []
            assert r.sample("gpuclass_status_writes_total") == 0
            assert r.sample("gpuclass_reconcile_total", result="written") is None
            assert (r.sample("gpuclass_reconcile_total", result="dry-run") or 0) >= 2
            for kind in ("finalizer", "licence-copy"):
                assert (
                    r.sample("gpuclass_object_writes_total", kind=kind, action="add", result="ok")
                    is None
                )
                assert (
                    r.sample(
                        "gpuclass_object_writes_total", kind=kind, action="create", result="ok"
                    )
                    is None
                )

    with caplog.at_level("INFO"):
        run(scenario)
    messages = [rec.getMessage() for rec in caplog.records]
    assert "dry run: not written" in messages
    assert not [m for m in messages if m.endswith("written") and not m.startswith("dry run")]
    assert not [m for m in messages if m.startswith(("license copy", "in-use finalizer"))]


class NeverLeader:
    def is_leader(self) -> bool:
        return False


def test_a_follower_never_advances_the_last_sync_timestamp() -> None:
    async def scenario() -> None:
        kube = MemoryKube(world())
        async with Running(kube, leadership=NeverLeader()) as r:
            kube.apply(pod("q", "n1", {R: 2}))
            await r.settle()
            assert r.reconciler.ready and kube.writes == []
            assert r.sample("gpuclass_last_sync_timestamp_seconds") == 0
        kube2 = MemoryKube(world())
        async with Running(kube2) as leader:
            assert (leader.sample("gpuclass_last_sync_timestamp_seconds") or 0) > 0

    run(scenario)


def test_the_reconciler_gives_free_heap_back_on_its_period(monkeypatch: Any) -> None:
    """`--memory-return-seconds` reaches the running loop (shared.process.memory); the soak
    found resident memory ratcheting up after re-lists without it."""
    from gpuclass.shared.process import memory

    trims: list[int] = []
    monkeypatch.setattr(memory, "_malloc_trim", lambda: lambda pad: trims.append(pad) or 1)

    async def scenario() -> None:
        async with Running(MemoryKube(world()), memory_return_seconds=0.01):
            await until(lambda: len(trims) >= 2)

    run(scenario)
    assert set(trims) == {0}
