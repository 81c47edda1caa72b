"""Pure store transitions: events into `reconciler.state.store`, statuses and dirty marks out.

One test per rule of docs/contract.md section 6 (eligibility, counting, conflicts,
conditions), plus the affected-class index: what each kind of change marks dirty.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuclass.reconciler.state.decisions import class_status, copy_actions, status_context
from gpuclass.reconciler.state.licenses import record_body
from gpuclass.reconciler.state.resources import RESOURCES, Resource
from gpuclass.reconciler.state.store import ClusterStore
from gpuclass.shared.core.base import names
from tests.builders import gpuclass, kubevirt, launcher, namespace, node, pod, secret, vmi

R = "example.com/gpu"
OTHER = "example.com/other"
TAINT = {"key": "gpu", "value": "yes", "effect": "NoSchedule"}


def store_with(*events: tuple[Resource, dict[str, Any]]) -> ClusterStore:
    store = ClusterStore()
    store.upsert("kubevirts", kubevirt(R, OTHER))
    for source, obj in events:
        store.upsert(source, obj)
    return store


def status(store: ClusterStore, name: str = "c") -> dict[str, Any]:
    return class_status(store, name, context=status_context(store), now="NOW")


def figures(store: ClusterStore, name: str = "c") -> tuple[int, int, int]:
    s = status(store, name)
    return s["free"], s["maxFreePerNode"], s["maxUnitsPerNode"]


def conditions(store: ClusterStore, name: str = "c") -> dict[str, str]:
    return {c["type"]: c["status"] for c in status(store, name)["conditions"]}


CLASS: tuple[Resource, dict[str, Any]] = ("gpuclasses", gpuclass("c", R))
TOLERANT: tuple[Resource, dict[str, Any]] = (
    "gpuclasses",
    gpuclass("c", R, tolerations=[{"key": "gpu", "operator": "Exists"}]),
)


@pytest.mark.parametrize(
    ("events", "expected"),
    [
        pytest.param([CLASS, ("nodes", node("n1", {R: 4}))], (4, 4, 4), id="ready-node-all-free"),
        pytest.param(
            [CLASS, ("nodes", node("n1", {R: 4})), ("nodes", node("n2", {R: 2}))],
            (6, 4, 4),
            id="sum-and-max",
        ),
        pytest.param(
            [CLASS, ("nodes", node("n1", {R: 4}, ready=False))],
            (0, 0, 4),
            id="not-ready-counts-max-units-only",
        ),
        pytest.param(
            [CLASS, ("nodes", node("n1", {R: 4}, unschedulable=True))],
            (0, 0, 4),
            id="cordoned-counts-max-units-only",
        ),
        pytest.param(
            [CLASS, ("nodes", node("n1", {R: 4}, taints=[TAINT]))],
            (0, 0, 0),
            id="untolerated-taint-not-a-host",
        ),
        pytest.param(
            [TOLERANT, ("nodes", node("n1", {R: 4}, taints=[TAINT]))],
            (4, 4, 4),
            id="tolerated-taint-is-a-host",
        ),
        pytest.param(
            [CLASS, ("nodes", node("n1", {R: 4}, taints=[{**TAINT, "effect": "NoExecute"}]))],
            (0, 0, 0),
            id="untolerated-noexecute-not-a-host",
        ),
        pytest.param(
            [
                CLASS,
                ("nodes", node("n1", {R: 4}, taints=[{**TAINT, "effect": "PreferNoSchedule"}])),
            ],
            (4, 4, 4),
            id="prefer-no-schedule-ignored",
        ),
        pytest.param(
            [CLASS, ("nodes", node("n1", {OTHER: 4}))], (0, 0, 0), id="other-resource-not-counted"
        ),
        pytest.param(
            [CLASS, ("nodes", node("n1", {R: 4})), ("pods", pod("p", "n1", {R: 3}))],
            (1, 1, 4),
            id="running-pod-uses",
        ),
        pytest.param(
            [
                CLASS,
                ("nodes", node("n1", {R: 4})),
                ("pods", pod("p", "n1", {R: 3}, phase="Pending")),
            ],
            (1, 1, 4),
            id="pending-bound-pod-uses",
        ),
        pytest.param(
            [
                CLASS,
                ("nodes", node("n1", {R: 4})),
                ("pods", pod("p", "n1", {R: 3}, phase="Succeeded")),
            ],
            (4, 4, 4),
            id="succeeded-pod-frees",
        ),
        pytest.param(
            [
                CLASS,
                ("nodes", node("n1", {R: 4})),
                ("pods", pod("p", "n1", {R: 3}, phase="Failed")),
            ],
            (4, 4, 4),
            id="failed-pod-frees",
        ),
        pytest.param(
            [
                CLASS,
                ("nodes", node("n1", {R: 4})),
                ("pods", pod("p", None, {R: 3}, phase="Pending")),
            ],
            (4, 4, 4),
            id="unbound-pod-not-counted",
        ),
        pytest.param(
            [CLASS, ("nodes", node("n1", {R: 4})), ("pods", pod("p", "n1", {R: 1}, init={R: 3}))],
            (1, 1, 4),
            id="largest-init-container-wins",
        ),
        pytest.param(
            [CLASS, ("nodes", node("n1", {R: 4})), ("pods", pod("p", "n1", {R: 2}, init={R: 1}))],
            (2, 2, 4),
            id="containers-sum-wins-over-init",
        ),
        pytest.param(
            [
                CLASS,
                ("nodes", node("n1", {R: 4})),
                ("pods", pod("p", "n1", {R: 2}, limits_only=True)),
            ],
            (2, 2, 4),
            id="limit-implies-request",
        ),
        pytest.param(
            [CLASS, ("nodes", node("n1", {R: 2})), ("pods", pod("p", "n1", {R: 5}))],
            (0, 0, 2),
            id="never-below-zero",
        ),
        pytest.param(
            [
                CLASS,
                ("nodes", node("n1", {R: 4})),
                ("pods", pod("p", "n1", {R: 1})),
                ("pods", pod("p", "n1", {R: 1}, namespace="tenant-b")),
            ],
            (2, 2, 4),
            id="pods-keyed-by-namespace",
        ),
        pytest.param(
            [
                CLASS,
                ("nodes", node("n1", {R: 4})),
                ("pods", pod("p", "n1", {R: 1})),
                ("pods", pod("p", "n1", {R: 1})),
            ],
            (3, 3, 4),
            id="modified-pod-not-double-counted",
        ),
        pytest.param(
            [
                CLASS,
                ("nodes", node("n1", {R: 4})),
                ("pods", pod("p", "n1", {R: 3})),
                ("pods", pod("p", "n1", {R: 3}, phase="Succeeded")),
            ],
            (4, 4, 4),
            id="pod-finishing-releases",
        ),
        pytest.param(
            [CLASS, ("nodes", node("n1", {R: 4})), ("pods", pod("p", "n2", {R: 3}))],
            (4, 4, 4),
            id="pod-on-other-node",
        ),
    ],
)
def test_figures(
    events: list[tuple[Resource, dict[str, Any]]], expected: tuple[int, int, int]
) -> None:
    assert figures(store_with(*events)) == expected


def test_deleted_pod_and_node_release() -> None:
    store = store_with(
        CLASS,
        ("nodes", node("n1", {R: 4})),
        ("nodes", node("n2", {R: 8})),
        ("pods", pod("p", "n1", {R: 3})),
    )
    assert figures(store) == (9, 8, 8)
    store.delete("pods", pod("p", "n1", {}))
    assert figures(store) == (12, 8, 8)
    store.delete("nodes", node("n2", {}))
    assert figures(store) == (4, 4, 4)


def test_node_turning_not_ready_and_back() -> None:
    store = store_with(CLASS, ("nodes", node("n1", {R: 4})))
    store.upsert("nodes", node("n1", {R: 4}, ready=False))
    assert figures(store) == (0, 0, 4)
    store.upsert("nodes", node("n1", {R: 4}))
    assert figures(store) == (4, 4, 4)


def test_sweep_after_relist_forgets_missing_objects() -> None:
    store = store_with(
        CLASS,
        ("nodes", node("n1", {R: 4})),
        ("pods", pod("a", "n1", {R: 1})),
        ("pods", pod("b", "n1", {R: 1})),
    )
    store.sweep("pods", {("tenant-a", "a")})
    assert figures(store) == (3, 3, 4)
    store.sweep("nodes", set())
    assert figures(store) == (0, 0, 0)


def test_conflict_loser_reports_zero_and_names_winner() -> None:
    store = store_with(
        ("gpuclasses", gpuclass("old", R, created="2026-01-01T00:00:00Z")),
        ("gpuclasses", gpuclass("new", R, created="2026-02-01T00:00:00Z")),
        ("nodes", node("n1", {R: 4})),
    )
    assert figures(store, "old") == (4, 4, 4)
    assert figures(store, "new") == (0, 0, 0)
    assert conditions(store, "new")["ResourceNameConflict"] == "True"
    assert conditions(store, "new")["Ready"] == "False"
    assert "old" in status(store, "new")["conditions"][0]["message"]
    assert conditions(store, "old")["ResourceNameConflict"] == "False"


def test_same_timestamp_conflict_decided_by_name() -> None:
    store = store_with(
        ("gpuclasses", gpuclass("b", R)),
        ("gpuclasses", gpuclass("a", R)),
        ("nodes", node("n1", {R: 4})),
    )
    assert figures(store, "a") == (4, 4, 4)
    assert figures(store, "b") == (0, 0, 0)


def test_deleting_class_holds_its_name_until_gone() -> None:
    old = gpuclass("old", R, created="2026-01-01T00:00:00Z", deleting=True)
    store = store_with(
        ("gpuclasses", old),
        ("gpuclasses", gpuclass("new", R, created="2026-02-01T00:00:00Z")),
        ("nodes", node("n1", {R: 4})),
    )
    assert conditions(store, "new")["ResourceNameConflict"] == "True"
    store.take_dirty()
    store.delete("gpuclasses", old)
    assert "new" in store.take_dirty().statuses
    assert conditions(store, "new")["ResourceNameConflict"] == "False"
    assert figures(store, "new") == (4, 4, 4)


@pytest.mark.parametrize(
    ("events", "condition", "value"),
    [
        pytest.param([], "ResourceNameNotPermitted", "False", id="permitted"),
        pytest.param(
            [("kubevirts", kubevirt(OTHER))],
            "ResourceNameNotPermitted",
            "True",
            id="not-in-permitted-set",
        ),
        pytest.param(
            [("gpuclasses", gpuclass("c", R, license="src"))],
            "LicenseSecretMissing",
            "True",
            id="source-missing",
        ),
        pytest.param(
            [("gpuclasses", gpuclass("c", R, license="src")), ("licence-secrets", secret("src"))],
            "LicenseSecretMissing",
            "False",
            id="source-present",
        ),
        pytest.param(
            [
                ("gpuclasses", gpuclass("c", R, license="src")),
                ("licence-secrets", secret("src", data={})),
            ],
            "LicenseSecretMissing",
            "True",
            id="source-without-token",
        ),
        pytest.param(
            [
                ("gpuclasses", gpuclass("c", R, license="src")),
                ("licence-secrets", secret("src", "elsewhere")),
            ],
            "LicenseSecretMissing",
            "True",
            id="source-in-wrong-namespace",
        ),
    ],
)
def test_conditions(
    events: list[tuple[Resource, dict[str, Any]]], condition: str, value: str
) -> None:
    store = store_with(CLASS, *events)
    assert conditions(store)[condition] == value
    assert conditions(store)["Ready"] == ("False" if value == "True" else "True")


def test_no_kubevirt_cr_means_not_permitted() -> None:
    store = ClusterStore()
    store.upsert("gpuclasses", gpuclass("c", R))
    assert conditions(store)["ResourceNameNotPermitted"] == "True"
    store.upsert("kubevirts", kubevirt(R))
    assert conditions(store)["ResourceNameNotPermitted"] == "False"
    store.delete("kubevirts", kubevirt(R))
    assert conditions(store)["ResourceNameNotPermitted"] == "True"


def test_observed_generation_and_kept_transition_time() -> None:
    store = store_with(("gpuclasses", gpuclass("c", R, generation=3)))
    first = status(store)
    assert first["observedGeneration"] == 3
    store.upsert("gpuclasses", gpuclass("c", R, generation=3, status=first))
    later = class_status(store, "c", context=status_context(store), now="LATER")
    assert later == first  # nothing flipped: lastTransitionTime kept, so no write
    store.upsert("kubevirts", kubevirt(OTHER))
    flipped = class_status(store, "c", context=status_context(store), now="LATER")
    times = {c["type"]: c["lastTransitionTime"] for c in flipped["conditions"]}
    assert times == {
        "ResourceNameConflict": "NOW",
        "ResourceNameNotPermitted": "LATER",
        "LicenseSecretMissing": "NOW",
        "Ready": "LATER",
        # No node advertises R: False before (NoNodeAdvertises), False after (ClassNotReady).
        "Schedulable": "NOW",
    }


# -- the affected-class index ---------------------------------------------------------------------


def relabelled(obj: dict[str, Any], labels: dict[str, str | None]) -> dict[str, Any]:
    """`obj` with labels added, or removed where the value is None."""
    current = obj["metadata"].setdefault("labels", {})
    for key, value in labels.items():
        if value is None:
            current.pop(key, None)
        else:
            current[key] = value
    return obj


def emulating(*resources: str) -> dict[str, Any]:
    """A KubeVirt CR permitting `resources` under developerConfiguration.useEmulation: the
    launcher then requests only tun (shared/core/model/kubevirt.py)."""
    obj = kubevirt(*resources)
    obj["spec"]["configuration"]["developerConfiguration"] = {"useEmulation": True}
    return obj


def indexed_store() -> ClusterStore:
    store = store_with(
        ("gpuclasses", gpuclass("c", R)),
        ("gpuclasses", gpuclass("d", OTHER)),
        ("gpuclasses", gpuclass("lic", "example.com/lic", license="src")),
        ("nodes", node("n1", {R: 4})),
        ("nodes", node("n2", {OTHER: 4})),
        ("pods", pod("p", "n1", {R: 1})),
    )
    store.take_dirty()
    return store


@pytest.mark.parametrize(
    ("source", "obj", "statuses"),
    [
        pytest.param("pods", pod("q", "n1", {R: 1}), {"c"}, id="pod-touches-its-resource-only"),
        pytest.param(
            "pods",
            pod("q", "n1", {"devices.kubevirt.io/kvm": 1}),
            set(),
            id="non-catalog-pod-touches-nothing",
        ),
        pytest.param("pods", pod("q", "n1", {}), set(), id="plain-pod-touches-nothing"),
        pytest.param("pods", pod("p", "n1", {R: 1}), set(), id="unchanged-pod-touches-nothing"),
        pytest.param(
            "pods",
            pod("p", "n1", {R: 1}, phase="Succeeded"),
            {"c"},
            id="finished-pod-touches-its-class",
        ),
        pytest.param(
            "nodes", node("n1", {R: 4}, ready=False), {"c"}, id="readiness-touches-advertised"
        ),
        pytest.param(
            "nodes", node("n1", {R: 4}, taints=[TAINT]), {"c"}, id="taint-touches-advertised"
        ),
        pytest.param("nodes", node("n1", {R: 5}), {"c"}, id="allocatable-touches-changed-resource"),
        pytest.param(
            "nodes",
            relabelled(node("n1", {R: 4}), {"kubevirt.io/schedulable": "false"}),
            {"c"},
            id="virt-handler-going-stale-touches-advertised",
        ),
        pytest.param(
            "nodes",
            relabelled(node("n1", {R: 4}), {"kubevirt.io/schedulable": None}),
            {"c"},
            id="virt-handler-gone-touches-advertised",
        ),
        pytest.param(
            "nodes",
            node("n1", {R: 4, "devices.kubevirt.io/kvm": 0}),
            {"c"},
            id="kvm-gone-touches-advertised",
        ),
        pytest.param(
            "nodes",
            node("n1", {R: 4, "devices.kubevirt.io/kvm": 999}),
            set(),
            id="kvm-count-alone-touches-nothing",
        ),
        pytest.param(
            "nodes",
            relabelled(node("n1", {R: 4}), {"topology.kubernetes.io/zone": "z1"}),
            set(),
            id="other-label-touches-nothing",
        ),
        pytest.param(
            "nodes", node("n1", {R: 4, OTHER: 1}), {"d"}, id="new-resource-touches-only-it"
        ),
        pytest.param(
            "nodes",
            node("n3", {"example.com/none": 1}),
            set(),
            id="uncatalogued-node-touches-nothing",
        ),
        pytest.param(
            "kubevirts", kubevirt(R), {"c", "d", "lic"}, id="permitted-change-touches-all"
        ),
        pytest.param("kubevirts", kubevirt(R, OTHER), set(), id="same-permitted-touches-nothing"),
        pytest.param(
            "kubevirts",
            emulating(R, OTHER),
            {"c", "d", "lic"},
            id="launcher-devices-change-touches-all",
        ),
        pytest.param(
            "licence-secrets", secret("src"), {"lic"}, id="source-secret-touches-its-class"
        ),
        pytest.param(
            "licence-secrets", secret("unrelated"), set(), id="unrelated-secret-touches-nothing"
        ),
        pytest.param(
            "gpuclasses",
            gpuclass("e", R, created="2027-01-01T00:00:00Z"),
            {"c", "e"},
            id="new-class-touches-conflict-neighbours",
        ),
    ],
)
def test_affected_classes(source: Resource, obj: dict[str, Any], statuses: set[str]) -> None:
    store = indexed_store()
    store.upsert(source, obj)
    assert store.take_dirty().statuses == statuses


def test_namespace_keeps_only_the_entitlement_label() -> None:
    """A tenant's own labels on its namespace (any number, any size) are not kept."""
    store = ClusterStore()
    labels = {f"tenant.example/{i}": "x" * 60 for i in range(100)}
    labels[names.VGPU_ENTITLEMENT_LABEL] = "true"
    store.upsert("namespaces", {"metadata": {"name": "tenant-a", "labels": labels}})
    assert store.namespaces["tenant-a"] == {names.VGPU_ENTITLEMENT_LABEL: "true"}


def test_launcher_pod_counts_while_bound_and_is_forgotten_when_gone() -> None:
    store = ClusterStore()
    launcher = pod("virt-launcher-vm-x", "n1", {R: 1}, namespace="tenant-a")
    launcher["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "name": "vm",
            "controller": True,
        }
    ]
    launcher["spec"]["volumes"] = [
        {"name": "gpulicense", "secret": {"secretName": names.license_copy_name("c")}}
    ]
    store.upsert("pods", launcher)
    assert set(store.launchers.values()) == {("tenant-a", "vm", names.license_copy_name("c"))}
    assert store.take_dirty().copies
    store.delete("pods", launcher)
    assert not store.launchers and store.take_dirty().copies


def test_license_secret_keeps_only_the_token() -> None:
    store = ClusterStore()
    store.upsert("licence-secrets", secret("src", data={names.TOKEN_KEY: "dG9r", "other": "eA=="}))
    assert set(store.license_secrets[("cozy-system", "src")].data) == {names.TOKEN_KEY}


def _one_of_each() -> dict[Resource, dict[str, Any]]:
    record = record_body({}, namespace="cozy-system")
    return {
        "gpuclasses": gpuclass("c", R),
        "nodes": node("n1", {R: "1"}),
        "pods": pod("p", "n1", {R: 1}),
        "kubevirts": kubevirt(R),
        "licence-secrets": secret("src"),
        "copy-record": record,
        "namespaces": {"metadata": {"name": "tenant-a"}},
        "vmis": vmi("v", "tenant-a", classes=["c"], devices=[R]),
    }


@pytest.mark.parametrize("source", RESOURCES)
def test_every_source_keeps_and_forgets_by_the_object_key(source: Resource) -> None:
    """keys() and sweep() read the store SPECS names: an object in is an object key out."""
    obj = {**_one_of_each()[source]}
    obj["metadata"] = {**obj["metadata"], "resourceVersion": "7"}
    store = ClusterStore()
    store.upsert(source, obj)
    meta = obj["metadata"]
    key = (meta.get("namespace", ""), meta["name"])
    assert store.keys(source) == [key]
    # Only the stores of objects the reconciler writes keep a version (to wait for its own writes).
    kept = source in ("gpuclasses", "copy-record")
    assert store.held_version(source, key) == ("7" if kept else "")
    store.sweep(source, set())
    assert store.keys(source) == []
    assert store.held_version(source, key) == ""


# -- what tenants' deleted objects leave behind (a fuzz pass over the intake) --------------------


def test_the_intern_table_stays_bounded_and_still_shares(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tenant can bind Pods to made-up node names and delete them: each name was interned for
    good (20,000 such Pods left 74 MB). The table starts afresh at its weight, and equal small
    values are still one object."""
    monkeypatch.setattr("gpuclass.reconciler.state.store.INTERN_WEIGHT", 64)
    store = store_with(CLASS, ("nodes", node("n1", {R: 4})))
    for i in range(1_000):
        ghost = pod("p", f"ghost-{i}", {R: 1})
        store.upsert("pods", ghost)
        store.delete("pods", ghost)
    assert len(store._interned) <= 64
    store.upsert("pods", pod("a", "n1", {R: 1}))
    store.upsert("pods", pod("b", "n1", {R: 1}))
    a, b = store.pods[("tenant-a", "a")], store.pods[("tenant-a", "b")]
    assert a.node is b.node and a.requests is b.requests
    assert figures(store) == (2, 2, 4)


def test_a_pods_map_of_many_resources_is_not_interned() -> None:
    many = {f"example.com/r{i}": 1 for i in range(17)}
    store = store_with(CLASS, ("pods", pod("p", "n1", many)))
    store.delete("pods", pod("p", "n1", many))
    assert not any(
        isinstance(value, dict) and len(value) > 16 for value in store._interned.values()
    )


def test_a_relist_forgets_a_launcher_that_holds_no_units() -> None:
    """A bound virt-launcher Pod that requests no extended resource is kept only as a launcher;
    when it went away while the watch was down, the re-list must forget it too, or its license
    copy is kept for a VMI that no longer runs."""
    licensed = gpuclass("c", R, license="src")
    store = store_with(
        ("gpuclasses", licensed),
        ("licence-secrets", secret("src")),
        ("namespaces", namespace("tenant-a", entitled=True)),
        ("vmis", vmi("v1", "tenant-a", classes=["c"], devices=[R], license_class="c")),
        ("pods", launcher("v1", "tenant-a", license_class="c", phase="Running")),
    )
    assert [a.action for a in copy_actions(store, vgpu_entitled=True)] == ["create"]
    store.sweep("pods", set())
    assert store.launchers == {}
    assert copy_actions(store, vgpu_entitled=True) == []


def test_a_deleted_vmi_leaves_no_class_entry_behind() -> None:
    store = store_with(CLASS)
    named = vmi("v1", "tenant-a", classes=["c", "made-up"], devices=[R])
    store.upsert("vmis", named)
    store.delete("vmis", named)
    assert store._vmis_by_class == {}
