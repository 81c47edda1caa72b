"""The tenant's class selection: the `gpu.cozystack.io/classes` annotation (docs/contract.md 4.1).

The application chart renders the tenant's `gpus` values list into the
annotation as JSON. Parsing reports every problem with its path; it does not
look classes up (that is :mod:`shared.core.admission.resolution`'s job).

The work is bounded before the JSON is read: a selection of more than
`MAX_SELECTION_BYTES` bytes is refused unparsed, and one of more than
`MAX_SELECTION_ENTRIES` entries before any entry is judged (docs/contract.md 4.1,
docs/decisions.md "Bounded work per review"). A legal annotation can be 256 KiB, some
9,000 entries, and judging it cost a thousand normal reviews of the fail-closed VMI
webhook; a real VM selects a handful of classes.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from typing import NamedTuple

import orjson

from gpuclass.shared.core.base import k8s, names
from gpuclass.shared.core.base.causes import Cause, CauseCode, invalid, json_kind
from gpuclass.shared.core.base.fieldpath import FieldPath

SELECTION_PATH = FieldPath.of("metadata", "annotations").key(names.SELECTION_ANNOTATION)
"""Where the selection is, on a VMI or a Pod (a VM's template puts `spec.template.` before it)."""
_KNOWN_KEYS = frozenset({"className", "name", "count"})


class ClassEntry(NamedTuple):
    """One `{className, count}` entry of the annotation: `units` is its count, `position` its place
    in the list, kept so every cause about it points at the right element. A named tuple, made per
    entry (a hostile selection has sixteen) in a third of a frozen dataclass's time; its fields are
    not called `count` and `index`, which would hide the tuple methods of those names."""

    class_name: str
    units: int
    position: int

    @property
    def path(self) -> FieldPath:
        """The entry's path in the selection, `metadata.annotations[...][i]`."""
        return entry_path(self.position)


@functools.lru_cache(maxsize=256)
def entry_path(index: int, *names: str) -> FieldPath:
    """The path of entry `index` (or of a field below it): one shared value per place, so every
    cause about that entry renders its path once."""
    path = SELECTION_PATH.index(index)
    return path.child(*names) if names else path


@dataclass(frozen=True, slots=True)
class Selection:
    """What the annotation says, and every problem with it.

    `entries` are the valid class entries (empty when there is no selection).
    `named` are the class entries whose className is valid, whatever their count:
    the classes can be judged even when a count cannot (an invalid count counts 0
    there, so a sum over them is a lower bound). `has_classes` says the list holds
    a class entry, valid or not. `readable` is False when the annotation could not
    be read as a list (not JSON, not a list, over the caps): nothing in it was judged.
    """

    entries: tuple[ClassEntry, ...]
    causes: tuple[Cause, ...]
    named: tuple[ClassEntry, ...] = ()
    has_classes: bool = False
    readable: bool = True


NO_SELECTION = Selection((), ())

MAX_SELECTION_BYTES = 2048
"""Bytes (UTF-8) of the annotation read at most: 16 entries of the longest class name, pretty-printed."""
MAX_SELECTION_ENTRIES = 16
"""Entries judged at most: more than a host has GPUs. Counts, not repeated entries, ask for more."""
UNCHECKED = "the classes it names were not checked"
STORED_SELECTION_ENTRIES = 1024
"""Entries read of a stored VMI's annotation (uncapped reading): admission never let more than
MAX_SELECTION_ENTRIES through, and no VM has a thousand GPUs. A longer list, which only an object
stored past the webhook can hold, names no class instead of costing every event of its VMI a
judgment of each entry (the cost of 256 KiB of `[1,1,...]` is in docs/performance.md)."""


def _entry(
    index: int, entry: object, *, causes: list[Cause]
) -> tuple[str | None, ClassEntry | None]:
    """Kind of entry ('class', 'raw' or None) and the class entry; its causes are appended to
    `causes` (one list for the whole selection: a hostile one has sixteen entries to judge).

    The class entry is returned whenever its className is valid; its count is 0 when
    the count is invalid (that cause is among the causes).
    """
    if not isinstance(entry, dict):
        causes.append(
            invalid(
                entry_path(index),
                "each entry must be an object with className (and count) or name "
                f"(got {json_kind(entry)})",
            )
        )
        return None, None
    if len(entry) > len(_KNOWN_KEYS):
        # More keys than an entry can hold: one cause for the entry, not one per key.
        causes.append(
            invalid(
                entry_path(index),
                f"has {len(entry)} keys; an entry has className and count, or name only",
            )
        )
    elif not entry.keys() <= _KNOWN_KEYS:
        causes += [
            invalid(
                entry_path(index).child(key),
                "unknown key: an entry has className and count, or name",
            )
            for key in entry
            if key not in _KNOWN_KEYS
        ]
    has_class, has_name = "className" in entry, "name" in entry
    if has_class == has_name:
        causes.append(invalid(entry_path(index), "select exactly one of className and name"))
        return None, None
    if has_name:
        if not isinstance(entry["name"], str) or not entry["name"]:
            causes.append(invalid(entry_path(index, "name"), "must be a non-empty resource name"))
        if "count" in entry:
            causes.append(
                invalid(entry_path(index, "count"), "count belongs to class entries only")
            )
        return "raw", None
    class_name = entry["className"]
    if not isinstance(class_name, str) or k8s.dns_label_error(class_name):
        causes.append(
            invalid(
                entry_path(index, "className"),
                "must be a class name from the catalog (a DNS label)",
            )
        )
        class_name = None
    count = entry.get("count", 1)
    if type(count) is not int or count < 1:  # a whole number of at least 1 (bool is not one)
        causes.append(
            invalid(
                entry_path(index, "count"),
                f"must be a whole number of at least 1 (got {_show(count)})",
            )
        )
        count = 0
    if class_name is None:
        return "class", None
    return "class", ClassEntry(class_name, count, index)


def _show(value: object) -> str:
    """The received value, short; integers beyond 64 bits too (orjson cannot dump those). A
    container orjson cannot write (an integer of 2**64 or more inside, or deeper than its 255
    levels) is named by its kind."""
    if type(value) is int or type(value) is float:  # not bool, which orjson writes as true/false
        text = repr(value)
    else:
        try:
            text = orjson.dumps(value).decode()
        except orjson.JSONEncodeError:
            text = "a list" if isinstance(value, list) else "an object"
    return text if len(text) <= 40 else text[:37] + "..."


MAX_INT_DIGITS = 40
"""Longer integer literals are read as 10**40: still "too many units", never a slow parse."""
_HUGE = int("1" + "0" * MAX_INT_DIGITS)


_LONG_NUMBER = re.compile(r"\d{20}")
"""20 digits or more: possibly an integer of 2**64 or more."""


def _load(raw: str, capped: bool = True) -> object:
    """Parse the annotation, integers kept as integers.

    orjson (fast) reads an integer of 2**64 or more as a float, so a count like
    18446744073709551616 would be refused as "not a whole number"; it is a whole
    number, and far too many units (the limit cause). When orjson's answer holds a
    float where a rule looks (an entry, or its count) and the text has such a long
    digit run, or when orjson refuses the text, the standard parser reads it again,
    keeping them exact. The digit-run search runs only then: it costs more than the
    parse. NaN and Infinity are not JSON for either. Text nested deeper than orjson
    reads is deeper than the standard parser reads too, so it is refused without a
    second try (the message is only a shortcut: another wording takes the slower way).
    Under the caps a list longer than MAX_SELECTION_ENTRIES is refused whole, so only
    its first entries are looked at.
    """
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as refused:
        if "depth" in str(refused):  # past orjson's 1,024 levels, so past Python's 1,000 too
            raise
        return _load_exact(raw)
    judged = MAX_SELECTION_ENTRIES + 1 if capped else None
    if _has_float(value, judged) and _LONG_NUMBER.search(raw):
        return _load_exact(raw)
    return value


def _has_float(value: object, first: int | None = None) -> bool:
    """A float in an entry itself ("got a number") or in an entry's count (quoted, and a count
    of 2**64 is a whole number), among the `first` entries; elsewhere a float changes nothing."""
    items = value if isinstance(value, list) else [value]
    for item in items[:first]:
        if isinstance(item, float):
            return True
        if isinstance(item, dict) and isinstance(item.get("count"), float):
            return True
    return False


def _load_exact(raw: str) -> object:
    value = json.loads(raw, parse_int=_parse_int, parse_constant=_no_constant)
    return _without_lone_surrogates(value) if "\\u" in raw else value


_SURROGATE = re.compile("[\ud800-\udfff]")


def _without_lone_surrogates(value: object) -> object:
    """`value` with every lone surrogate (`"\\ud800"` escaped in the text: orjson refuses it,
    the standard parser keeps it) replaced by U+FFFD, as Go's decoder reads it. Such a string
    cannot be written as UTF-8, so a cause quoting it could not be sent back. Iterative: the
    text may nest as deep as the parser reads."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    stack = [value] if isinstance(value, list | dict) else []
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            for i, item in enumerate(node):
                if isinstance(item, str):
                    node[i] = _SURROGATE.sub("\ufffd", item)
                elif isinstance(item, list | dict):
                    stack.append(item)
        elif isinstance(node, dict):
            items = [
                (
                    _SURROGATE.sub("\ufffd", k),
                    _SURROGATE.sub("\ufffd", v) if isinstance(v, str) else v,
                )
                for k, v in node.items()
            ]
            node.clear()
            node.update(items)  # keys that became equal: the last wins, as in a JSON object
            stack.extend(v for _, v in items if isinstance(v, list | dict))
    return value


def _parse_int(text: str) -> int:
    digits = text.lstrip("-")
    if len(digits) > MAX_INT_DIGITS:
        return -_HUGE if text.startswith("-") else _HUGE
    return int(text)


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _unreadable(message: str) -> Selection:
    return Selection((), (invalid(SELECTION_PATH, message),), readable=False)


def _utf8_length(raw: str) -> int:
    """Bytes of `raw` in UTF-8, what the API server counts (call it on short strings only)."""
    if raw.isascii():
        return len(raw)
    return len(raw.encode("utf-8", "surrogatepass"))


def size_cause(raw: str) -> Cause | None:
    """The byte cap, on the raw string, before any parsing."""
    if len(raw) <= MAX_SELECTION_BYTES and _utf8_length(raw) <= MAX_SELECTION_BYTES:
        return None
    # Exact for ASCII (the size is known for free); never encode a long string to say how long.
    size = f"{len(raw)} bytes" if raw.isascii() else f"over {MAX_SELECTION_BYTES} bytes"
    return invalid(
        SELECTION_PATH,
        f"is {size}; at most {MAX_SELECTION_BYTES} are read: list each class once with its "
        f'count, e.g. [{{"className": "x", "count": 2}}]; {UNCHECKED}',
        code=CauseCode.SELECTION_TOO_LARGE,
    )


def entries_cause(length: int) -> Cause | None:
    """The entry cap, on the parsed list, before any entry is judged."""
    if length <= MAX_SELECTION_ENTRIES:
        return None
    return invalid(
        SELECTION_PATH,
        f"has {length} entries; at most {MAX_SELECTION_ENTRIES}: list each class once with its "
        f'count, e.g. [{{"className": "x", "count": 2}}]; {UNCHECKED}',
        code=CauseCode.SELECTION_TOO_LARGE,
    )


def parse_selection(raw: str | None, *, capped: bool = True) -> Selection:
    """Parse the annotation value. None or `[]` means no selection.

    `capped` applies the byte and entry caps (admission, and everything that says what
    admission would answer). Only a reader of VMIs already stored turns it off: one
    admitted before the caps existed must keep its classes (:mod:`shared.core.model.vmiuse`).
    A value within the byte cap is parsed once and remembered (:func:`remembered_selection`).
    """
    if raw is None:
        return NO_SELECTION
    if len(raw) <= MAX_SELECTION_BYTES:
        return remembered_selection(raw, capped)
    return _parse(raw, capped)


SELECTIONS_REMEMBERED = 256
"""Distinct short annotations kept parsed. A platform's VMs repeat a few selections (the chart
writes the same JSON for the same choice), so a review usually finds its selection here; each
entry holds at most 2048 characters and what they parse to, under 4 MiB in all."""


@functools.lru_cache(maxsize=SELECTIONS_REMEMBERED)
def remembered_selection(raw: str, capped: bool) -> Selection:
    """:func:`_parse`, remembered: a Selection is immutable, so a repeated annotation shares it."""
    return _parse(raw, capped)


def _parse(raw: str, capped: bool) -> Selection:
    if capped and (too_large := size_cause(raw)):
        return Selection((), (too_large,), readable=False)
    try:
        value = _load(raw, capped)
    except (ValueError, RecursionError):  # decode errors of both parsers; json's deep nesting
        return _unreadable(
            'must be a JSON list of GPU entries, e.g. [{"className": "x", "count": 1}]; '
            + UNCHECKED
        )
    if not isinstance(value, list):
        return _unreadable(
            f"must be a JSON list of GPU entries (got {json_kind(value)}); {UNCHECKED}"
        )
    if capped and (too_many := entries_cause(len(value))):
        return Selection((), (too_many,), readable=False)
    if len(value) > STORED_SELECTION_ENTRIES:
        return _unreadable(
            f"holds {len(value)} entries, more than any VMI could have been admitted with "
            f"({STORED_SELECTION_ENTRIES} read at most); {UNCHECKED}"
        )
    return _judge_entries(value)


def _judge_entries(value: list[object]) -> Selection:
    entries: list[ClassEntry] = []
    named: list[ClassEntry] = []
    causes: list[Cause] = []
    kinds: set[str] = set()
    for index, item in enumerate(value):
        judged = len(causes)
        kind, entry = _entry(index, item, causes=causes)
        if kind:
            kinds.add(kind)
        if entry:
            named.append(entry)
            if len(causes) == judged:
                entries.append(entry)
    if kinds == {"class", "raw"}:
        causes.append(
            invalid(
                SELECTION_PATH, "a gpus list holds class entries or raw name entries, never both"
            )
        )
    elif kinds == {"raw"}:
        causes.append(
            invalid(
                SELECTION_PATH,
                "raw name entries belong in spec.domain.devices.gpus, not in this annotation",
            )
        )
    return Selection(tuple(entries), tuple(causes), tuple(named), "class" in kinds)
