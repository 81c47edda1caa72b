"""A class write says what it did: written with the version the server returned, a conflict with
the version it was pinned to, gone, or failed; it never backs off, waits or retries itself."""

from __future__ import annotations

import asyncio

from gpuclass.reconciler.api.fake import MemoryKube
from gpuclass.reconciler.api.port import ApiError
from gpuclass.reconciler.classwrites import ClassWriter
from gpuclass.reconciler.events import EventRecorder
from gpuclass.reconciler.metrics import ReconcilerMetrics
from gpuclass.reconciler.outcomes import Conflicted, Failed, Gone, Watched, WriterDeps, Written
from gpuclass.reconciler.state.inuse import FinalizerChange
from gpuclass.reconciler.state.store import ClusterStore
from gpuclass.shared.core.base import names
from tests.builders import gpuclass

R = "example.com/gpu"
STATUS = {"free": 1}


def setup(*, dry_run: bool = False) -> tuple[MemoryKube, ClusterStore, ClassWriter]:
    kube = MemoryKube([gpuclass("c", R)])
    store = ClusterStore()
    store.upsert("gpuclasses", kube.store[names.KIND][("", "c")])
    events = EventRecorder(kube, store, now=lambda: "NOW", instance="test")
    deps = WriterDeps(api=kube, events=events, metrics=ReconcilerMetrics(), dry_run=dry_run)
    return kube, store, ClassWriter(deps)


def test_a_status_write_returns_the_version_the_store_must_reach() -> None:
    kube, store, writer = setup()
    outcome = asyncio.run(writer.write_status(store.classes["c"], status=STATUS, patch=STATUS))
    held = kube.store[names.KIND][("", "c")]["metadata"]["resourceVersion"]
    assert outcome == Written(("status", "c"), Watched("gpuclasses", ("", "c")), held)
    assert store.classes["c"].raw_status is None  # the store is the watch's: not written here


def test_a_dry_run_write_waits_for_nothing() -> None:
    from gpuclass.reconciler.api.dryrun import RecordingKube

    kube, store, writer = setup(dry_run=True)
    writer.deps = WriterDeps(
        api=RecordingKube(kube, forward=False),
        events=writer.deps.events,
        metrics=writer.deps.metrics,
        dry_run=True,
    )
    outcome = asyncio.run(writer.write_status(store.classes["c"], status=STATUS, patch=STATUS))
    assert outcome == Written(("status", "c"))


def test_refusals_are_outcomes_not_retries() -> None:
    kube, store, writer = setup()
    entry = store.classes["c"]
    kube.apply(gpuclass("c", R, generation=2))  # the server moves past the stored version
    conflict = asyncio.run(writer.write_status(entry, status=STATUS, patch=STATUS))
    assert conflict == Conflicted(
        ("status", "c"), Watched("gpuclasses", ("", "c")), entry.resource_version
    )
    kube.errors["patch_class_status"] = [ApiError(403, "Forbidden")]
    failed = asyncio.run(writer.write_status(entry, status=STATUS, patch=STATUS))
    assert isinstance(failed, Failed) and failed.error.forbidden and failed.report is None
    kube.remove(names.KIND, "", name="c")
    change = FinalizerChange("add", (names.IN_USE_FINALIZER,))
    assert asyncio.run(writer.write_finalizers(entry, change)) == Gone(("finalizer", "c"))
    assert kube.calls.get("patch_class_finalizers") == 1  # tried once, never again by itself
