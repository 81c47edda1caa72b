"""Narrow JSON patches (docs/conventions.md rule 5): exact operations, JSON-pointer escaping, and what jsonpatch makes of them."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest

from gpuclass.shared.core.admission.patches import PatchBuilder, pointer

GPUS = ("spec", "domain", "devices", "gpus")
DISKS = ("spec", "domain", "devices", "disks")
TOLS = ("spec", "tolerations")
VOLS = ("spec", "volumes")
G1 = {"name": "gpu1", "deviceName": "example.com/gpu"}
D1 = {"name": "gpulicense", "serial": "GPULICENSE", "disk": {"bus": "virtio"}}
T1 = {"key": "a", "operator": "Exists"}
T2 = {"key": "b", "operator": "Exists"}


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        pytest.param(("spec", "tolerations"), "/spec/tolerations", id="plain"),
        pytest.param(("a~b",), "/a~0b", id="tilde"),
        pytest.param(("a/b",), "/a~1b", id="slash"),
        pytest.param(("~/",), "/~0~1", id="tilde-then-slash"),
        pytest.param(("/~",), "/~1~0", id="slash-then-tilde"),
        pytest.param(("~1",), "/~01", id="literal-tilde-one-not-double-decoded"),
        pytest.param(("",), "/", id="empty-key"),
        pytest.param((), "", id="root"),
    ],
)
def test_pointer_escaping(path: tuple[str, ...], expected: str) -> None:
    assert pointer(path) == expected
    # jsonpatch's own pointer reads it back to the same path.
    assert tuple(jsonpatch.JsonPointer(expected).parts) == path


Appends = list[tuple[tuple[str, ...], list[Any]]]


@pytest.mark.parametrize(
    ("obj", "appends", "operations", "result"),
    [
        pytest.param(
            {"spec": {"tolerations": [T1]}},
            [(TOLS, [T2])],
            [{"op": "add", "path": "/spec/tolerations/-", "value": T2}],
            {"spec": {"tolerations": [T1, T2]}},
            id="append-to-existing-list",
        ),
        pytest.param(
            {"spec": {"tolerations": [T1]}},
            [(TOLS, [T2, T1])],
            [
                {"op": "add", "path": "/spec/tolerations/-", "value": T2},
                {"op": "add", "path": "/spec/tolerations/-", "value": T1},
            ],
            {"spec": {"tolerations": [T1, T2, T1]}},
            id="append-several-items-in-order",
        ),
        pytest.param(
            {"spec": {"x": 1}},
            [(TOLS, [T1])],
            [{"op": "add", "path": "/spec/tolerations", "value": [T1]}],
            {"spec": {"x": 1, "tolerations": [T1]}},
            id="create-missing-list",
        ),
        pytest.param(
            {"spec": {"x": 1}},
            [(GPUS, [G1])],
            [{"op": "add", "path": "/spec/domain", "value": {"devices": {"gpus": [G1]}}}],
            {"spec": {"x": 1, "domain": {"devices": {"gpus": [G1]}}}},
            id="create-missing-containers",
        ),
        pytest.param(
            {"metadata": {}},
            [(GPUS, [G1])],
            [{"op": "add", "path": "/spec", "value": {"domain": {"devices": {"gpus": [G1]}}}}],
            {"metadata": {}, "spec": {"domain": {"devices": {"gpus": [G1]}}}},
            id="create-missing-spec",
        ),
        pytest.param(
            {"spec": {"domain": {"cpu": {"cores": 2}}}},
            [(GPUS, [G1]), (DISKS, [D1])],
            [
                {"op": "add", "path": "/spec/domain/devices", "value": {"gpus": [G1]}},
                {"op": "add", "path": "/spec/domain/devices/disks", "value": [D1]},
            ],
            {"spec": {"domain": {"cpu": {"cores": 2}, "devices": {"gpus": [G1], "disks": [D1]}}}},
            id="two-appends-under-one-new-parent-compose",
        ),
        pytest.param(
            {"spec": {}},
            [(GPUS, [G1]), (DISKS, [D1]), (VOLS, [{"name": "v"}])],
            [
                {"op": "add", "path": "/spec/domain", "value": {"devices": {"gpus": [G1]}}},
                {"op": "add", "path": "/spec/domain/devices/disks", "value": [D1]},
                {"op": "add", "path": "/spec/volumes", "value": [{"name": "v"}]},
            ],
            {
                "spec": {
                    "domain": {"devices": {"gpus": [G1], "disks": [D1]}},
                    "volumes": [{"name": "v"}],
                }
            },
            id="three-appends-two-new-parents",
        ),
        pytest.param(
            {"spec": {}},
            [(TOLS, [T1]), (TOLS, [T2])],
            [
                {"op": "add", "path": "/spec/tolerations", "value": [T1]},
                {"op": "add", "path": "/spec/tolerations/-", "value": T2},
            ],
            {"spec": {"tolerations": [T1, T2]}},
            id="second-append-to-created-list",
        ),
        pytest.param(
            {"spec": {"tolerations": None}},
            [(TOLS, [T1])],
            [{"op": "add", "path": "/spec/tolerations", "value": [T1]}],
            {"spec": {"tolerations": [T1]}},
            id="null-list-becomes-list",
        ),
        pytest.param(
            {"spec": {}},
            [(TOLS, [])],
            [],
            {"spec": {}},
            id="nothing-to-append-no-operation",
        ),
        pytest.param(
            {"metadata": {"annotations": {}}},
            [(("metadata", "annotations", "a/b~c"), ["x"])],
            [{"op": "add", "path": "/metadata/annotations/a~1b~0c", "value": ["x"]}],
            {"metadata": {"annotations": {"a/b~c": ["x"]}}},
            id="escaped-key",
        ),
    ],
)
def test_append(
    obj: dict[str, Any], appends: Appends, operations: list[Any], result: dict[str, Any]
) -> None:
    original = copy.deepcopy(obj)
    builder = PatchBuilder(obj)
    for path, items in appends:
        builder.append(path, items)
    assert builder.operations == operations
    assert jsonpatch.apply_patch(obj, builder.operations) == result
    assert obj == original, "the builder never mutates the object it reads"


def test_get_sees_created_and_original_values() -> None:
    obj = {"spec": {"volumes": [{"name": "root"}]}}
    builder = PatchBuilder(obj)
    assert builder.get(GPUS) is None
    builder.append(GPUS, [G1])
    assert builder.get(GPUS) == [G1]
    assert builder.get(("spec", "domain", "devices")) == {"gpus": [G1]}
    assert builder.get(VOLS) == [{"name": "root"}]
    assert builder.get(("spec", "volumes", "0")) is None, "lists are not indexed by get"


def test_items_are_never_modified() -> None:
    item = {"key": "a", "operator": "Exists"}
    frozen = copy.deepcopy(item)
    builder = PatchBuilder({"spec": {}})
    builder.append(TOLS, [item])
    builder.append(TOLS, [T2])
    builder.append(GPUS, [G1])
    assert item == frozen
    assert G1 == {"name": "gpu1", "deviceName": "example.com/gpu"}


def test_created_parent_in_earlier_operation_is_not_rewritten() -> None:
    builder = PatchBuilder({"spec": {}})
    builder.append(GPUS, [G1])
    first = copy.deepcopy(builder.operations[0])
    builder.append(DISKS, [D1])
    assert builder.operations[0] == first
