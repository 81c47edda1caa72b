"""The in-use finalizer decision (docs/contract.md section 6) as data."""

from __future__ import annotations

import pytest

from gpuclass.reconciler.state.inuse import FinalizerChange, classes_in_use, finalizer_change
from gpuclass.shared.core.base import names
from gpuclass.shared.core.model.snapshot import ClassRecord, compact_class
from gpuclass.shared.core.model.vmiuse import VMIUse, compact_vmi_use

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


def vmi(
    selection: str | None,
    gpus: list[tuple[str, str]],
    *,
    namespace: str = "tenant-a",
) -> VMIUse:
    """A VMI as stored: the annotation (JSON text) and its GPU entries as (name, deviceName)."""
    meta: dict[str, object] = {"name": "vm", "namespace": namespace}
    if selection is not None:
        meta["annotations"] = {names.SELECTION_ANNOTATION: selection}
    entries = [{"name": n, "deviceName": d} for n, d in gpus]
    built = compact_vmi_use({"metadata": meta, "spec": {"domain": {"devices": {"gpus": entries}}}})
    assert built is not None
    return built


C, D = "example.com/c", "example.com/d"
ONE_C = '[{"className": "c"}]'


@pytest.mark.parametrize(
    ("vmis", "expected"),
    [
        pytest.param([vmi(ONE_C, [("gpu1", C)])], {"c"}, id="selected-and-resolved-uses"),
        pytest.param([vmi(ONE_C, [])], set(), id="annotation-alone-does-not-use"),
        pytest.param([vmi(None, [("gpu1", C)])], set(), id="raw-gpu-entry-alone-does-not-use"),
        # the class was renamed after admission: its VMs still hold it
        pytest.param([vmi(ONE_C, [("gpu1", "example.com/old")])], {"c"}, id="renamed-still-used"),
        pytest.param(
            [vmi('[{"className": "gone"}]', [("gpu1", "example.com/gone")])],
            set(),
            id="unknown-class-ignored",
        ),
        pytest.param(
            [
                vmi(
                    '[{"className": "c"}, {"className": "d", "count": 2}]',
                    [("gpu1", C), ("gpu2", D), ("gpu3", D)],
                )
            ],
            {"c", "d"},
            id="two-classes-one-vmi",
        ),
        pytest.param(
            [vmi('[{"className": "c"}, {"className": "c"}]', [("gpu1", C), ("gpu2", C)])],
            {"c"},
            id="repeated-entries-add-up",
        ),
        # shapes admission never writes: no record (a tenant cannot forge one)
        pytest.param([vmi(ONE_C, [("mine", C)])], set(), id="entry-not-named-gpuN"),
        pytest.param([vmi(ONE_C, [("gpu1", C), ("gpu2", C)])], set(), id="more-entries-than-count"),
        pytest.param(
            [vmi('[{"className": "c", "count": 2}]', [("gpu1", C)])],
            set(),
            id="fewer-entries-than-count",
        ),
        pytest.param(
            [vmi('[{"className": "c", "count": 2}]', [("gpu1", C), ("gpu2", D)])],
            set(),
            id="one-class-two-device-names",
        ),
        pytest.param(
            [vmi('[{"className": "c", "count": "1"}]', [("gpu1", C)])],
            set(),
            id="invalid-selection",
        ),
        pytest.param(
            [vmi(ONE_C, [("gpu1", C)], namespace="kube-system")],
            set(),
            id="outside-admission-in-kube-system",
        ),
        # admitted before docs/contract.md 4.1 capped the selection at 16 entries: still holds
        pytest.param(
            [
                vmi(
                    "[" + ", ".join([ONE_C[1:-1]] * 17) + "]",
                    [(f"gpu{i}", C) for i in range(1, 18)],
                )
            ],
            {"c"},
            id="stored-before-the-caps-still-uses",
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
