"""Class status (docs/contract.md section 6): each counting rule, conflicts, conditions and their transition times.

Each row builds a small cluster from raw objects (as `--objects` files would hold
them) and states the figures a person counting by hand gets.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from gpuclass.shared.core.model.snapshot import Snapshot, SnapshotBuilder
from gpuclass.shared.core.status.availability import compute_all
from tests.builders import KUBEVIRT_DEVICES, KUBEVIRT_NODE_LABELS

R = "example.com/gpu"
NS = "cozy-system"
NOW = "2030-01-01T00:00:00Z"
TAINT = {"key": "gpu.example.com/dedicated", "value": "true", "effect": "NoSchedule"}
TOLERATE = {"key": "gpu.example.com/dedicated", "operator": "Exists", "effect": "NoSchedule"}


def node(
    name: str,
    units: int | str | None = 4,
    *,
    taints: list[dict[str, str]] | None = None,
    ready: str | None = "True",
    unschedulable: bool = False,
    resource: str = R,
    kubevirt: bool = True,
) -> dict[str, Any]:
    """A node; a healthy KubeVirt node (virt-handler's label and devices) unless `kubevirt`
    is False."""
    allocatable: dict[str, Any] = {"cpu": "64", "memory": "512Gi"}
    if kubevirt:
        allocatable.update(KUBEVIRT_DEVICES)
    if units is not None:
        allocatable[resource] = str(units)
    spec: dict[str, Any] = {"taints": taints or []}
    if unschedulable:
        spec["unschedulable"] = True
    conditions = [{"type": "Ready", "status": ready}] if ready is not None else []
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": dict(KUBEVIRT_NODE_LABELS) if kubevirt else {}},
        "spec": spec,
        "status": {"conditions": conditions, "allocatable": allocatable},
    }


_POD_NUMBERS = itertools.count()


def pod(
    node_name: str | None,
    requests: int | None = None,
    *,
    limits: int | None = None,
    containers: list[int] | None = None,
    init: list[int | tuple[str, int]] | None = None,
    overhead: int | None = None,
    phase: str | None = "Running",
    resource: str = R,
    terminating: bool = False,
) -> dict[str, Any]:
    def container(units: int | None, limit: int | None = None) -> dict[str, Any]:
        resources: dict[str, Any] = {}
        if units is not None:
            resources["requests"] = {resource: str(units), "cpu": "1"}
        if limit is not None:
            resources["limits"] = {resource: str(limit)}
        return {"name": "c", "resources": resources}

    main = (
        [container(u) for u in containers]
        if containers is not None
        else [container(requests, limits)]
    )
    spec: dict[str, Any] = {"containers": main}
    if init is not None:  # ("sidecar", n): an init container with restartPolicy Always
        spec["initContainers"] = [
            {**container(u[1]), "restartPolicy": "Always"} if isinstance(u, tuple) else container(u)
            for u in init
        ]
    if overhead is not None:
        spec["overhead"] = {resource: str(overhead), "cpu": "100m"}
    if node_name is not None:
        spec["nodeName"] = node_name
    obj: dict[str, Any] = {
        "kind": "Pod",
        # Distinct names: objects are keyed by namespace and name, as in a cluster.
        "metadata": {"name": f"p{next(_POD_NUMBERS)}", "namespace": "tenant-a"},
        "spec": spec,
    }
    if phase is not None:
        obj["status"] = {"phase": phase}
    if terminating:
        obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return obj


def gpuclass(
    name: str = "c",
    resource: str = R,
    *,
    tolerations: list[dict[str, Any]] | None = None,
    created: str | None = None,
    deleting: bool = False,
    license: str | None = None,
    generation: int | None = None,
    conditions: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "vendor": "example",
        "model": "m",
        "mode": "vgpu" if license else "passthrough",
        "source": {"devicePlugin": {"resourceName": resource}},
    }
    if license:
        spec["profile"] = "p"
        spec["license"] = {"secretName": license}
    if tolerations is not None:
        spec["tolerations"] = tolerations
    meta: dict[str, Any] = {"name": name}
    if created:
        meta["creationTimestamp"] = created
    if deleting:
        meta["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    if generation is not None:
        meta["generation"] = generation
    obj: dict[str, Any] = {"kind": "GPUClass", "metadata": meta, "spec": spec}
    if conditions is not None:
        obj["status"] = {"conditions": conditions}
    return obj


def kubevirt(*resources: str) -> dict[str, Any]:
    return {
        "kind": "KubeVirt",
        "status": {"phase": "Deployed"},
        "metadata": {"name": "kubevirt", "namespace": "cozy-kubevirt"},
        "spec": {
            "configuration": {
                "permittedHostDevices": {"pciHostDevices": [{"resourceName": r} for r in resources]}
            }
        },
    }


def secret(name: str, data: dict[str, str] | None, namespace: str = NS) -> dict[str, Any]:
    obj: dict[str, Any] = {"kind": "Secret", "metadata": {"name": name, "namespace": namespace}}
    if data is not None:
        obj["data"] = data
    return obj


def snapshot(*objects: dict[str, Any]) -> Snapshot:
    return SnapshotBuilder().add_all(objects)


def status(*objects: dict[str, Any], name: str = "c", now: str = NOW) -> dict[str, Any]:
    return compute_all(snapshot(*objects), license_namespace=NS, now=now)[name]


def figures(*objects: dict[str, Any], name: str = "c") -> tuple[int, int, int]:
    s = status(*objects, name=name)
    return s["free"], s["maxFreePerNode"], s["maxUnitsPerNode"]


def conditions(
    *objects: dict[str, Any], name: str = "c", now: str = NOW
) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status(*objects, name=name, now=now)["conditions"]}


CLASS = gpuclass()
TOLERANT = gpuclass(tolerations=[TOLERATE])


@pytest.mark.parametrize(
    ("objects", "expected"),
    [
        pytest.param([CLASS], (0, 0, 0), id="no-nodes"),
        pytest.param([CLASS, node("a", 4)], (4, 4, 4), id="one-ready-node"),
        pytest.param(
            [CLASS, node("a", 4), node("b", 2), pod("a", 1)], (5, 3, 4), id="sum-and-largest"
        ),
        pytest.param([CLASS, node("a", None)], (0, 0, 0), id="node-without-resource"),
        pytest.param([CLASS, node("a", 0)], (0, 0, 0), id="node-advertising-zero"),
        pytest.param(
            [CLASS, node("a", 4, resource="example.com/other")], (0, 0, 0), id="other-resource-only"
        ),
        # Hosts: every NoSchedule/NoExecute taint tolerated.
        pytest.param(
            [CLASS, node("a", 4, taints=[TAINT])], (0, 0, 0), id="noschedule-taint-not-tolerated"
        ),
        pytest.param(
            [TOLERANT, node("a", 4, taints=[TAINT])], (4, 4, 4), id="noschedule-taint-tolerated"
        ),
        pytest.param(
            [CLASS, node("a", 4, taints=[{**TAINT, "effect": "PreferNoSchedule"}])],
            (4, 4, 4),
            id="prefer-noschedule-ignored",
        ),
        pytest.param(
            [TOLERANT, node("a", 4, taints=[{**TAINT, "effect": "NoExecute"}])],
            (0, 0, 0),
            id="noexecute-not-tolerated-by-noschedule-toleration",
        ),
        pytest.param(
            [TOLERANT, node("a", 4, taints=[TAINT, {"key": "other", "effect": "NoSchedule"}])],
            (0, 0, 0),
            id="one-untolerated-taint-of-two",
        ),
        pytest.param(
            [TOLERANT, node("a", 4, taints=[TAINT]), node("b", 2)],
            (6, 4, 4),
            id="tolerant-class-also-uses-untainted",
        ),
        # Eligible: Ready=True and schedulable; maxUnitsPerNode counts every tolerated host.
        pytest.param(
            [CLASS, node("a", 4, ready="False")], (0, 0, 4), id="not-ready-counts-units-only"
        ),
        pytest.param([CLASS, node("a", 4, ready="Unknown")], (0, 0, 4), id="ready-unknown"),
        pytest.param([CLASS, node("a", 4, ready=None)], (0, 0, 4), id="ready-condition-missing"),
        pytest.param(
            [CLASS, node("a", 8, unschedulable=True), node("b", 2)], (2, 2, 8), id="unschedulable"
        ),
        pytest.param(
            [CLASS, node("a", 8, ready="False", taints=[TAINT]), node("b", 2)],
            (2, 2, 2),
            id="untolerated-not-ready-host-not-counted",
        ),
        pytest.param(
            [TOLERANT, node("a", 8, ready="False", taints=[TAINT]), node("b", 2)],
            (2, 2, 8),
            id="tolerated-not-ready-host-counted",
        ),
        # Pod requests: max(sum of containers, largest init container); limits alone imply requests.
        pytest.param(
            [CLASS, node("a", 4), pod("a", containers=[1, 1])], (2, 2, 4), id="containers-sum"
        ),
        pytest.param(
            [CLASS, node("a", 4), pod("a", containers=[1, 1], init=[3])],
            (1, 1, 4),
            id="init-larger-wins",
        ),
        pytest.param(
            [CLASS, node("a", 4), pod("a", containers=[2], init=[1, 1])],
            (2, 2, 4),
            id="init-max-not-sum",
        ),
        pytest.param(
            [CLASS, node("a", 4), pod("a", containers=[], init=[2])], (2, 2, 4), id="init-only"
        ),
        # Sidecars and overhead, by the kube-scheduler's rule (k8s.io/component-helpers
        # resource.PodRequests): max(sum(containers) + sum(sidecars),
        # max_i(init_i + sum(sidecars declared before i))) + overhead.
        pytest.param(
            [CLASS, node("a", 8), pod("a", containers=[1], init=[("sidecar", 2)])],
            (5, 5, 8),
            id="sidecar-adds-to-containers",
        ),
        pytest.param(
            [CLASS, node("a", 8), pod("a", containers=[1], init=[("sidecar", 1), 3])],
            (4, 4, 8),
            id="init-runs-beside-earlier-sidecars",
        ),
        pytest.param(
            [CLASS, node("a", 8), pod("a", containers=[1], init=[3, ("sidecar", 1)])],
            (5, 5, 8),
            id="init-before-a-sidecar-runs-alone",
        ),
        pytest.param(
            [CLASS, node("a", 8), pod("a", containers=[2], init=[("sidecar", 1), ("sidecar", 1)])],
            (4, 4, 8),
            id="sidecars-add-up",
        ),
        pytest.param(
            [
                CLASS,
                node("a", 8),
                pod("a", containers=[0], init=[("sidecar", 2), 1, ("sidecar", 3)]),
            ],
            (3, 3, 8),
            id="sidecars-only-beside-empty-containers",
        ),
        pytest.param(
            [CLASS, node("a", 8), pod("a", containers=[1], overhead=1)],
            (6, 6, 8),
            id="overhead-added",
        ),
        pytest.param(
            [CLASS, node("a", 8), pod("a", containers=[1], init=[3], overhead=1)],
            (4, 4, 8),
            id="overhead-added-to-the-init-peak",
        ),
        pytest.param(
            [CLASS, node("a", 4), pod("a", 1, terminating=True)],
            (3, 3, 4),
            id="terminating-still-counts",
        ),
        pytest.param([CLASS, node("a", 4), pod("a", limits=3)], (1, 1, 4), id="limits-only"),
        pytest.param(
            [CLASS, node("a", 4), pod("a", 2, limits=2)],
            (2, 2, 4),
            id="requests-and-limits-not-doubled",
        ),
        # Which pods hold units.
        pytest.param(
            [CLASS, node("a", 4), pod("a", 1, phase="Pending")], (3, 3, 4), id="pending-counts"
        ),
        pytest.param(
            [CLASS, node("a", 4), pod("a", 1, phase="Running")], (3, 3, 4), id="running-counts"
        ),
        pytest.param(
            [CLASS, node("a", 4), pod("a", 1, phase="Succeeded")],
            (4, 4, 4),
            id="succeeded-does-not",
        ),
        pytest.param(
            [CLASS, node("a", 4), pod("a", 1, phase="Failed")], (4, 4, 4), id="failed-does-not"
        ),
        pytest.param(
            [CLASS, node("a", 4), pod(None, 1, phase="Pending")], (4, 4, 4), id="unbound-does-not"
        ),
        pytest.param([CLASS, node("a", 4), pod("b", 1)], (4, 4, 4), id="other-node-does-not"),
        pytest.param(
            [CLASS, node("a", 4), pod("a", 1, resource="example.com/other")],
            (4, 4, 4),
            id="other-resource-does-not",
        ),
        pytest.param(
            [CLASS, node("a", 4), pod("a", 1), pod("a", 2, phase="Pending")],
            (1, 1, 4),
            id="pods-add-up",
        ),
        pytest.param([CLASS, node("a", 2), pod("a", 3)], (0, 0, 2), id="free-never-below-zero"),
        pytest.param(
            [CLASS, node("a", 2), pod("a", 3), node("b", 1)],
            (1, 1, 2),
            id="overcommitted-node-does-not-subtract",
        ),
    ],
)
def test_figures(objects: list[dict[str, Any]], expected: tuple[int, int, int]) -> None:
    assert figures(*objects) == expected


def test_classes_sharing_nothing_have_their_own_figures() -> None:
    objs = [
        gpuclass("a", "example.com/a"),
        gpuclass("b", "example.com/b", tolerations=[TOLERATE]),
        node("n1", 4, resource="example.com/a"),
        node("n2", 2, resource="example.com/b", taints=[TAINT]),
        pod("n2", 1, resource="example.com/b"),
    ]
    assert figures(*objs, name="a") == (4, 4, 4)
    assert figures(*objs, name="b") == (1, 1, 2)


@pytest.mark.parametrize(
    ("classes", "winner"),
    [
        pytest.param(
            [
                gpuclass("new", created="2026-02-01T00:00:00Z"),
                gpuclass("old", created="2026-01-01T00:00:00Z"),
            ],
            "old",
            id="older-wins",
        ),
        pytest.param(
            [
                gpuclass("b", created="2026-01-01T00:00:00Z"),
                gpuclass("a", created="2026-01-01T00:00:00Z"),
            ],
            "a",
            id="tie-broken-by-name",
        ),
        pytest.param(
            [
                gpuclass("retiring", created="2026-01-01T00:00:00Z", deleting=True),
                gpuclass("successor", created="2026-03-01T00:00:00Z"),
            ],
            "retiring",
            id="deleting-class-keeps-its-name",
        ),
    ],
)
def test_conflict(classes: list[dict[str, Any]], winner: str) -> None:
    objs = [*classes, node("a", 4), kubevirt(R)]
    names = [c["metadata"]["name"] for c in classes]
    loser = next(n for n in names if n != winner)
    assert figures(*objs, name=winner) == (4, 4, 4)
    assert figures(*objs, name=loser) == (0, 0, 0), "the loser's units belong to the winner"
    won, lost = conditions(*objs, name=winner), conditions(*objs, name=loser)
    assert won["ResourceNameConflict"]["status"] == "False"
    assert won["Ready"]["status"] == "True"
    assert lost["ResourceNameConflict"]["status"] == "True"
    assert f"class {winner} already uses {R}" in lost["ResourceNameConflict"]["message"]
    assert lost["Ready"]["status"] == "False"


def test_three_classes_one_winner() -> None:
    objs = [
        gpuclass("b", created="2026-01-02T00:00:00Z"),
        gpuclass("a", created="2026-01-03T00:00:00Z"),
        gpuclass("c", created="2026-01-02T00:00:00Z"),
        node("n", 4),
    ]
    results = {n: figures(*objs, name=n) for n in "abc"}
    assert results == {"a": (0, 0, 0), "b": (4, 4, 4), "c": (0, 0, 0)}


@pytest.mark.parametrize(
    ("objects", "status_", "reason"),
    [
        pytest.param([CLASS, kubevirt(R)], "False", "Permitted", id="pci-permitted"),
        pytest.param(
            [
                CLASS,
                {
                    "kind": "KubeVirt",
                    "status": {"phase": "Deployed"},
                    "metadata": {"name": "kv"},
                    "spec": {
                        "configuration": {
                            "permittedHostDevices": {"mediatedDevices": [{"resourceName": R}]}
                        }
                    },
                },
            ],
            "False",
            "Permitted",
            id="mediated-permitted",
        ),
        pytest.param(
            [CLASS, kubevirt("example.com/other")], "True", "NotPermitted", id="not-in-list"
        ),
        pytest.param([CLASS, kubevirt()], "True", "NotPermitted", id="empty-list"),
        pytest.param([CLASS], "True", "NoKubeVirt", id="no-kubevirt-cr"),
    ],
)
def test_resource_name_not_permitted(
    objects: list[dict[str, Any]], status_: str, reason: str
) -> None:
    condition = conditions(*objects)["ResourceNameNotPermitted"]
    assert (condition["status"], condition["reason"]) == (status_, reason)


def undeployed(*resources: str, **metadata: Any) -> dict[str, Any]:
    obj = kubevirt(*resources)
    del obj["status"]
    obj["metadata"].update(metadata)
    return obj


@pytest.mark.parametrize(
    ("objects", "status_", "message"),
    [
        pytest.param(
            [CLASS, undeployed(R)],
            "True",
            "KubeVirt CR cozy-kubevirt/kubevirt is not deployed (no status.phase, or being "
            "deleted): KubeVirt reads its configuration only from the CR virt-operator deployed",
            id="cr-without-a-phase-permits-nothing",
        ),
        pytest.param(
            [CLASS, undeployed(R, name="second"), kubevirt("example.com/other")],
            "True",
            "example.com/gpu is missing from KubeVirt's permittedHostDevices",
            id="only-the-deployed-cr-counts",
        ),
        pytest.param(
            [CLASS, undeployed("example.com/other", name="second"), kubevirt(R)],
            "False",
            "example.com/gpu is in KubeVirt's permittedHostDevices",
            id="a-second-cr-adds-nothing",
        ),
    ],
)
def test_the_cr_kubevirt_reads_is_the_deployed_one(
    objects: list[dict[str, Any]], status_: str, message: str
) -> None:
    """KubeVirt v1.8.4 reads one CR: not being deleted, with status.phase (docs/decisions.md,
    "Free means a VM can start there"); the class's condition follows that CR alone."""
    condition = conditions(*objects)["ResourceNameNotPermitted"]
    assert (condition["status"], condition["message"]) == (status_, message)


TOKEN = "client_configuration_token.tok"
LICENSED = gpuclass(license="lic")


@pytest.mark.parametrize(
    ("objects", "status_", "message"),
    [
        pytest.param([LICENSED], "True", f"Secret {NS}/lic not found", id="secret-absent"),
        pytest.param(
            [LICENSED, secret("lic", {TOKEN: ""})],
            "True",
            f"no non-empty key {TOKEN}",
            id="token-empty",
        ),
        pytest.param(
            [LICENSED, secret("lic", {"other": "eA=="})],
            "True",
            f"no non-empty key {TOKEN}",
            id="token-key-absent",
        ),
        pytest.param([LICENSED, secret("lic", None)], "True", "no non-empty key", id="no-data"),
        pytest.param(
            [LICENSED, secret("lic", {TOKEN: "eA=="}, namespace="tenant-a")],
            "True",
            "not found",
            id="other-namespace",
        ),
        pytest.param([LICENSED, secret("lic", {TOKEN: "eA=="})], "False", "usable", id="ok"),
        pytest.param([CLASS], "False", "no platform licence", id="unlicensed"),
    ],
)
def test_license_secret_missing(objects: list[dict[str, Any]], status_: str, message: str) -> None:
    condition = conditions(*objects, kubevirt(R))["LicenseSecretMissing"]
    assert condition["status"] == status_
    assert message in condition["message"]


@pytest.mark.parametrize(
    ("objects", "ready", "failing"),
    [
        pytest.param([CLASS, kubevirt(R)], "True", [], id="all-clear"),
        pytest.param([CLASS], "False", ["ResourceNameNotPermitted"], id="not-permitted"),
        pytest.param(
            [LICENSED, kubevirt(R)], "False", ["LicenseSecretMissing"], id="license-missing"
        ),
        pytest.param(
            [
                gpuclass(license="lic", created="2026-01-01T00:00:00Z"),
                gpuclass("a", created="2000-01-01T00:00:00Z"),
            ],
            "False",
            ["ResourceNameConflict", "ResourceNameNotPermitted", "LicenseSecretMissing"],
            id="all-three",
        ),
    ],
)
def test_ready_and_all_four_types_always_present(
    objects: list[dict[str, Any]], ready: str, failing: list[str]
) -> None:
    result = status(*objects)["conditions"]
    # The contract's four (6.4), unchanged and in their order, then the fifth (6.8).
    assert [c["type"] for c in result] == [
        "ResourceNameConflict",
        "ResourceNameNotPermitted",
        "LicenseSecretMissing",
        "Ready",
        "Schedulable",
    ]
    assert [
        c["type"]
        for c in result
        if c["type"] not in ("Ready", "Schedulable") and c["status"] == "True"
    ] == failing
    assert result[3]["status"] == ready
    for condition in result:
        assert set(condition) == {
            "type",
            "status",
            "reason",
            "message",
            "lastTransitionTime",
            "observedGeneration",
        }


def _previous(ready: str, permitted_status: str, when: str) -> list[dict[str, Any]]:
    return [
        {
            "type": "ResourceNameConflict",
            "status": "False",
            "reason": "x",
            "message": "x",
            "lastTransitionTime": when,
        },
        {
            "type": "ResourceNameNotPermitted",
            "status": permitted_status,
            "reason": "x",
            "message": "x",
            "lastTransitionTime": when,
        },
        {
            "type": "LicenseSecretMissing",
            "status": "False",
            "reason": "x",
            "message": "x",
            "lastTransitionTime": when,
        },
        {
            "type": "Ready",
            "status": ready,
            "reason": "x",
            "message": "x",
            "lastTransitionTime": when,
        },
    ]


def test_last_transition_time_kept_unless_status_flips() -> None:
    then = "2029-06-01T00:00:00Z"
    # Was not permitted and not ready; now the KubeVirt CR permits it.
    cls = gpuclass(conditions=_previous("False", "True", then))
    result = conditions(cls, kubevirt(R), now=NOW)
    assert result["ResourceNameConflict"]["lastTransitionTime"] == then, (
        "unchanged status keeps its time"
    )
    assert result["LicenseSecretMissing"]["lastTransitionTime"] == then
    assert result["ResourceNameNotPermitted"]["lastTransitionTime"] == NOW, "flipped True -> False"
    assert result["Ready"]["lastTransitionTime"] == NOW, "flipped False -> True"


def test_first_status_takes_now() -> None:
    result = conditions(CLASS, kubevirt(R), now=NOW)
    assert {c["lastTransitionTime"] for c in result.values()} == {NOW}


def test_observed_generation() -> None:
    result = status(gpuclass(generation=7), kubevirt(R))
    assert result["observedGeneration"] == 7
    assert {c["observedGeneration"] for c in result["conditions"]} == {7}


def test_figures_are_computed_never_read_from_a_stored_status() -> None:
    cls = gpuclass()
    cls["status"] = {"free": 99, "maxFreePerNode": 99, "maxUnitsPerNode": 99}
    assert figures(cls, node("a", 2)) == (2, 2, 2)


def test_status_of_every_class_sorted_by_name() -> None:
    result = compute_all(
        snapshot(gpuclass("b", "example.com/b"), gpuclass("a", "example.com/a")),
        license_namespace=NS,
        now=NOW,
    )
    assert list(result) == ["a", "b"]
