"""The tolerant accessors of raw objects (shared/core/base/raw.py): wrong shapes read as absent.

Each row is an input and the exact value read; a step through anything but a dict (a list, a
string, None) ends the walk as absent, and a value of the wrong type reads as the empty value of
the accessor's type, never as an error.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuclass.shared.core.base.raw import dict_at, dig, list_at, metadata, str_at, str_map

VMI: dict[str, Any] = {
    "metadata": {"name": "vm", "labels": {"a": "b"}},
    "spec": {"domain": {"devices": {"gpus": [{"name": "gpu1"}], "disks": "oops"}}},
}


@pytest.mark.parametrize(
    ("obj", "path", "expected"),
    [
        pytest.param(VMI, ("metadata", "name"), "vm", id="found"),
        pytest.param(VMI, (), VMI, id="no-path-is-the-object"),
        pytest.param(VMI, ("metadata", "missing"), None, id="missing-key"),
        pytest.param(VMI, ("metadata", "name", "x"), None, id="through-a-string"),
        pytest.param(VMI, ("spec", "domain", "devices", "gpus", "0"), None, id="through-a-list"),
        pytest.param(None, ("a",), None, id="none-root"),
        pytest.param([{"a": 1}], ("a",), None, id="list-root"),
        pytest.param({"a": None}, ("a",), None, id="null-value"),
        pytest.param({"a": 0}, ("a",), 0, id="falsy-value-kept"),
    ],
)
def test_dig(obj: object, path: tuple[str, ...], expected: object) -> None:
    assert dig(obj, *path) == expected


@pytest.mark.parametrize(
    ("obj", "path", "expected"),
    [
        pytest.param(VMI, ("metadata", "labels"), {"a": "b"}, id="found"),
        pytest.param({"a": 1}, (), {"a": 1}, id="no-path-is-the-object"),
        pytest.param(VMI, ("spec", "domain", "devices", "disks"), {}, id="string-reads-empty"),
        pytest.param(VMI, ("spec", "domain", "devices", "gpus"), {}, id="list-reads-empty"),
        pytest.param(VMI, ("status",), {}, id="missing"),
        pytest.param(5, (), {}, id="int-root"),
        pytest.param(None, ("a", "b"), {}, id="none-root"),
    ],
)
def test_dict_at(obj: object, path: tuple[str, ...], expected: dict[str, Any]) -> None:
    assert dict_at(obj, *path) == expected


@pytest.mark.parametrize(
    ("obj", "path", "expected"),
    [
        pytest.param(VMI, ("spec", "domain", "devices", "gpus"), [{"name": "gpu1"}], id="found"),
        pytest.param([1, 2], (), [1, 2], id="no-path-is-the-object"),
        pytest.param(VMI, ("spec", "domain", "devices", "disks"), [], id="string-reads-empty"),
        pytest.param(VMI, ("metadata", "labels"), [], id="dict-reads-empty"),
        pytest.param(VMI, ("spec", "volumes"), [], id="missing"),
        pytest.param((1, 2), (), [], id="tuple-is-not-a-json-list"),
        pytest.param(None, (), [], id="none"),
    ],
)
def test_list_at(obj: object, path: tuple[str, ...], expected: list[Any]) -> None:
    assert list_at(obj, *path) == expected


@pytest.mark.parametrize(
    ("obj", "path", "expected"),
    [
        pytest.param(VMI, ("metadata", "name"), "vm", id="found"),
        pytest.param("x", (), "x", id="no-path-is-the-object"),
        pytest.param("", (), "", id="empty-string-kept"),
        pytest.param({"a": 7}, ("a",), None, id="int-reads-none"),
        pytest.param({"a": b"x"}, ("a",), None, id="bytes-read-none"),
        pytest.param(VMI, ("metadata", "labels"), None, id="dict-reads-none"),
        pytest.param(None, ("a",), None, id="none-root"),
    ],
)
def test_str_at(obj: object, path: tuple[str, ...], expected: str | None) -> None:
    assert str_at(obj, *path) == expected


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param(VMI, {"name": "vm", "labels": {"a": "b"}}, id="found"),
        pytest.param({"metadata": "x"}, {}, id="not-a-map"),
        pytest.param({}, {}, id="missing"),
        pytest.param([], {}, id="list-root"),
    ],
)
def test_metadata(obj: object, expected: dict[str, Any]) -> None:
    assert metadata(obj) == expected


def test_empty_results_are_new_each_time() -> None:
    """A caller may fill what it read as empty without changing what the next caller reads."""
    first, second = dict_at(None), dict_at(None)
    first["x"] = 1
    assert second == {}
    items = list_at(None)
    items.append(1)
    assert list_at(None) == []


def test_the_value_found_is_the_object_itself() -> None:
    """No copy is made: patches compare and index into the same lists the object holds."""
    gpus = VMI["spec"]["domain"]["devices"]["gpus"]
    assert list_at(VMI, "spec", "domain", "devices", "gpus") is gpus
    assert dict_at(VMI, "metadata") is VMI["metadata"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param({"a": "b"}, {"a": "b"}, id="strings"),
        pytest.param({"a": "b", "c": 1, "d": None, 5: "e"}, {"a": "b"}, id="others-dropped"),
        pytest.param(["a"], {}, id="list"),
        pytest.param(None, {}, id="none"),
    ],
)
def test_str_map(value: object, expected: dict[str, str]) -> None:
    assert str_map(value) == expected
