"""Every cause at once (docs/contract.md section 3.3 and 4.1): each with its field path, the code
422 if any is invalid input, even when one entry of the selection is invalid; rules that need
what cannot be read are not judged.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from gpuclass.shared.core.admission.decisions import Denied
from tests.shared.core.admission.vmi_admission import (
    ANN,
    LICENSE_VOLUME,
    RES,
    causes_of,
    cls,
    create,
    gpus,
    vmi,
)


def test_policy_and_input_causes_together_are_422() -> None:
    decision = create(vmi([cls("gone"), cls("whole", 0)]))
    assert isinstance(decision, Denied)
    assert {c.kind for c in decision.causes} == {"forbidden", "invalid"}
    assert decision.code == 422


def _reserved_disk(obj: dict[str, Any]) -> None:
    obj["spec"]["volumes"].append({"name": "gpulicense", "emptyDisk": {"capacity": "1Gi"}})


def _wrong_gpus(obj: dict[str, Any]) -> None:
    obj["spec"]["domain"]["devices"]["gpus"] = gpus("example.com/other")


def _hand_mount(obj: dict[str, Any]) -> None:
    obj["spec"]["volumes"].append({"name": "x", "secret": {"secretName": "gpuclass-license-lic"}})


@pytest.mark.parametrize(
    ("selection", "namespace", "change", "causes", "code"),
    [
        pytest.param(
            [cls("lic")],
            "tenant-c",
            _reserved_disk,
            [
                (f"{ANN}[0].className", "forbidden", "NotEntitled"),
                ("spec.volumes[1]", "invalid", "ReservedName"),
            ],
            422,
            id="not-entitled-and-reserved-name",
        ),
        pytest.param(
            [cls("byol")],
            "tenant-c",
            _wrong_gpus,
            [
                (f"{ANN}[0].className", "forbidden", "NotEntitled"),
                ("spec.domain.devices.gpus", "invalid", "RawRequestBesideClasses"),
            ],
            422,
            id="not-entitled-and-gpus-beside-classes",
        ),
        pytest.param(
            [cls("whole", 0)],
            "tenant-a",
            _hand_mount,
            [
                (f"{ANN}[0].count", "invalid", "Invalid"),
                ("spec.volumes[1].secret.secretName", "forbidden", "LicenseHandMounted"),
            ],
            422,
            id="bad-count-and-hand-mount",
        ),
        pytest.param(
            [cls("byol")],
            "tenant-c",
            _hand_mount,
            [
                (f"{ANN}[0].className", "forbidden", "NotEntitled"),
                ("spec.volumes[1].secret.secretName", "forbidden", "LicenseHandMounted"),
            ],
            403,
            id="all-policy-is-403",
        ),
        pytest.param(
            [cls("no-such-class")],
            "tenant-a",
            _wrong_gpus,
            [(f"{ANN}[0].className", "forbidden", "ClassNotFound")],
            403,
            id="unresolved-class-leaves-gpus-unjudged",
        ),
    ],
)
def test_every_cause_reported_and_422_if_any_is_input(
    selection: Any, namespace: str, change: Any, causes: list[tuple[str, str, str]], code: int
) -> None:
    obj = vmi(selection, namespace=namespace)
    change(obj)
    decision = create(obj)
    assert causes_of(decision) == causes
    assert isinstance(decision, Denied) and decision.code == code


def _gpus_whole(obj: dict[str, Any]) -> None:
    obj["spec"]["domain"]["devices"]["gpus"] = gpus(RES["whole"])


def _host_device(resource: str) -> Any:
    def change(obj: dict[str, Any]) -> None:
        obj["spec"]["domain"]["devices"]["hostDevices"] = [{"name": "h", "deviceName": resource}]

    return change


def _cloud_init_license(obj: dict[str, Any]) -> None:
    obj["spec"]["volumes"].append(
        {"name": "ci", "cloudInitNoCloud": {"secretRef": {"name": "gpuclass-license-lic"}}}
    )


def _own_license_volume(obj: dict[str, Any]) -> None:
    obj["spec"]["volumes"].append(copy.deepcopy(LICENSE_VOLUME))


def _worker_pool(obj: dict[str, Any]) -> None:
    obj["metadata"]["labels"] = {"cluster.x-k8s.io/cluster-name": "k8s"}


def _unchanged(obj: dict[str, Any]) -> None:
    return None


def _compose(*changes: Any) -> Any:
    def change(obj: dict[str, Any]) -> None:
        for one in changes:
            one(obj)

    return change


OVER_BYTES = json.dumps([cls("whole")] * 120)
"""120 entries, about 2.6 KiB: over the byte cap of 2048 (docs/contract.md 4.1)."""
OVER_ENTRIES = json.dumps([cls("whole")] * 17)
"""17 entries, well under 2048 bytes: over the entry cap of 16."""


# docs/contract.md section 3 and 4.1: every cause at once, each with its field path, even when
# one entry of the selection is invalid; rules that need what cannot be read are not judged.
EVERY_CAUSE_ROWS = [
    pytest.param(
        json.dumps([cls("byol", 0)]),
        "tenant-c",
        _gpus_whole,
        [
            (f"{ANN}[0].count", "invalid", "Invalid"),
            (f"{ANN}[0].className", "forbidden", "NotEntitled"),
            ("spec.domain.devices.gpus", "invalid", "RawRequestBesideClasses"),
        ],
        id="bad-count-raw-gpus-and-no-entitlement",
    ),
    pytest.param(
        json.dumps([cls("whole", 0), cls("no-such-class")]),
        "tenant-a",
        _unchanged,
        [
            (f"{ANN}[0].count", "invalid", "Invalid"),
            (f"{ANN}[1].className", "forbidden", "ClassNotFound"),
        ],
        id="bad-count-and-unknown-class",
    ),
    pytest.param(
        json.dumps([cls("gone", -1)]),
        "tenant-a",
        _host_device(RES["whole"]),
        [
            (f"{ANN}[0].count", "invalid", "Invalid"),
            ("spec.domain.devices.hostDevices[0].deviceName", "invalid", "RawRequestBesideClasses"),
            (f"{ANN}[0].className", "forbidden", "ClassDeleting"),
        ],
        id="bad-count-host-device-and-deleting-class",
    ),
    pytest.param(
        json.dumps([{"className": "capped", "count": 3, "cnt": 1}]),
        "tenant-a",
        _unchanged,
        [
            (f"{ANN}[0].cnt", "invalid", "Invalid"),
            (ANN, "invalid", "MaxCountExceeded"),
        ],
        id="unknown-key-and-over-max-count",
    ),
    pytest.param(
        json.dumps([cls("capped", 2), cls("capped", "1"), cls("capped", 1)]),
        "tenant-a",
        _unchanged,
        [
            (f"{ANN}[1].count", "invalid", "Invalid"),
            (ANN, "invalid", "MaxCountExceeded"),
        ],
        id="valid-counts-alone-over-the-limit",
    ),
    pytest.param(
        json.dumps([cls("byol", 0), cls("lic")]),
        "tenant-a",
        _unchanged,
        [
            (f"{ANN}[0].count", "invalid", "Invalid"),
            (ANN, "invalid", "MultipleVGPUClasses"),
        ],
        id="bad-count-and-two-vgpu-classes",
    ),
    pytest.param(
        json.dumps([cls("byol", True)]),
        "tenant-a",
        _worker_pool,
        [
            (f"{ANN}[0].count", "invalid", "Invalid"),
            (f"{ANN}[0].className", "forbidden", "WorkerPoolVGPU"),
        ],
        id="bad-count-and-vgpu-for-worker-pool",
    ),
    pytest.param(
        json.dumps([{"className": "Bad_Name"}]),
        "tenant-a",
        _gpus_whole,
        [
            (f"{ANN}[0].className", "invalid", "Invalid"),
            ("spec.domain.devices.gpus", "invalid", "RawRequestBesideClasses"),
        ],
        id="bad-class-name-and-raw-gpus",
    ),
    pytest.param(
        json.dumps([cls("lic", 0)]),
        "tenant-a",
        _own_license_volume,
        [(f"{ANN}[0].count", "invalid", "Invalid")],
        id="bad-count-keeps-its-own-license-volume",
    ),
    pytest.param(
        json.dumps([cls("lic", 0)]),
        "tenant-a",
        _reserved_disk,
        [
            (f"{ANN}[0].count", "invalid", "Invalid"),
            ("spec.volumes[1]", "invalid", "ReservedName"),
        ],
        id="bad-count-and-reserved-license-name",
    ),
    pytest.param(
        json.dumps([cls("no-such-class"), {"name": RES["whole"]}]),
        "tenant-a",
        _unchanged,
        [
            (ANN, "invalid", "Invalid"),
            (f"{ANN}[0].className", "forbidden", "ClassNotFound"),
        ],
        id="mixed-list-and-unknown-class",
    ),
    pytest.param(
        "[{className: whole",
        "tenant-c",
        _compose(_host_device(RES["byol"]), _cloud_init_license),
        [
            (ANN, "invalid", "Invalid"),
            ("spec.domain.devices.hostDevices[0].deviceName", "forbidden", "NotEntitled"),
            ("spec.volumes[1].cloudInitNoCloud.secretRef.name", "forbidden", "LicenseHandMounted"),
        ],
        id="not-json-raw-vgpu-and-hand-mount-still-judged",
    ),
    pytest.param(
        "[{className: lic",
        "tenant-a",
        _own_license_volume,
        [(ANN, "invalid", "Invalid")],
        id="not-json-license-volume-of-a-licensed-class-not-judged",
    ),
    pytest.param(
        OVER_BYTES,
        "tenant-c",
        _compose(_gpus_whole, _host_device(RES["lic"]), _hand_mount),
        [
            (ANN, "invalid", "SelectionTooLarge"),
            ("spec.domain.devices.hostDevices[0].deviceName", "forbidden", "NotEntitled"),
            ("spec.volumes[1].secret.secretName", "forbidden", "LicenseHandMounted"),
        ],
        id="over-byte-cap-raw-vgpu-and-hand-mount-still-judged",
    ),
    pytest.param(
        OVER_ENTRIES,
        "tenant-a",
        _host_device(RES["whole"]),
        [(ANN, "invalid", "SelectionTooLarge")],
        id="over-entry-cap-raw-request-beside-classes-not-judged",
    ),
]


@pytest.mark.parametrize(("raw", "namespace", "change", "causes"), EVERY_CAUSE_ROWS)
def test_every_cause_beside_an_invalid_selection(
    raw: str, namespace: str, change: Any, causes: list[tuple[str, str, str]]
) -> None:
    obj = vmi(raw=raw, namespace=namespace)
    change(obj)
    decision = create(obj)
    assert causes_of(decision) == causes
    assert isinstance(decision, Denied) and decision.code == 422
