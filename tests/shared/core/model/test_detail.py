"""Node detail, Pod CPU and memory, and ResourceQuota headroom (shared/core/model/detail.py).

Expected values restate Kubernetes: quantities round up to whole bytes and millicores
(resource.Quantity Value/MilliValue); a Pod holds max(sum of containers and sidecars, the largest
init container beside the sidecars before it) (k8s.io/component-helpers PodRequests); a
ResourceQuota bounds `requests.<resource>` and, for CPU, memory and ephemeral storage, the bare
name too, with `status.hard` and `status.used` as the quota controller keeps them.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from gpuclass.shared.core.model.detail import (
    Quota,
    compact_quota,
    headroom,
    node_detail,
    read_compute,
)
from gpuclass.shared.core.model.snapshot import SnapshotBuilder
from tests.builders import node, pod


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        pytest.param({"cpu": "1", "memory": "1Gi"}, {"cpu": 1000, "memory": 2**30}, id="plain"),
        pytest.param({"cpu": "0.0001"}, {"cpu": 1}, id="millicores-round-up"),
        pytest.param({"memory": "1.5"}, {"memory": 2}, id="bytes-round-up"),
        pytest.param({"cpu": "many", "memory": True}, {"cpu": 0, "memory": 0}, id="unreadable"),
        pytest.param({"example.com/gpu": "1"}, {}, id="extended-not-read"),
        pytest.param("cpu", {}, id="not-a-map"),
    ],
)
def test_read_compute(resources: object, expected: dict[str, int]) -> None:
    assert read_compute(resources) == expected


def test_a_detailed_snapshot_holds_labels_allocatable_and_what_bound_pods_request() -> None:
    running = pod("p", "n", {})
    running["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "500m", "memory": "1Gi"}}
    running["spec"]["initContainers"] = [
        {"name": "big-init", "resources": {"requests": {"cpu": "2", "memory": "100Mi"}}}
    ]
    finished = pod("q", "n", {}, phase="Succeeded")
    finished["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "8"}}
    labelled = node("n", {"cpu": "4", "memory": "8Gi"})
    snapshot = SnapshotBuilder(detail=True).add_all([labelled, running, finished])
    assert snapshot.detail is not None
    assert snapshot.detail.nodes["n"] == node_detail(labelled)
    assert snapshot.detail.nodes["n"].allocatable == {"cpu": 4000, "memory": 8 * 2**30}
    assert snapshot.detail.nodes["n"].labels["kubevirt.io/schedulable"] == "true"
    # max(500m, 2) CPU, max(1Gi, 100Mi) memory; the finished Pod holds nothing
    assert snapshot.detail.used == {"n": {"cpu": 2000, "memory": 2**30}}


def test_a_plain_snapshot_keeps_no_detail() -> None:
    assert SnapshotBuilder().add_all([node("n", {"cpu": "4"})]).detail is None


def quota(hard: dict[str, Any], used: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "kind": "ResourceQuota",
        "metadata": {"name": "q", "namespace": "tenant-a"},
        "spec": {"hard": hard},
        "status": {"hard": hard, "used": used or {}},
    }


def test_compact_quota_reads_status_hard_and_used() -> None:
    found = compact_quota(
        quota({"requests.example.com/gpu": "2"}, {"requests.example.com/gpu": "1"})
    )
    assert found == (
        "tenant-a",
        Quota(
            "q", {"requests.example.com/gpu": Decimal(2)}, {"requests.example.com/gpu": Decimal(1)}
        ),
    )
    assert compact_quota({"kind": "ResourceQuota", "metadata": {"name": "q"}}) is None


def test_headroom_pairs_every_bounded_key_with_what_is_wanted() -> None:
    quotas = [
        Quota(
            "q",
            {
                "requests.example.com/gpu": Decimal(2),
                "cpu": Decimal(4),
                "limits.memory": Decimal(9),
            },
            {"requests.example.com/gpu": Decimal(2), "cpu": Decimal("3.5")},
        )
    ]
    found = headroom(
        quotas, {"example.com/gpu": Decimal(1), "cpu": Decimal("0.105"), "memory": Decimal(5)}
    )
    assert [(room.key, room.left, amount) for room, amount in found] == [
        ("requests.example.com/gpu", Decimal(0), Decimal(1)),
        ("cpu", Decimal("0.5"), Decimal("0.105")),
    ]
