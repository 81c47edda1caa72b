"""VMI admission (docs/contract.md section 4): each rule 4.1-4.8 and UPDATE, with exact operations and causes.

The catalog is built here from raw objects, so every figure a row depends on is
visible in this file: class `whole` (passthrough, 8 units on its largest host, at
most 2 free on any Ready host), `capped` (maxCount 2), `fresh` (no node yet),
`big` (maxCount 2000), the vGPU classes `lic` (licensed), `byol` and `byol2`, and
the unavailable `gone` (deleting), `dup` (loses a conflict to `whole`),
`unpermitted` and `broken` (invalid spec). The last section shows that what a catalog remembers
of a selection never changes an answer.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import jsonpatch
import pytest

from gpuclass.shared.core.admission.decisions import Allowed, Decision, Denied
from gpuclass.shared.core.admission.mutate_vmi import admit
from gpuclass.shared.core.admission.resolution import (
    REMEMBERED_UNITS,
    RESOLUTIONS_REMEMBERED,
    judge_create,
)
from gpuclass.shared.core.model.snapshot import SnapshotBuilder
from gpuclass.shared.core.status.catalog import Catalog, Policy, build_catalog
from tests.builders import KUBEVIRT_DEVICES, KUBEVIRT_NODE_LABELS, admission_request

ANN_KEY = "gpu.cozystack.io/classes"
ANN = f"metadata.annotations[{ANN_KEY}]"
TOL_W = {"key": "gpu.example.com/dedicated", "operator": "Exists", "effect": "NoSchedule"}
TOL_F = {
    "key": "gpu.example.com/new",
    "operator": "Equal",
    "value": "yes",
    "effect": "NoExecute",
    "tolerationSeconds": 30,
}
RES = {
    "whole": "example.com/whole",
    "capped": "example.com/capped",
    "fresh": "example.com/fresh",
    "big": "example.com/big",
    "lic": "example.com/lic-vgpu",
    "byol": "example.com/byol-vgpu",
    "byol2": "example.com/byol2-vgpu",
    "gone": "example.com/gone",
    "unpermitted": "example.com/unpermitted",
    # Permitted by KubeVirt, named by no class: a mediated device (a vGPU) and a PCI device.
    "mdev": "example.com/unclassed-mdev",
    "pci": "example.com/unclassed-pci",
}
LICENSE_VOLUME = {
    "name": "gpulicense",
    "secret": {"secretName": "gpuclass-license-lic", "volumeLabel": "GPULICENSE"},
}
LICENSE_DISK = {"name": "gpulicense", "serial": "GPULICENSE", "disk": {"bus": "virtio"}}


def _class(name: str, resource: str, **spec: Any) -> dict[str, Any]:
    meta = spec.pop("metadata", {})
    body = {
        "vendor": "example",
        "model": "m",
        "mode": "passthrough",
        "source": {"devicePlugin": {"resourceName": resource}},
    }
    body.update(spec)
    return {"kind": "GPUClass", "metadata": {"name": name, **meta}, "spec": body}


def _node(
    name: str, allocatable: dict[str, str], *, ready: str = "True", taints: list[Any] | None = None
) -> dict[str, Any]:
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": dict(KUBEVIRT_NODE_LABELS)},
        "spec": {"taints": taints or []},
        "status": {
            "conditions": [{"type": "Ready", "status": ready}],
            "allocatable": {**KUBEVIRT_DEVICES, **allocatable},
        },
    }


VGPU = {"mode": "vgpu", "profile": "p"}
OBJECTS: list[dict[str, Any]] = [
    _class(
        "whole",
        RES["whole"],
        tolerations=[TOL_W],
        metadata={"creationTimestamp": "2026-01-01T00:00:00Z"},
    ),
    _class("dup", RES["whole"], metadata={"creationTimestamp": "2026-02-01T00:00:00Z"}),
    _class("capped", RES["capped"], maxCount=2),
    _class("fresh", RES["fresh"], tolerations=[TOL_F]),
    _class("big", RES["big"], maxCount=2000),
    _class("lic", RES["lic"], **VGPU, license={"secretName": "lic-src"}),
    _class("byol", RES["byol"], **VGPU),
    _class("byol2", RES["byol2"], **VGPU),
    _class("gone", RES["gone"], metadata={"deletionTimestamp": "2026-06-01T00:00:00Z"}),
    _class("unpermitted", RES["unpermitted"]),
    _class("broken", "example.com/broken", mode="mig"),
    _node(
        "n1",
        {RES["whole"]: "4"},
        taints=[{"key": "gpu.example.com/dedicated", "value": "true", "effect": "NoSchedule"}],
    ),
    _node("n2", {RES["whole"]: "8"}, ready="False"),
    _node(
        "n3",
        {
            RES["lic"]: "8",
            RES["byol"]: "8",
            RES["byol2"]: "8",
            RES["capped"]: "4",
            RES["big"]: "2000",
        },
    ),
    {
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "tenant-a"},
        "spec": {
            "nodeName": "n1",
            "containers": [{"name": "c", "resources": {"limits": {RES["whole"]: "2"}}}],
        },
        "status": {"phase": "Running"},
    },
    {
        "kind": "KubeVirt",
        "status": {"phase": "Deployed"},
        "metadata": {"name": "kubevirt", "namespace": "cozy-kubevirt"},
        "spec": {
            "configuration": {
                "permittedHostDevices": {
                    "pciHostDevices": [
                        {"resourceName": RES[n]}
                        for n in ("whole", "capped", "fresh", "big", "gone", "pci")
                    ],
                    "mediatedDevices": [
                        {"resourceName": RES[n]} for n in ("lic", "byol", "byol2", "mdev")
                    ],
                }
            }
        },
    },
    {"kind": "Namespace", "metadata": {"name": "tenant-root"}},
    {
        "kind": "Namespace",
        "metadata": {"name": "tenant-a", "labels": {"gpu.cozystack.io/vgpu": "true"}},
    },
    {"kind": "Namespace", "metadata": {"name": "tenant-c"}},
]


def catalog(*, vgpu_entitled: bool = True) -> Catalog:
    return build_catalog(
        SnapshotBuilder().add_all(OBJECTS), Policy(vgpu_entitled=vgpu_entitled), figures="computed"
    )


CATALOG = catalog()


def vmi(
    selection: Any = None,
    *,
    namespace: str = "tenant-a",
    raw: str | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    annotations = {"kubevirt.io/latest-observed-api-version": "v1"}
    if raw is not None:
        annotations[ANN_KEY] = raw
    elif selection is not None:
        annotations[ANN_KEY] = json.dumps(selection)
    meta: dict[str, Any] = {"name": "vm", "namespace": namespace, "annotations": annotations}
    if labels:
        meta["labels"] = labels
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": meta,
        "spec": {
            "domain": {
                "cpu": {"cores": 2},
                "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]},
            },
            "volumes": [{"name": "root", "containerDisk": {"image": "example.org/guest:1"}}],
        },
    }


def cls(name: str, count: int | None = None) -> dict[str, Any]:
    return {"className": name, **({"count": count} if count is not None else {})}


def create(
    obj: dict[str, Any], cat: Catalog = CATALOG, *, namespace: str | None = None
) -> Decision:
    ns = namespace if namespace is not None else obj["metadata"].get("namespace")
    return admit(admission_request(operation="CREATE", namespace=ns, object=obj), cat)


def update(obj: dict[str, Any], old: dict[str, Any], cat: Catalog = CATALOG) -> Decision:
    return admit(
        admission_request(operation="UPDATE", namespace="tenant-a", object=obj, oldObject=old), cat
    )


def gpus(*resources: str) -> list[dict[str, str]]:
    return [{"name": f"gpu{i}", "deviceName": r} for i, r in enumerate(resources, 1)]


def ops_of(decision: Decision) -> list[dict[str, Any]]:
    assert isinstance(decision, Allowed), decision
    return list(decision.operations)


def causes_of(decision: Decision) -> list[tuple[str, str, str]]:
    assert isinstance(decision, Denied), decision
    return [(c.field, c.kind, c.code) for c in decision.causes]


def applied(obj: dict[str, Any], decision: Decision) -> dict[str, Any]:
    result: dict[str, Any] = jsonpatch.apply_patch(obj, ops_of(decision))
    return result


def assert_reinvocation_is_a_no_op(obj: dict[str, Any], decision: Decision) -> None:
    again = create(applied(obj, decision))
    assert again == Allowed(
        operations=(), warnings=decision.warnings if isinstance(decision, Allowed) else ()
    )


# 4.1: the annotation is a JSON list of class or raw entries, counts are JSON integers >= 1.


def test_no_annotation_untouched() -> None:
    assert create(vmi()) == Allowed()


def test_empty_list_untouched() -> None:
    assert create(vmi([])) == Allowed()


@pytest.mark.parametrize(
    ("obj", "causes"),
    [
        pytest.param(vmi(raw="[{className"), [(ANN, "invalid", "Invalid")], id="not-json"),
        pytest.param(vmi({"className": "whole"}), [(ANN, "invalid", "Invalid")], id="not-a-list"),
        pytest.param(
            vmi([cls("whole", 0)]), [(f"{ANN}[0].count", "invalid", "Invalid")], id="count-zero"
        ),
        pytest.param(
            vmi([{"className": "whole", "count": 2.0}]),
            [(f"{ANN}[0].count", "invalid", "Invalid")],
            id="count-float",
        ),
        pytest.param(
            vmi([{"className": "whole", "count": "2"}]),
            [(f"{ANN}[0].count", "invalid", "Invalid")],
            id="count-string",
        ),
        pytest.param(
            vmi([{"className": "whole", "count": True}]),
            [(f"{ANN}[0].count", "invalid", "Invalid")],
            id="count-bool",
        ),
        pytest.param(vmi([{"name": RES["whole"]}]), [(ANN, "invalid", "Invalid")], id="raw-only"),
        pytest.param(
            vmi([cls("whole"), {"name": RES["whole"]}]), [(ANN, "invalid", "Invalid")], id="mixed"
        ),
        pytest.param(
            vmi([{"className": "whole", "cnt": 2}]),
            [(f"{ANN}[0].cnt", "invalid", "Invalid")],
            id="unknown-key",
        ),
    ],
)
def test_4_1_selection_refused(obj: dict[str, Any], causes: list[tuple[str, str, str]]) -> None:
    decision = create(obj)
    assert causes_of(decision) == causes
    assert isinstance(decision, Denied) and decision.code == 422


# 4.2: no other GPU request beside class entries.


def test_4_2_gpus_beside_classes_refused() -> None:
    obj = vmi([cls("whole")])
    obj["spec"]["domain"]["devices"]["gpus"] = [{"name": "mine", "deviceName": RES["whole"]}]
    assert causes_of(create(obj)) == [
        ("spec.domain.devices.gpus", "invalid", "RawRequestBesideClasses")
    ]


def test_4_2_gpus_beside_classes_refused_even_for_a_foreign_resource() -> None:
    obj = vmi([cls("whole")])
    obj["spec"]["domain"]["devices"]["gpus"] = [{"name": "mine", "deviceName": "other.example/gpu"}]
    assert causes_of(create(obj)) == [
        ("spec.domain.devices.gpus", "invalid", "RawRequestBesideClasses")
    ]


def test_4_2_already_resolved_yields_no_operations() -> None:
    obj = vmi([cls("whole", 2)])
    obj["spec"]["domain"]["devices"]["gpus"] = gpus(RES["whole"], RES["whole"])
    obj["spec"]["tolerations"] = [TOL_W]
    assert create(obj) == Allowed()


def test_4_2_resolved_gpus_but_missing_toleration_adds_only_the_toleration() -> None:
    obj = vmi([cls("whole", 2)])
    obj["spec"]["domain"]["devices"]["gpus"] = gpus(RES["whole"], RES["whole"])
    assert ops_of(create(obj)) == [{"op": "add", "path": "/spec/tolerations", "value": [TOL_W]}]


@pytest.mark.parametrize(
    ("where", "resource", "path"),
    [
        pytest.param(
            "hostDevices",
            RES["lic"],
            "spec.domain.devices.hostDevices[0].deviceName",
            id="host-device-other-class",
        ),
        pytest.param(
            "hostDevices",
            RES["whole"],
            "spec.domain.devices.hostDevices[0].deviceName",
            id="host-device-same-class",
        ),
        pytest.param(
            "requests",
            RES["whole"],
            f"spec.domain.resources.requests[{RES['whole']}]",
            id="resources-requests",
        ),
        pytest.param(
            "limits",
            RES["byol"],
            f"spec.domain.resources.limits[{RES['byol']}]",
            id="resources-limits",
        ),
        pytest.param(
            "requests",
            RES["unpermitted"],
            f"spec.domain.resources.requests[{RES['unpermitted']}]",
            id="any-catalog-class",
        ),
    ],
)
def test_4_2_catalog_resource_requested_beside_classes(
    where: str, resource: str, path: str
) -> None:
    obj = vmi([cls("whole")])
    if where == "hostDevices":
        obj["spec"]["domain"]["devices"]["hostDevices"] = [{"name": "hd", "deviceName": resource}]
    else:
        obj["spec"]["domain"]["resources"] = {where: {resource: "1", "memory": "1Gi"}}
    assert causes_of(create(obj)) == [(path, "invalid", "RawRequestBesideClasses")]


def test_4_2_foreign_host_device_beside_classes_is_fine() -> None:
    obj = vmi([cls("whole")])
    obj["spec"]["domain"]["devices"]["hostDevices"] = [
        {"name": "nic", "deviceName": "example.org/sriov-nic"}
    ]
    obj["spec"]["domain"]["resources"] = {"requests": {"memory": "8Gi"}}
    assert isinstance(create(obj), Allowed)


# 4.3: the class exists, is not deleting, owns its resource and is permitted (403).


@pytest.mark.parametrize(
    ("name", "code", "text"),
    [
        pytest.param(
            "no-such-class",
            "ClassNotFound",
            "class no-such-class is not in the catalog",
            id="not-found",
        ),
        pytest.param("gone", "ClassDeleting", "class gone is being deleted", id="deleting"),
        pytest.param(
            "dup",
            "ResourceNameConflict",
            "class whole already uses its resource",
            id="loses-conflict",
        ),
        pytest.param(
            "unpermitted",
            "ResourceNameNotPermitted",
            "not permitted by KubeVirt",
            id="not-permitted",
        ),
        pytest.param(
            "broken", "ClassInvalid", "class broken has an invalid spec", id="invalid-spec"
        ),
    ],
)
def test_4_3_unavailable_class_refused(name: str, code: str, text: str) -> None:
    decision = create(vmi([cls(name)]))
    assert causes_of(decision) == [(f"{ANN}[0].className", "forbidden", code)]
    assert isinstance(decision, Denied) and decision.code == 403
    assert text in decision.causes[0].message


@pytest.mark.parametrize(
    ("selection", "causes"),
    [
        pytest.param(
            [cls("gone"), cls("whole"), cls("gone")],
            [(f"{ANN}[0].className", "forbidden", "ClassDeleting")],
            id="deleting-class-twice-one-cause",
        ),
        pytest.param(
            [cls("no-such-class")] * 16,
            [(f"{ANN}[0].className", "forbidden", "ClassNotFound")],
            id="unknown-class-16-times-one-cause",
        ),
        pytest.param(
            [cls("whole"), cls("no-such-class"), cls("gone"), cls("no-such-class")],
            [
                (f"{ANN}[1].className", "forbidden", "ClassNotFound"),
                (f"{ANN}[2].className", "forbidden", "ClassDeleting"),
            ],
            id="each-bad-class-once-at-its-first-entry",
        ),
        pytest.param(
            [cls("byol")] * 3,
            [
                (ANN, "invalid", "MaxCountExceeded"),
                (f"{ANN}[0].className", "forbidden", "NotEntitled"),
            ],
            id="unentitled-vgpu-class-three-times-one-entitlement-cause",
        ),
    ],
)
def test_4_3_one_cause_per_distinct_class(
    selection: list[Any], causes: list[tuple[str, str, str]]
) -> None:
    """docs/decisions.md "Bounded work per review": a class repeated is judged once, at its first entry."""
    assert causes_of(create(vmi(selection, namespace="tenant-c"))) == causes


def test_4_3_without_kubevirt_nothing_is_permitted() -> None:
    objs = [o for o in OBJECTS if o["kind"] != "KubeVirt"]
    cat = build_catalog(
        SnapshotBuilder().add_all(objs), Policy(vgpu_entitled=True), figures="computed"
    )
    assert causes_of(create(vmi([cls("whole")]), cat)) == [
        (f"{ANN}[0].className", "forbidden", "ResourceNameNotPermitted")
    ]


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
                ("spec.volumes[1].secret.secretName", "forbidden", "LicenceHandMounted"),
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
                ("spec.volumes[1].secret.secretName", "forbidden", "LicenceHandMounted"),
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


def _cloud_init_licence(obj: dict[str, Any]) -> None:
    obj["spec"]["volumes"].append(
        {"name": "ci", "cloudInitNoCloud": {"secretRef": {"name": "gpuclass-license-lic"}}}
    )


def _own_licence_volume(obj: dict[str, Any]) -> None:
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
        _own_licence_volume,
        [(f"{ANN}[0].count", "invalid", "Invalid")],
        id="bad-count-keeps-its-own-licence-volume",
    ),
    pytest.param(
        json.dumps([cls("lic", 0)]),
        "tenant-a",
        _reserved_disk,
        [
            (f"{ANN}[0].count", "invalid", "Invalid"),
            ("spec.volumes[1]", "invalid", "ReservedName"),
        ],
        id="bad-count-and-reserved-licence-name",
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
        _compose(_host_device(RES["byol"]), _cloud_init_licence),
        [
            (ANN, "invalid", "Invalid"),
            ("spec.domain.devices.hostDevices[0].deviceName", "forbidden", "NotEntitled"),
            ("spec.volumes[1].cloudInitNoCloud.secretRef.name", "forbidden", "LicenceHandMounted"),
        ],
        id="not-json-raw-vgpu-and-hand-mount-still-judged",
    ),
    pytest.param(
        "[{className: lic",
        "tenant-a",
        _own_licence_volume,
        [(ANN, "invalid", "Invalid")],
        id="not-json-licence-volume-of-a-licensed-class-not-judged",
    ),
    pytest.param(
        OVER_BYTES,
        "tenant-c",
        _compose(_gpus_whole, _host_device(RES["lic"]), _hand_mount),
        [
            (ANN, "invalid", "SelectionTooLarge"),
            ("spec.domain.devices.hostDevices[0].deviceName", "forbidden", "NotEntitled"),
            ("spec.volumes[1].secret.secretName", "forbidden", "LicenceHandMounted"),
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


# 4.4: totals per class within the effective maxCount; 1024 in all; one vGPU class.


@pytest.mark.parametrize(
    ("selection", "namespace", "causes"),
    [
        pytest.param(
            [cls("whole", 8)], "tenant-a", [], id="passthrough-default-limit-is-max-units-per-node"
        ),
        pytest.param(
            [cls("whole", 9)],
            "tenant-a",
            [(ANN, "MaxCountExceeded")],
            id="passthrough-over-default-limit",
        ),
        pytest.param(
            [cls("whole", 5), cls("whole", 4)],
            "tenant-a",
            [(ANN, "MaxCountExceeded")],
            id="repeated-entries-add-up",
        ),
        pytest.param([cls("capped", 2)], "tenant-a", [], id="explicit-max-count"),
        pytest.param(
            [cls("capped", 3)],
            "tenant-a",
            [(ANN, "MaxCountExceeded")],
            id="over-explicit-max-count",
        ),
        pytest.param([cls("fresh", 50)], "tenant-a", [], id="no-node-yet-no-limit"),
        pytest.param(
            [cls("byol", 2)], "tenant-a", [(ANN, "MaxCountExceeded")], id="vgpu-default-limit-one"
        ),
        pytest.param(
            [cls("byol"), cls("byol")],
            "tenant-a",
            [(ANN, "MaxCountExceeded")],
            id="repeated-vgpu-over-limit",
        ),
        pytest.param([cls("big", 1024)], "tenant-a", [], id="1024-units"),
        pytest.param(
            [cls("big", 1025)], "tenant-a", [(ANN, "TooManyUnits")], id="over-1024-one-class"
        ),
        pytest.param(
            [cls("big", 1020), cls("whole", 5)],
            "tenant-a",
            [(ANN, "TooManyUnits")],
            id="over-1024-across-classes",
        ),
        pytest.param(
            [cls("byol"), cls("byol2")],
            "tenant-root",
            [(ANN, "MultipleVGPUClasses")],
            id="two-vgpu-classes",
        ),
        pytest.param([cls("byol"), cls("whole")], "tenant-root", [], id="one-vgpu-and-passthrough"),
    ],
)
def test_4_4_limits(selection: list[Any], namespace: str, causes: list[tuple[str, str]]) -> None:
    decision = create(vmi(selection, namespace=namespace))
    if causes:
        assert isinstance(decision, Denied), decision
        assert [(c.field, c.code) for c in decision.causes] == causes
        assert decision.code == 422
    else:
        assert isinstance(decision, Allowed), decision


@pytest.mark.parametrize(
    ("count", "shown"),
    [
        pytest.param(str(2**64), str(2**64), id="two-to-the-64"),
        pytest.param(str(2**64 - 1), str(2**64 - 1), id="largest-64-bit"),
        pytest.param(str(10**30), str(10**30), id="ten-to-the-30"),
        pytest.param("9" * 2000, "more than 10^40", id="two-thousand-digits"),
    ],
)
def test_4_4_huge_counts_get_the_limit_cause(count: str, shown: str) -> None:
    """A count past 64 bits is a whole number: far too many units, not "not a whole number"."""
    decision = create(vmi(raw=f'[{{"className": "whole", "count": {count}}}]'))
    assert causes_of(decision) == [
        (ANN, "invalid", "TooManyUnits"),
        (ANN, "invalid", "MaxCountExceeded"),
    ]
    assert isinstance(decision, Denied)
    assert decision.causes[0].message == f"requests {shown} GPU units; at most 1024 per VMI"


def test_4_4_messages_name_the_limit() -> None:
    decision = create(vmi([cls("whole", 9)]))
    assert isinstance(decision, Denied)
    assert decision.causes[0].message == "class whole: 9 units requested, at most 8 per VM"


def test_4_4_stored_figures_give_the_default_limit_in_a_cluster() -> None:
    # In a cluster the webhook reads status.maxUnitsPerNode instead of counting nodes.
    stored = copy.deepcopy(OBJECTS)
    stored[0]["status"] = {"maxUnitsPerNode": 3, "maxFreePerNode": 3}
    cat = build_catalog(
        SnapshotBuilder().add_all(stored), Policy(vgpu_entitled=True), figures="stored"
    )
    assert isinstance(create(vmi([cls("whole", 3)]), cat), Allowed)
    refused = create(vmi([cls("whole", 4)]), cat)
    assert isinstance(refused, Denied)
    assert [(c.field, c.code) for c in refused.causes] == [(ANN, "MaxCountExceeded")]


# 4.5: vGPU entitlement; worker pools take passthrough only (403).


@pytest.mark.parametrize(
    ("namespace", "entitled", "allowed"),
    [
        pytest.param("tenant-root", True, True, id="tenant-root"),
        pytest.param("tenant-a", True, True, id="labelled-tenant"),
        pytest.param("tenant-c", True, False, id="unlabelled-tenant"),
        pytest.param("default", True, False, id="outside-tenants"),
        pytest.param("tenant-root", False, False, id="platform-off"),
    ],
)
def test_4_5_vgpu_entitlement(namespace: str, entitled: bool, allowed: bool) -> None:
    decision = create(vmi([cls("byol")], namespace=namespace), catalog(vgpu_entitled=entitled))
    if allowed:
        assert isinstance(decision, Allowed)
    else:
        assert causes_of(decision) == [(f"{ANN}[0].className", "forbidden", "NotEntitled")]


def test_4_5_passthrough_needs_no_entitlement() -> None:
    assert isinstance(
        create(vmi([cls("whole")], namespace="default"), catalog(vgpu_entitled=False)), Allowed
    )


def test_4_5_namespace_from_object_when_request_has_none() -> None:
    obj = vmi([cls("byol")], namespace="tenant-c")
    decision = admit(admission_request(operation="CREATE", object=obj), CATALOG)
    assert causes_of(decision) == [(f"{ANN}[0].className", "forbidden", "NotEntitled")]


POOL = {"cluster.x-k8s.io/cluster-name": "tenant-a-k8s"}


def test_4_5_worker_pool_vgpu_refused() -> None:
    decision = create(vmi([cls("byol")], labels=POOL))
    assert causes_of(decision) == [(f"{ANN}[0].className", "forbidden", "WorkerPoolVGPU")]


@pytest.mark.parametrize(
    "label",
    [
        # cluster-api-provider-kubevirt v0.11.2, pkg/kubevirt/machine.go: on the VM template
        pytest.param("capk.cluster.x-k8s.io/kubevirt-machine-name", id="capk-machine-name"),
        pytest.param("capk.cluster.x-k8s.io/kubevirt-machine-namespace", id="capk-machine-ns"),
        pytest.param("cluster.x-k8s.io/cluster-name", id="cluster-name"),
    ],
)
def test_4_5_any_cluster_api_worker_label_marks_a_worker_pool(label: str) -> None:
    decision = create(vmi([cls("byol")], labels={label: "tenant-a-k8s-md0-x7k2p"}))
    assert causes_of(decision) == [(f"{ANN}[0].className", "forbidden", "WorkerPoolVGPU")]


def test_4_5_worker_pool_passthrough_allowed() -> None:
    assert ops_of(create(vmi([cls("whole", 2)], labels=POOL)))[0]["value"] == gpus(
        RES["whole"], RES["whole"]
    )


@pytest.mark.parametrize(
    ("where", "resource", "namespace", "refused"),
    [
        pytest.param("gpus", RES["byol"], "tenant-c", True, id="raw-vgpu-gpu-not-entitled"),
        pytest.param(
            "hostDevices", RES["lic"], "tenant-c", True, id="raw-vgpu-host-device-not-entitled"
        ),
        pytest.param("gpus", RES["byol"], "tenant-a", False, id="raw-vgpu-gpu-entitled"),
        pytest.param("gpus", RES["whole"], "tenant-c", False, id="raw-passthrough"),
        pytest.param("gpus", "other.example/gpu", "default", False, id="raw-foreign"),
        # A mediated device KubeVirt permits is a vGPU whether a class names it or not.
        pytest.param("gpus", RES["mdev"], "tenant-c", True, id="unclassed-mdev-gpu-unlabelled"),
        pytest.param(
            "hostDevices", RES["mdev"], "tenant-c", True, id="unclassed-mdev-host-device-unlabelled"
        ),
        pytest.param("gpus", RES["mdev"], "default", True, id="unclassed-mdev-outside-tenants"),
        pytest.param("gpus", RES["mdev"], "tenant-a", False, id="unclassed-mdev-entitled"),
        pytest.param("hostDevices", RES["mdev"], "tenant-root", False, id="unclassed-mdev-root"),
        pytest.param("gpus", RES["pci"], "tenant-c", False, id="unclassed-pci-device"),
    ],
)
def test_4_5_raw_entries(where: str, resource: str, namespace: str, refused: bool) -> None:
    obj = vmi(namespace=namespace)
    obj["spec"]["domain"]["devices"][where] = [{"name": "gpu1", "deviceName": resource}]
    decision = create(obj)
    if refused:
        assert causes_of(decision) == [
            (f"spec.domain.devices.{where}[0].deviceName", "forbidden", "NotEntitled")
        ]
    else:
        assert decision == Allowed(), "raw entries of other resources are untouched"


@pytest.mark.parametrize(
    ("section", "resource", "namespace", "vgpu_entitled", "refused"),
    [
        pytest.param("requests", RES["byol"], "tenant-c", True, True, id="requests-unlabelled"),
        pytest.param("limits", RES["lic"], "tenant-c", True, True, id="limits-unlabelled"),
        pytest.param("limits", RES["byol"], "default", True, True, id="limits-outside-tenants"),
        pytest.param("requests", RES["byol"], "tenant-root", False, True, id="platform-off"),
        pytest.param("requests", RES["byol"], "tenant-a", True, False, id="requests-entitled"),
        pytest.param("limits", RES["whole"], "tenant-c", True, False, id="passthrough-resource"),
        pytest.param("requests", "memory", "tenant-c", True, False, id="memory"),
        pytest.param("limits", RES["mdev"], "tenant-c", True, True, id="unclassed-mdev-limits"),
        pytest.param(
            "requests", RES["mdev"], "tenant-a", False, True, id="unclassed-mdev-platform-off"
        ),
        pytest.param("requests", RES["mdev"], "tenant-a", True, False, id="unclassed-mdev-ok"),
    ],
)
def test_4_5_raw_resource_requests_need_entitlement(
    section: str, resource: str, namespace: str, vgpu_entitled: bool, refused: bool
) -> None:
    """Naming the vGPU resource in domain.resources is no way around entitlement either."""
    obj = vmi(namespace=namespace)
    obj["spec"]["domain"]["resources"] = {section: {resource: "1"}}
    decision = create(obj, catalog(vgpu_entitled=vgpu_entitled))
    if refused:
        assert causes_of(decision) == [
            (f"spec.domain.resources.{section}[{resource}]", "forbidden", "NotEntitled")
        ]
        assert isinstance(decision, Denied) and decision.code == 403
    else:
        assert decision == Allowed()


def test_4_5_raw_entries_need_entitlement_for_platform_off() -> None:
    obj = vmi(namespace="tenant-root")
    obj["spec"]["domain"]["devices"]["hostDevices"] = [{"name": "h", "deviceName": RES["mdev"]}]
    decision = create(obj, catalog(vgpu_entitled=False))
    assert causes_of(decision) == [
        ("spec.domain.devices.hostDevices[0].deviceName", "forbidden", "NotEntitled")
    ]


@pytest.mark.parametrize(
    ("namespace", "causes"),
    [
        pytest.param(
            "tenant-c",
            [("spec.domain.devices.hostDevices[0].deviceName", "forbidden", "NotEntitled")],
            id="not-entitled",
        ),
        pytest.param("tenant-a", None, id="entitled"),
    ],
)
def test_4_5_unclassed_mdev_beside_a_passthrough_class(
    namespace: str, causes: list[tuple[str, str, str]] | None
) -> None:
    """Rule 2 refuses only catalog resources beside classes; a vGPU no class names still needs
    entitlement, so adding it next to a passthrough class is no way around rule 5."""
    obj = vmi([cls("whole")], namespace=namespace)
    obj["spec"]["domain"]["devices"]["hostDevices"] = [{"name": "h", "deviceName": RES["mdev"]}]
    decision = create(obj)
    if causes is None:
        assert ops_of(decision)
    else:
        assert causes_of(decision) == causes
        assert isinstance(decision, Denied) and decision.code == 403


def test_4_5_message_names_the_resource() -> None:
    obj = vmi(namespace="tenant-c")
    obj["spec"]["domain"]["devices"]["gpus"] = gpus(RES["mdev"])
    decision = create(obj)
    assert isinstance(decision, Denied)
    [cause] = decision.causes
    assert RES["mdev"] in cause.message and "vGPU" in cause.message
    assert "tenant-c" in cause.message


# 4.6: the result.


def test_4_6_whole_gpu_exact_operations() -> None:
    obj = vmi([cls("whole", 2)])
    decision = create(obj)
    assert ops_of(decision) == [
        {
            "op": "add",
            "path": "/spec/domain/devices/gpus",
            "value": gpus(RES["whole"], RES["whole"]),
        },
        {"op": "add", "path": "/spec/tolerations", "value": [TOL_W]},
    ]
    assert_reinvocation_is_a_no_op(obj, decision)


def test_4_6_classes_in_first_appearance_order_named_across_the_vmi() -> None:
    obj = vmi([cls("fresh"), cls("whole"), cls("fresh", 2)])
    decision = create(obj)
    assert ops_of(decision) == [
        {
            "op": "add",
            "path": "/spec/domain/devices/gpus",
            "value": gpus(RES["fresh"], RES["fresh"], RES["fresh"], RES["whole"]),
        },
        {"op": "add", "path": "/spec/tolerations", "value": [TOL_F]},
        {"op": "add", "path": "/spec/tolerations/-", "value": TOL_W},
    ]
    assert_reinvocation_is_a_no_op(obj, decision)


def test_4_6_licensed_vgpu_gets_volume_and_disk() -> None:
    obj = vmi([cls("lic")])
    decision = create(obj)
    assert ops_of(decision) == [
        {"op": "add", "path": "/spec/domain/devices/gpus", "value": gpus(RES["lic"])},
        {"op": "add", "path": "/spec/volumes/-", "value": LICENSE_VOLUME},
        {"op": "add", "path": "/spec/domain/devices/disks/-", "value": LICENSE_DISK},
    ]
    assert_reinvocation_is_a_no_op(obj, decision)


def test_4_6_byol_gets_no_license_volume() -> None:
    assert ops_of(create(vmi([cls("byol")]))) == [
        {"op": "add", "path": "/spec/domain/devices/gpus", "value": gpus(RES["byol"])},
    ]


def test_4_6_missing_containers_created() -> None:
    obj = vmi([cls("lic")])
    obj["spec"] = {"domain": {"memory": {"guest": "1Gi"}}, "futureField": {"x": [1, 2]}}
    decision = create(obj)
    assert ops_of(decision) == [
        {"op": "add", "path": "/spec/domain/devices", "value": {"gpus": gpus(RES["lic"])}},
        {"op": "add", "path": "/spec/volumes", "value": [LICENSE_VOLUME]},
        {"op": "add", "path": "/spec/domain/devices/disks", "value": [LICENSE_DISK]},
    ]
    assert applied(obj, decision)["spec"] == {
        "domain": {
            "memory": {"guest": "1Gi"},
            "devices": {"gpus": gpus(RES["lic"]), "disks": [LICENSE_DISK]},
        },
        "futureField": {"x": [1, 2]},
        "volumes": [LICENSE_VOLUME],
    }
    assert_reinvocation_is_a_no_op(obj, decision)


def test_4_6_identical_toleration_not_repeated_others_kept() -> None:
    obj = vmi([cls("whole"), cls("fresh")])
    similar = {**TOL_W, "effect": "NoExecute"}
    obj["spec"]["tolerations"] = [similar, TOL_W]
    decision = create(obj)
    assert ops_of(decision)[1:] == [{"op": "add", "path": "/spec/tolerations/-", "value": TOL_F}]
    assert applied(obj, decision)["spec"]["tolerations"] == [similar, TOL_W, TOL_F]


def test_4_6_unknown_fields_survive_and_nothing_is_reordered() -> None:
    obj = vmi([cls("lic")])
    obj["spec"]["domain"]["devices"]["someNewKubeVirtField"] = {"keep": True}
    obj["spec"]["x-unknown"] = "survives"
    obj["spec"]["volumes"].insert(0, {"name": "first", "emptyDisk": {"capacity": "1Gi"}})
    obj["status"] = {"phase": "Pending"}
    result = applied(obj, create(obj))
    assert result["spec"]["domain"]["devices"]["someNewKubeVirtField"] == {"keep": True}
    assert result["spec"]["x-unknown"] == "survives"
    assert result["spec"]["volumes"][:2] == obj["spec"]["volumes"]
    assert result["metadata"] == obj["metadata"] and result["status"] == obj["status"]


def test_4_6_reserved_license_name_clash_refused() -> None:
    obj = vmi([cls("lic")])
    obj["spec"]["volumes"].append({"name": "gpulicense", "emptyDisk": {"capacity": "1Gi"}})
    assert causes_of(create(obj)) == [("spec.volumes[1]", "invalid", "ReservedName")]


def test_4_6_reserved_disk_name_clash_refused() -> None:
    obj = vmi([cls("lic")])
    obj["spec"]["domain"]["devices"]["disks"].append({"name": "gpulicense", "cdrom": {}})
    assert causes_of(create(obj)) == [("spec.domain.devices.disks[1]", "invalid", "ReservedName")]


def test_4_6_license_volume_already_there_added_once() -> None:
    obj = vmi([cls("lic")])
    obj["spec"]["volumes"].append(copy.deepcopy(LICENSE_VOLUME))
    assert ops_of(create(obj))[1:] == [
        {"op": "add", "path": "/spec/domain/devices/disks/-", "value": LICENSE_DISK}
    ]


# 4.7: a shortage is a warning.


@pytest.mark.parametrize(
    ("count", "warnings"),
    [
        pytest.param(2, (), id="enough-free"),
        pytest.param(
            3, ("class whole: no node has 3 free units now; the VM will wait",), id="shortage-warns"
        ),
    ],
)
def test_4_7_capacity_shortage(count: int, warnings: tuple[str, ...]) -> None:
    decision = create(vmi([cls("whole", count)]))
    assert isinstance(decision, Allowed)
    assert decision.warnings == warnings


def test_4_7_no_stored_status_no_warning() -> None:
    cat = build_catalog(
        SnapshotBuilder().add_all(OBJECTS), Policy(vgpu_entitled=True), figures="stored"
    )
    decision = create(vmi([cls("fresh", 3)]), cat)
    assert isinstance(decision, Allowed) and decision.warnings == ()


# 4.8: no licence copy reaches a guest except as the licence volume of its own licensed class.
# Every place KubeVirt resolves a Secret from (shared/core/admission/secretrefs.py lists them) is one row.

COPY = "gpuclass-license-lic"


def _volume(volume: dict[str, Any]) -> Any:
    return lambda spec: spec["volumes"].append(volume)


def _credential(credential: dict[str, Any]) -> Any:
    return lambda spec: spec.setdefault("accessCredentials", []).append(credential)


def _pull_secret(spec: dict[str, Any]) -> None:
    spec["volumes"][0]["containerDisk"]["imagePullSecret"] = COPY


def _kernel_boot(spec: dict[str, Any]) -> None:
    spec["domain"]["firmware"] = {
        "kernelBoot": {"container": {"image": "example.org/k:1", "imagePullSecret": COPY}}
    }


SSH_KEY = {
    "sshPublicKey": {
        "source": {"secret": {"secretName": COPY}},
        "propagationMethod": {"noCloud": {}},
    }
}
PASSWORD = {
    "userPassword": {
        "source": {"secret": {"secretName": COPY}},
        "propagationMethod": {"qemuGuestAgent": {}},
    }
}
REFERENCE_ROWS = [
    pytest.param(
        None,
        _volume({"name": "lic", "secret": {"secretName": COPY}}),
        ["spec.volumes[1].secret.secretName"],
        id="secret-volume",
    ),
    pytest.param(
        None,
        _volume({"name": "ci", "cloudInitNoCloud": {"secretRef": {"name": COPY}}}),
        ["spec.volumes[1].cloudInitNoCloud.secretRef.name"],
        id="no-cloud-user-data-secret",
    ),
    pytest.param(
        None,
        _volume({"name": "ci", "cloudInitNoCloud": {"networkDataSecretRef": {"name": COPY}}}),
        ["spec.volumes[1].cloudInitNoCloud.networkDataSecretRef.name"],
        id="no-cloud-network-data-secret",
    ),
    pytest.param(
        None,
        _volume({"name": "ci", "cloudInitConfigDrive": {"secretRef": {"name": COPY}}}),
        ["spec.volumes[1].cloudInitConfigDrive.secretRef.name"],
        id="config-drive-user-data-secret",
    ),
    pytest.param(
        None,
        _volume({"name": "ci", "cloudInitConfigDrive": {"networkDataSecretRef": {"name": COPY}}}),
        ["spec.volumes[1].cloudInitConfigDrive.networkDataSecretRef.name"],
        id="config-drive-network-data-secret",
    ),
    pytest.param(
        None,
        _volume({"name": "sp", "sysprep": {"secret": {"name": COPY}}}),
        ["spec.volumes[1].sysprep.secret.name"],
        id="sysprep-secret",
    ),
    pytest.param(
        None,
        _pull_secret,
        ["spec.volumes[0].containerDisk.imagePullSecret"],
        id="container-disk-pull-secret",
    ),
    pytest.param(
        None,
        _kernel_boot,
        ["spec.domain.firmware.kernelBoot.container.imagePullSecret"],
        id="kernel-boot-pull-secret",
    ),
    pytest.param(
        None,
        _credential(SSH_KEY),
        ["spec.accessCredentials[0].sshPublicKey.source.secret.secretName"],
        id="ssh-key-no-selection",
    ),
    pytest.param(
        [cls("byol")],
        _credential(SSH_KEY),
        ["spec.accessCredentials[0].sshPublicKey.source.secret.secretName"],
        id="ssh-key-byol-no-cloud",
    ),
    pytest.param(
        [cls("lic")],
        _credential(SSH_KEY),
        ["spec.accessCredentials[0].sshPublicKey.source.secret.secretName"],
        id="ssh-key-from-own-licence-copy",
    ),
    pytest.param(
        None,
        _credential(PASSWORD),
        ["spec.accessCredentials[0].userPassword.source.secret.secretName"],
        id="user-password",
    ),
    pytest.param(
        [cls("byol")],
        _volume({**LICENSE_VOLUME}),
        ["spec.volumes[1].secret.secretName"],
        id="byol-with-platform-licence",
    ),
    pytest.param(
        [cls("whole")],
        _volume({"name": "x", "secret": {"secretName": "gpuclass-license-other"}}),
        ["spec.volumes[1].secret.secretName"],
        id="passthrough-with-licence",
    ),
    pytest.param(
        [cls("lic")],
        _volume({"name": "x", "secret": {"secretName": "gpuclass-license-byol"}}),
        ["spec.volumes[1].secret.secretName"],
        id="another-class-copy",
    ),
    pytest.param(
        [cls("lic")],
        _volume({"name": "x", "secret": {"secretName": COPY}}),
        ["spec.volumes[1].secret.secretName"],
        id="own-copy-under-another-volume-name",
    ),
    pytest.param(
        None,
        _volume({"name": "x", "secret": {"secretName": COPY}, "extra": {"secretName": COPY}}),
        ["spec.volumes[1].secret.secretName", "spec.volumes[1].extra.secretName"],
        id="every-reference-reported",
    ),
    pytest.param([cls("lic")], _volume({**LICENSE_VOLUME}), [], id="own-licence-volume"),
    pytest.param(
        None,
        _volume({"name": "s", "secret": {"secretName": "my-own-secret"}}),
        [],
        id="unrelated-secret",
    ),
    pytest.param(
        None,
        _credential({"sshPublicKey": {"source": {"secret": {"secretName": "my-keys"}}}}),
        [],
        id="unrelated-ssh-key",
    ),
]


@pytest.mark.parametrize(("selection", "change", "paths"), REFERENCE_ROWS)
def test_4_8_license_copy_references(selection: Any, change: Any, paths: list[str]) -> None:
    obj = vmi(selection)
    change(obj["spec"])
    decision = create(obj)
    if paths:
        assert causes_of(decision) == [(p, "forbidden", "LicenceHandMounted") for p in paths]
        assert isinstance(decision, Denied) and decision.code == 403
    else:
        assert isinstance(decision, Allowed)


def test_4_8_license_volume_not_exactly_ours_is_invalid_and_forbidden() -> None:
    obj = vmi([cls("lic")])
    obj["spec"]["volumes"].append({**LICENSE_VOLUME, "secret": {"secretName": COPY}})
    decision = create(obj)
    assert causes_of(decision) == [
        ("spec.volumes[1].secret.secretName", "forbidden", "LicenceHandMounted"),
        ("spec.volumes[1]", "invalid", "ReservedName"),
    ]
    assert isinstance(decision, Denied) and decision.code == 422


# UPDATE: the selection is immutable; rule 8 applies to the new object; everything else passes.


@pytest.mark.parametrize(
    ("old", "new", "verb"),
    [
        pytest.param(vmi(), vmi([cls("whole")]), "added", id="added"),
        pytest.param(vmi([cls("whole")]), vmi([cls("whole", 2)]), "changed", id="changed"),
        pytest.param(vmi([cls("whole")]), vmi(), "removed", id="removed"),
        pytest.param(
            vmi([cls("whole")]),
            vmi(raw='[{"className":"whole"}]'),
            "changed",
            id="reformatted-is-changed",
        ),
    ],
)
def test_update_selection_immutable(old: dict[str, Any], new: dict[str, Any], verb: str) -> None:
    decision = update(new, old)
    assert causes_of(decision) == [(ANN, "invalid", "SelectionImmutable")]
    assert isinstance(decision, Denied) and f"cannot be {verb}" in decision.causes[0].message


def test_update_unrelated_change_passes_untouched() -> None:
    old = vmi([cls("whole")])
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"kubevirt.io/nodeName": "n1"}
    new["spec"]["domain"]["devices"]["gpus"] = [{"name": "anything", "deviceName": "x/y"}]
    assert update(new, old) == Allowed()


@pytest.mark.parametrize(("selection", "change", "paths"), REFERENCE_ROWS)
def test_update_new_license_copy_reference_refused(
    selection: Any, change: Any, paths: list[str]
) -> None:
    old = vmi(selection)
    new = copy.deepcopy(old)
    change(new["spec"])
    decision = update(new, old)
    if paths:
        assert causes_of(decision) == [(p, "forbidden", "LicenceHandMounted") for p in paths]
    else:
        assert decision == Allowed()


def test_update_keeps_references_the_stored_object_already_had() -> None:
    old = vmi()
    _credential(SSH_KEY)(old["spec"])
    new = copy.deepcopy(old)
    new["metadata"]["finalizers"] = []
    assert update(new, old) == Allowed()


def test_update_pointing_an_existing_reference_at_a_copy_refused() -> None:
    old = vmi()
    _credential({"sshPublicKey": {"source": {"secret": {"secretName": "my-keys"}}}})(old["spec"])
    new = copy.deepcopy(old)
    new["spec"]["accessCredentials"][0]["sshPublicKey"]["source"]["secret"]["secretName"] = COPY
    assert causes_of(update(new, old)) == [
        (
            "spec.accessCredentials[0].sshPublicKey.source.secret.secretName",
            "forbidden",
            "LicenceHandMounted",
        )
    ]


def test_update_keeps_the_license_it_was_admitted_with_even_if_class_is_gone() -> None:
    old = applied(vmi([cls("lic")]), create(vmi([cls("lic")])))
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"x": "y"}
    without_class = build_catalog(
        SnapshotBuilder().add_all([o for o in OBJECTS if o["metadata"]["name"] != "lic"]),
        Policy(vgpu_entitled=True),
        figures="computed",
    )
    assert update(new, old, without_class) == Allowed()
    assert update(new, old) == Allowed()


def test_update_of_a_vmi_stored_before_the_caps_passes() -> None:
    """A VMI admitted with 17 entries before docs/contract.md 4.1 capped them keeps its licence."""
    old = vmi(raw=json.dumps([cls("lic")] * 17))
    old["spec"]["volumes"].append(copy.deepcopy(LICENSE_VOLUME))
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"kubevirt.io/nodeName": "n3"}
    assert update(new, old) == Allowed()
    moved = copy.deepcopy(new)
    moved["spec"]["volumes"].append({"name": "x", "secret": {"secretName": "gpuclass-license-lic"}})
    assert causes_of(update(moved, old)) == [
        ("spec.volumes[2].secret.secretName", "forbidden", "LicenceHandMounted")
    ]


@pytest.mark.parametrize("operation", ["DELETE", "CONNECT"])
def test_other_operations_pass(operation: str) -> None:
    assert (
        admit(admission_request(operation=operation, oldObject=vmi([cls("gone")])), CATALOG)
        == Allowed()
    )


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_missing_object_refused(operation: str) -> None:
    decision = admit(admission_request(operation=operation), CATALOG)
    assert causes_of(decision) == [("object", "invalid", "Invalid")]


# What a catalog remembers of a selection (`resolution.resolve`) never changes an answer: a review
# resolves its annotation once per catalog and reuses it, while everything that depends on the
# object (namespace, labels, existing GPUs and tolerations, Secret references) is judged again.
# Each row is judged on a catalog that has the same annotations in memory from other objects, and
# must give the contract's answer (section 4) and that of a catalog that remembers nothing.

Edit = Callable[[dict[str, Any]], None]


def _with_toleration(obj: dict[str, Any]) -> None:
    obj["spec"]["tolerations"] = [TOL_W]


def _with_gpus(obj: dict[str, Any]) -> None:
    obj["spec"]["domain"]["devices"]["gpus"] = gpus(RES["pci"])


def _pool(obj: dict[str, Any]) -> None:
    obj["metadata"]["labels"] = dict(POOL)


def _unentitled(obj: dict[str, Any]) -> None:
    obj["metadata"]["namespace"] = "tenant-c"


# (selection, how the object differs from the plain VMI, the contract's answer: the causes'
# codes, or the operations' paths when allowed)
ROWS: list[Any] = [
    pytest.param(
        [cls("whole", 2)], None, ["/spec/domain/devices/gpus", "/spec/tolerations"], id="plain"
    ),
    pytest.param(
        [cls("whole", 2)], _with_toleration, ["/spec/domain/devices/gpus"], id="toleration-present"
    ),
    pytest.param(
        [cls("whole", 2)], _with_gpus, ["RawRequestBesideClasses"], id="gpus-beside-classes"
    ),
    pytest.param([cls("byol")], None, ["/spec/domain/devices/gpus"], id="vgpu-entitled"),
    pytest.param([cls("byol")], _unentitled, ["NotEntitled"], id="vgpu-unentitled-namespace"),
    pytest.param([cls("byol")], _pool, ["WorkerPoolVGPU"], id="vgpu-worker-pool"),
]


def _answer(obj: dict[str, Any], cat: Catalog) -> list[str]:
    decision = create(obj, cat)
    if isinstance(decision, Denied):
        return [str(c.code) for c in decision.causes]
    return [op["path"] for op in decision.operations]


@pytest.mark.parametrize(("selection", "edit", "expected"), ROWS)
def test_an_annotation_seen_before_is_judged_on_each_object(
    selection: list[dict[str, Any]], edit: Edit | None, expected: list[str]
) -> None:
    remembering = catalog()
    for row in ROWS:  # every row's annotation in memory, judged on other objects first
        create(vmi(row.values[0]), remembering)
        create(vmi(row.values[0], namespace="tenant-c"), remembering)
    obj = vmi(selection)
    if edit:
        edit(obj)
    first, second = _answer(obj, remembering), _answer(obj, remembering)
    assert first == second == expected
    assert create(obj, remembering) == create(obj, catalog())  # a catalog with nothing remembered
    assert json.dumps(selection) in remembering.remembered


def test_a_new_catalog_remembers_nothing_of_the_old_one() -> None:
    # `capped` allows 2 units per VM; a catalog built after the class changed to 1 refuses 2.
    before = catalog()
    obj = vmi([cls("capped", 2)])
    assert isinstance(create(obj, before), Allowed)
    objects = [copy.deepcopy(o) for o in OBJECTS]
    for o in objects:
        if o["metadata"]["name"] == "capped":
            o["spec"]["maxCount"] = 1
    after = build_catalog(
        SnapshotBuilder().add_all(objects), Policy(vgpu_entitled=True), figures="computed"
    )
    decision = create(obj, after)
    assert isinstance(decision, Denied)
    assert [(c.field, c.code) for c in decision.causes] == [(ANN, "MaxCountExceeded")]
    assert isinstance(create(obj, before), Allowed)  # the old catalog still answers as it did


def test_the_memory_is_bounded_whatever_a_tenant_sends() -> None:
    cat = catalog()
    for spaces in range(3 * RESOLUTIONS_REMEMBERED):  # as many distinct annotations
        obj = vmi(raw="[" + " " * spaces + json.dumps(cls("whole", 1)) + "]")
        assert isinstance(create(obj, cat), Allowed)
        assert len(cat.remembered) <= RESOLUTIONS_REMEMBERED
    # A resolution of more units than an honest VM asks for is judged, never kept.
    big = vmi([cls("big", REMEMBERED_UNITS + 1)])
    assert len(ops_of_gpus(create(big, cat))) == REMEMBERED_UNITS + 1
    assert big["metadata"]["annotations"][ANN_KEY] not in cat.remembered


def ops_of_gpus(decision: Any) -> list[dict[str, Any]]:
    assert isinstance(decision, Allowed), decision
    return [e for op in decision.operations if op["path"].endswith("/gpus") for e in op["value"]]


def test_changing_an_answer_does_not_change_the_next_one() -> None:
    cat = catalog()
    obj = vmi([cls("whole", 2)])
    first = judge_create(obj, "tenant-a", catalog=cat)
    patched = jsonpatch.apply_patch(obj, list(first.operations))
    for entry in patched["spec"]["domain"]["devices"]["gpus"]:  # a caller edits what it got
        entry["deviceName"] = "example.com/other"
    assert first.gpus is not None
    for entry in first.gpus:
        entry["name"] = "edited"
    again = judge_create(obj, "tenant-a", catalog=cat)
    assert again.gpus == tuple(gpus(RES["whole"], RES["whole"]))


@pytest.mark.parametrize(
    ("where", "value"),
    [
        pytest.param(("spec", "volumes"), True, id="volumes-true"),
        pytest.param(("spec", "volumes"), 1.5, id="volumes-number"),
        pytest.param(("spec", "domain", "devices", "disks"), 1, id="disks-number"),
        pytest.param(("spec", "domain", "devices", "disks"), {"name": "x"}, id="disks-object"),
    ],
)
def test_a_licence_list_that_is_not_a_list_is_refused(where: tuple[str, ...], value: Any) -> None:
    """The VMI schema is checked only after mutating admission, so the webhook meets these;
    the licence volume and disk are appended to lists (section 4, rule 8), never in place of a
    tenant's value."""
    obj = vmi([cls("lic")])
    parent = obj
    for key in where[:-1]:
        parent = parent[key]
    parent[where[-1]] = value
    decision = create(obj)
    assert (".".join(where), "invalid", "Invalid") in causes_of(decision)
    assert isinstance(decision, Denied) and decision.code == 422


def test_rule_8_looks_at_each_volume_once_whatever_the_licensed_classes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """O(volumes + classes): the licence volume a volume could be is the one its Secret names.
    A 1 MB VMI against 256 licensed classes compared every volume with every class (1.6 s per
    decision, in the webhook too); the comparisons are counted here, not timed."""
    from gpuclass.shared.core.admission import rules

    built: list[str] = []
    real = rules.license_volume

    def counted(name: str) -> dict[str, Any]:
        built.append(name)
        return real(name)

    monkeypatch.setattr(rules, "license_volume", counted)
    licensed = [f"lic-{i}" for i in range(256)]
    volumes = [
        {"name": f"v{i}", "secret": {"secretName": f"gpuclass-license-lic-{i % 300}"}}
        for i in range(1000)
    ]
    volumes.append(real("lic-7"))  # the one exact licence volume
    refs = rules.own_license_volume_refs({"spec": {"volumes": volumes}}, licensed)
    assert refs == {("spec.volumes[1000].secret.secretName", "gpuclass-license-lic-7")}
    assert len(built) <= len(volumes), f"{len(built)} licence volumes built for {len(volumes)}"
