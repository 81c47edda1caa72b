"""The values the reconciler's store holds and hands out: a stored class, the copy record, the
dirty marks.

Kept apart from the store (:mod:`reconciler.state.store`) so that the worker and the writers
name these values without reaching into the store's indexing. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuclass.shared.core.base.meta import Key
from gpuclass.shared.core.model.snapshot import ClassRecord


@dataclass(frozen=True, slots=True)
class StoredClass:
    """A class as stored: its record, its raw status (compared whole) and its resourceVersion.

    `hold_version` is the resourceVersion at which its finalizers or deletion mark
    last changed: releasing the finalizer needs a VMI store at least that recent
    (status writes move `resource_version` but cannot let a VMI appear).
    """

    record: ClassRecord
    raw_status: Mapping[str, Any] | None
    resource_version: str
    hold_version: str = ""


@dataclass(frozen=True, slots=True)
class CopyRecord:
    """The record ConfigMap as the store holds it: its entries and its resourceVersion."""

    entries: Mapping[Key, str]
    resource_version: str


@dataclass(slots=True)
class Dirty:
    """What to look at again: class statuses, class finalizers, and the license copies
    (`verify_copies`: write every wanted copy again, recorded or not)."""

    statuses: set[str] = field(default_factory=set)
    finalizers: set[str] = field(default_factory=set)
    copies: bool = False
    verify_copies: bool = False

    def __bool__(self) -> bool:
        return bool(self.statuses or self.finalizers or self.copies)

    def __len__(self) -> int:
        return len(self.statuses) + len(self.finalizers) + int(self.copies)
