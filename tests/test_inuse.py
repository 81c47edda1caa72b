"""The in-use finalizer decision (docs/contract.md section 6) as data."""

from __future__ import annotations

import pytest

from gpuclass.shared import names
from gpuclass.shared.inuse import FinalizerChange, classes_in_use, finalizer_change
from gpuclass.shared.snapshot import ClassRecord, compact_class
from gpuclass.shared.vmiuse import VMIUse

FIN = names.IN_USE_FINALIZER


def record(
    name: str = "c", *, finalizers: tuple[str, ...] = (), deleting: bool = False
) -> ClassRecord:
    meta: dict[str, object] = {"name": name, "finalizers": list(finalizers)}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    built = compact_class(
        {
            "metadata": meta,
            "spec": {
                "vendor": "v",
                "model": "m",
                "mode": "passthrough",
                "source": {"devicePlugin": {"resourceName": f"example.com/{name}"}},
            },
        }
    )
    assert built is not None
    return built


def vmi(classes: tuple[str, ...], devices: set[str]) -> VMIUse:
    return VMIUse("tenant-a", "vm", classes, frozenset(devices), None)


@pytest.mark.parametrize(
    ("vmis", "expected"),
    [
        pytest.param([vmi(("c",), {"example.com/c"})], {"c"}, id="selected-and-resolved-uses"),
        pytest.param([vmi(("c",), set())], set(), id="annotation-alone-does-not-use"),
        pytest.param([vmi((), {"example.com/c"})], set(), id="raw-gpu-entry-alone-does-not-use"),
        pytest.param([vmi(("c",), {"example.com/other"})], set(), id="other-resource-does-not-use"),
        pytest.param([vmi(("gone",), {"example.com/gone"})], set(), id="unknown-class-ignored"),
        pytest.param(
            [vmi(("c", "d"), {"example.com/c", "example.com/d"})],
            {"c", "d"},
            id="two-classes-one-vmi",
        ),
    ],
)
def test_classes_in_use(vmis: list[VMIUse], expected: set[str]) -> None:
    assert classes_in_use(vmis, {"c": record("c"), "d": record("d")}) == expected


@pytest.mark.parametrize(
    ("rec", "in_use", "expected"),
    [
        pytest.param(record(), True, FinalizerChange("add", (FIN,)), id="used-gets-finalizer"),
        pytest.param(
            record(finalizers=("other/x",)),
            True,
            FinalizerChange("add", ("other/x", FIN)),
            id="add-keeps-other-finalizers",
        ),
        pytest.param(record(finalizers=(FIN,)), True, None, id="used-and-held-nothing-to-do"),
        pytest.param(record(), False, None, id="unused-never-held"),
        pytest.param(
            record(finalizers=("a/b", FIN, "c/d")),
            False,
            FinalizerChange("remove", ("a/b", "c/d")),
            id="unused-released-others-kept",
        ),
        pytest.param(
            record(finalizers=(FIN,), deleting=True),
            False,
            FinalizerChange("remove", ()),
            id="deleting-unused-released",
        ),
        pytest.param(record(deleting=True), True, None, id="deleting-cannot-gain-finalizer"),
        pytest.param(
            record(finalizers=(FIN,), deleting=True), True, None, id="deleting-in-use-stays-held"
        ),
    ],
)
def test_finalizer_change(rec: ClassRecord, in_use: bool, expected: FinalizerChange | None) -> None:
    assert finalizer_change(rec, in_use=in_use) == expected
