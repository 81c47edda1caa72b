"""The tenant's class selection: the `gpu.cozystack.io/classes` annotation (docs/contract.md 4.1).

The application chart renders the tenant's `gpus` values list into the
annotation as JSON. Parsing reports every problem with its path; it does not
look classes up (that is :mod:`shared.resolution`'s job).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import orjson

from gpuclass.shared import k8s, names
from gpuclass.shared.admission import Cause, invalid, json_kind

ANNOTATION_PATH = f"metadata.annotations[{names.SELECTION_ANNOTATION}]"
_KNOWN_KEYS = frozenset({"className", "name", "count"})


@dataclass(frozen=True, slots=True)
class ClassEntry:
    class_name: str
    count: int
    index: int

    @property
    def path(self) -> str:
        return f"{ANNOTATION_PATH}[{self.index}]"


@dataclass(frozen=True, slots=True)
class Selection:
    """Parsed class entries (empty when there is no selection) and every parse problem."""

    entries: tuple[ClassEntry, ...]
    causes: tuple[Cause, ...]


NO_SELECTION = Selection((), ())


def _is_count(value: object) -> bool:
    return type(value) is int and value >= 1


def _entry(index: int, entry: object) -> tuple[str | None, ClassEntry | None, list[Cause]]:
    """Kind of entry ('class', 'raw' or None), the class entry, and its causes."""
    path = f"{ANNOTATION_PATH}[{index}]"
    if not isinstance(entry, dict):
        return (
            None,
            None,
            [
                invalid(
                    path,
                    "each entry must be an object with className (and count) or name "
                    f"(got {json_kind(entry)})",
                )
            ],
        )
    causes = [
        invalid(f"{path}.{key}", "unknown key: an entry has className and count, or name")
        for key in entry
        if key not in _KNOWN_KEYS
    ]
    has_class, has_name = "className" in entry, "name" in entry
    if has_class == has_name:
        causes.append(invalid(path, "select exactly one of className and name"))
        return None, None, causes
    if has_name:
        if not isinstance(entry["name"], str) or not entry["name"]:
            causes.append(invalid(f"{path}.name", "must be a non-empty resource name"))
        if "count" in entry:
            causes.append(invalid(f"{path}.count", "count belongs to class entries only"))
        return "raw", None, causes
    class_name = entry["className"]
    if not isinstance(class_name, str) or k8s.dns_label_error(class_name):
        causes.append(
            invalid(f"{path}.className", "must be a class name from the catalog (a DNS label)")
        )
        class_name = None
    count = entry.get("count", 1)
    if not _is_count(count):
        causes.append(
            invalid(f"{path}.count", f"must be a whole number of at least 1 (got {_show(count)})")
        )
    if causes or class_name is None:
        return "class", None, causes
    return "class", ClassEntry(class_name, count, index), causes


def _show(value: object) -> str:
    """The received value, short; integers beyond 64 bits too (orjson cannot dump those)."""
    if isinstance(value, float | int) and not isinstance(value, bool):
        text = repr(value)
    else:
        text = orjson.dumps(value).decode()
    return text if len(text) <= 40 else text[:37] + "..."


MAX_INT_DIGITS = 40
"""Longer integer literals are read as 10**40: still "too many units", never a slow parse."""
_HUGE = int("1" + "0" * MAX_INT_DIGITS)


_LONG_NUMBER = re.compile(r"\d{20}")
"""20 digits or more: possibly an integer of 2**64 or more."""


def _load(raw: str) -> object:
    """Parse the annotation, integers kept as integers.

    orjson (fast) reads an integer of 2**64 or more as a float, so a count like
    18446744073709551616 would be refused as "not a whole number"; it is a whole
    number, and far too many units (the limit cause). Text with such a long digit
    run, or that orjson refuses, goes to the standard parser, which keeps them
    exact. NaN and Infinity are not JSON for either.
    """
    if not _LONG_NUMBER.search(raw):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    return json.loads(raw, parse_int=_parse_int, parse_constant=_no_constant)


def _parse_int(text: str) -> int:
    digits = text.lstrip("-")
    if len(digits) > MAX_INT_DIGITS:
        return -_HUGE if text.startswith("-") else _HUGE
    return int(text)


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def parse_selection(raw: str | None) -> Selection:
    """Parse the annotation value. None or `[]` means no selection."""
    if raw is None:
        return NO_SELECTION
    try:
        value = _load(raw)
    except (ValueError, RecursionError):  # decode errors of both parsers; json's deep nesting
        return Selection(
            (),
            (
                invalid(
                    ANNOTATION_PATH,
                    'must be a JSON list of GPU entries, e.g. [{"className": "x", "count": 1}]',
                ),
            ),
        )
    if not isinstance(value, list):
        return Selection(
            (),
            (
                invalid(
                    ANNOTATION_PATH, f"must be a JSON list of GPU entries (got {json_kind(value)})"
                ),
            ),
        )
    entries: list[ClassEntry] = []
    causes: list[Cause] = []
    kinds: set[str] = set()
    for index, item in enumerate(value):
        kind, entry, entry_causes = _entry(index, item)
        if kind:
            kinds.add(kind)
        if entry:
            entries.append(entry)
        causes += entry_causes
    if kinds == {"class", "raw"}:
        causes.append(
            invalid(
                ANNOTATION_PATH, "a gpus list holds class entries or raw name entries, never both"
            )
        )
    elif kinds == {"raw"}:
        causes.append(
            invalid(
                ANNOTATION_PATH,
                "raw name entries belong in spec.domain.devices.gpus, not in this annotation",
            )
        )
    return Selection(tuple(entries), tuple(causes))
