"""The in-use finalizer (docs/contract.md section 6): hold a class while a VMI uses it, never otherwise.

A VMI *uses* a class when it passed admission with it: its selection annotation
names the class and its GPU entries have exactly the shape the webhook writes
(:func:`shared.core.model.vmiuse.admitted_classes`). Either alone is not enough: an
annotation on a VMI that never went through the webhook asks for nothing, and a
raw `gpus` entry naming the same resource is not a class selection. The class's
*current* resourceName plays no part, so a renamed class keeps its finalizer
while VMs admitted under the old name run (docs/decisions.md).

The decision is a value: which finalizer list to write, or nothing. The
reconciler patches `metadata.finalizers` with it, guarded by resourceVersion.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from gpuclass.shared.core.base import names
from gpuclass.shared.core.model.snapshot import ClassRecord
from gpuclass.shared.core.model.vmiuse import VMIUse


def uses_class(vmi: VMIUse, class_name: str) -> bool:
    """Whether the VMI passed admission with the class (its admitted set), which alone holds the
    finalizer; the class's current resourceName plays no part."""
    return class_name in vmi.admitted


def classes_in_use(vmis: Iterable[VMIUse], classes: Mapping[str, ClassRecord]) -> frozenset[str]:
    """Names of the classes at least one VMI uses."""
    used: set[str] = set()
    for vmi in vmis:
        for name in vmi.classes:
            record = classes.get(name)
            if record is not None and uses_class(vmi, name):
                used.add(name)
    return frozenset(used)


@dataclass(frozen=True, slots=True)
class FinalizerChange:
    """One finalizer write: add ours or remove it, with the whole list to patch in, pinned to the
    class's resourceVersion by the worker."""

    action: Literal["add", "remove"]
    finalizers: tuple[str, ...]
    """The complete new `metadata.finalizers` list (other owners' entries kept, in order)."""


def finalizer_change(record: ClassRecord, *, in_use: bool) -> FinalizerChange | None:
    """What to write so that the finalizer is present exactly while the class is in use.

    A class that is being deleted cannot gain a finalizer (the API server refuses
    new finalizers then), so a deleting class is only ever released.
    """
    held = names.IN_USE_FINALIZER in record.finalizers
    if in_use and not held and not record.deleting:
        return FinalizerChange("add", (*record.finalizers, names.IN_USE_FINALIZER))
    if held and not in_use:
        kept = tuple(f for f in record.finalizers if f != names.IN_USE_FINALIZER)
        return FinalizerChange("remove", kept)
    return None
