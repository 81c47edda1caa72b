"""What the worker decides from the store: statuses, figures, in-use and license-copy plans.

The rules themselves are tested where they live (`tests/shared/core/status`, `test_inuse.py`,
`test_licenses.py`) and through the store's events (`test_store.py`); here, that the decisions
read the store's records and indexes, and never change the store.
"""

from __future__ import annotations

from typing import Any

from gpuclass.reconciler.state.decisions import (
    class_figures,
    class_status,
    copy_actions,
    in_use,
    status_context,
)
from gpuclass.reconciler.state.resources import Resource
from gpuclass.reconciler.state.store import ClusterStore
from gpuclass.shared.core.base import names
from tests.builders import gpuclass, kubevirt, launcher, namespace, node, pod, secret, vmi

R = "example.com/gpu"


def store_of(*events: tuple[Resource, dict[str, Any]]) -> ClusterStore:
    store = ClusterStore()
    store.upsert("kubevirts", kubevirt(R))
    for source, obj in events:
        store.upsert(source, obj)
    store.take_dirty()
    return store


def test_status_and_figures_are_the_core_computation_over_the_store() -> None:
    store = store_of(
        ("gpuclasses", gpuclass("c", R)),
        ("nodes", node("n1", {R: 4})),
        ("pods", pod("p", "n1", {R: 1})),
    )
    context = status_context(store)
    status = class_status(store, "c", context=context, now="NOW")
    assert (status["free"], status["maxFreePerNode"], status["maxUnitsPerNode"]) == (3, 3, 4)
    figures = class_figures(store, "c", context=context)
    assert (figures.free, figures.max_free_per_node) == (3, 3)
    assert not store.dirty  # deciding marks nothing


def test_in_use_follows_the_vmis_that_select_the_class() -> None:
    store = store_of(("gpuclasses", gpuclass("c", R)), ("gpuclasses", gpuclass("d", R)))
    used = vmi("v1", "tenant-a", classes=["c"], devices=[R])
    store.upsert("vmis", used)
    assert in_use(store, "c") and not in_use(store, "d")
    assert not in_use(store, "absent")
    store.delete("vmis", used)
    assert not in_use(store, "c")


def test_copy_actions_plan_against_the_stored_record() -> None:
    store = store_of(
        ("gpuclasses", gpuclass("c", R, license="src")),
        ("licence-secrets", secret("src")),
        ("namespaces", namespace("tenant-a", entitled=True)),
        ("vmis", vmi("v1", "tenant-a", classes=["c"], devices=[R], license_class="c")),
        ("pods", launcher("v1", "tenant-a", license_class="c", phase="Running")),
    )
    assert [a.action for a in copy_actions(store, vgpu_entitled=True)] == ["create"]
    assert [a.key for a in copy_actions(store, vgpu_entitled=True)] == [
        ("tenant-a", names.license_copy_name("c"))
    ]
    assert not store.dirty
