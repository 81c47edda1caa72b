"""The selection annotation (docs/contract.md 4.1): parsed entries and every cause, with its path."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest

from gpuclass.shared.core.admission.decisions import Denied, render_response
from gpuclass.shared.core.admission.mutate_vmi import admit_create
from gpuclass.shared.core.model.selection import (
    MAX_SELECTION_BYTES,
    MAX_SELECTION_ENTRIES,
    NO_SELECTION,
    SELECTIONS_REMEMBERED,
    STORED_SELECTION_ENTRIES,
    ClassEntry,
    parse_selection,
    remembered_selection,
)
from gpuclass.shared.core.status.catalog import Catalog

ANN = "metadata.annotations[gpu.cozystack.io/classes]"


def entry_path(index: int, key: str = "") -> str:
    return f"{ANN}[{index}]" + (f".{key}" if key else "")


@pytest.mark.parametrize(
    ("raw", "entries"),
    [
        pytest.param('[{"className": "a"}]', [("a", 1, 0)], id="omitted-count-is-one"),
        pytest.param('[{"className": "a", "count": 3}]', [("a", 3, 0)], id="explicit-count"),
        pytest.param(
            '[{"className": "a", "count": 2}, {"className": "b"}, {"className": "a"}]',
            [("a", 2, 0), ("b", 1, 1), ("a", 1, 2)],
            id="repeated-entries-kept-in-order",
        ),
        pytest.param('[{"className": "a", "count": 1024}]', [("a", 1024, 0)], id="large-count"),
        # Whole numbers however large stay whole numbers: resolution gives them the limit cause.
        pytest.param(
            f'[{{"className": "a", "count": {2**64}}}]', [("a", 2**64, 0)], id="two-to-the-64"
        ),
        pytest.param(
            f'[{{"className": "a", "count": {10**30}}}]', [("a", 10**30, 0)], id="ten-to-the-30"
        ),
        pytest.param(
            '[{"className": "a", "count": ' + "9" * 2000 + "}]",
            [("a", 10**40, 0)],
            id="two-thousand-digits-read-as-a-bound",
        ),
        pytest.param(" [ ] ", [], id="empty-list-with-spaces"),
        pytest.param("[]", [], id="empty-list-no-selection"),
    ],
)
def test_parses_class_entries(raw: str, entries: list[tuple[str, int, int]]) -> None:
    selection = parse_selection(raw)
    assert selection.causes == ()
    assert selection.entries == tuple(ClassEntry(n, c, i) for n, c, i in entries)


def test_no_annotation_is_no_selection() -> None:
    assert parse_selection(None) == NO_SELECTION
    assert NO_SELECTION.entries == () and NO_SELECTION.causes == ()


@pytest.mark.parametrize(
    ("count_json", "shown"),
    [
        pytest.param("0", "0", id="zero"),
        pytest.param("-1", "-1", id="negative"),
        pytest.param("1.5", "1.5", id="fraction"),
        pytest.param("2.0", "2.0", id="float-two"),
        pytest.param('"2"', '"2"', id="string"),
        pytest.param("true", "true", id="bool"),
        pytest.param("null", "null", id="null"),
        pytest.param(str(-(2**64)), str(-(2**64)), id="minus-two-to-the-64"),
        pytest.param("1e400", "inf", id="float-overflow"),
        pytest.param("[1]", "[1]", id="list"),
        # Values orjson cannot write back: named by their kind, never a crash (a 500).
        pytest.param("[" * 300 + "]" * 300, "a list", id="deeper-than-orjson-writes"),
        # A lone surrogate escape is read as U+FFFD, as Go reads it.
        pytest.param('"\\ud800"', '"\ufffd"', id="lone-surrogate"),
    ],
)
def test_bad_count(count_json: str, shown: str) -> None:
    selection = parse_selection(f'[{{"className": "a", "count": {count_json}}}]')
    assert selection.entries == ()
    assert [(c.field, c.message, c.kind) for c in selection.causes] == [
        (entry_path(0, "count"), f"must be a whole number of at least 1 (got {shown})", "invalid")
    ]


@pytest.mark.parametrize(
    ("value", "causes"),
    [
        pytest.param("[{className: a", [(ANN, "must be a JSON list")], id="not-json"),
        pytest.param("", [(ANN, "must be a JSON list")], id="empty-string"),
        pytest.param(
            '{"className": "a"}',
            [(ANN, "must be a JSON list of GPU entries (got an object)")],
            id="object-not-list",
        ),
        pytest.param('"a"', [(ANN, "entries (got a string)")], id="string-not-list"),
        pytest.param("null", [(ANN, "entries (got null)")], id="null-not-list"),
        pytest.param(
            '["a"]', [(entry_path(0), "each entry must be an object")], id="entry-not-object"
        ),
        pytest.param(
            '[{"className": "a", "name": "example.com/gpu"}]',
            [(entry_path(0), "select exactly one of className and name")],
            id="both-class-and-name",
        ),
        pytest.param(
            '[{"count": 1}]', [(entry_path(0), "select exactly one")], id="neither-class-nor-name"
        ),
        pytest.param(
            '[{"className": "a", "cnt": 2}]',
            [(entry_path(0, "cnt"), "unknown key")],
            id="unknown-key",
        ),
        pytest.param(
            '[{"className": "a", "cnt": 2, "size": 1}]',
            [(entry_path(0, "cnt"), "unknown key"), (entry_path(0, "size"), "unknown key")],
            id="every-unknown-key",
        ),
        pytest.param(
            '[{"className": "a", "count": 1, "k1": 1, "k2": 2, "k3": 3}]',
            [(entry_path(0), "has 5 keys; an entry has className and count, or name only")],
            id="more-keys-than-an-entry-holds-one-cause",
        ),
        pytest.param(
            '[{"className": "Bad_Name"}]',
            [(entry_path(0, "className"), "DNS label")],
            id="class-name-not-label",
        ),
        pytest.param(
            '[{"className": 7}]',
            [(entry_path(0, "className"), "DNS label")],
            id="class-name-number",
        ),
        pytest.param(
            '[{"className": ""}]',
            [(entry_path(0, "className"), "DNS label")],
            id="class-name-empty",
        ),
        pytest.param(
            '[{"name": "example.com/gpu"}]',
            [(ANN, "raw name entries belong in spec.domain.devices.gpus")],
            id="raw-only",
        ),
        pytest.param(
            '[{"name": "example.com/gpu", "count": 2}]',
            [
                (entry_path(0, "count"), "count belongs to class entries only"),
                (ANN, "belong in spec.domain.devices.gpus"),
            ],
            id="count-on-raw-entry",
        ),
        pytest.param(
            '[{"name": ""}]',
            [
                (entry_path(0, "name"), "non-empty resource name"),
                (ANN, "belong in spec.domain.devices.gpus"),
            ],
            id="raw-name-empty",
        ),
        pytest.param(
            '[{"className": "a"}, {"name": "example.com/gpu"}]',
            [(ANN, "class entries or raw name entries, never both")],
            id="mixed-class-and-raw",
        ),
        pytest.param(
            '[{"className": "a", "count": 0}, {"className": "b", "count": "x"}, 5]',
            [
                (entry_path(0, "count"), "at least 1"),
                (entry_path(1, "count"), "at least 1"),
                (
                    entry_path(2),
                    "must be an object with className (and count) or name (got an integer)",
                ),
            ],
            id="every-bad-entry-reported",
        ),
    ],
)
def test_causes(value: str, causes: list[tuple[str, str]]) -> None:
    selection = parse_selection(value)
    assert len(selection.causes) == len(causes), selection.causes
    for cause, (field, text) in zip(selection.causes, causes, strict=True):
        assert cause.field == field
        assert text in cause.message
        assert cause.kind == "invalid"


def test_mixed_list_still_parses_its_class_entries() -> None:
    # The mix is refused, but the class entries are known (resolution then refuses raw requests beside them).
    selection = parse_selection('[{"className": "a"}, {"name": "example.com/gpu"}]')
    assert selection.entries == (ClassEntry("a", 1, 0),)


def test_entry_path_names_the_index() -> None:
    assert str(ClassEntry("a", 1, 7).path) == f"{ANN}[7]"


# docs/contract.md 4.1 and docs/decisions.md "Bounded work per review": at most 2048 bytes and
# 16 entries are judged; a larger selection gets one cause naming the annotation and the limit.
TOO_LARGE = "SelectionTooLarge"
LONGEST = "a" * 63
"""The longest class name (a DNS label): 16 entries of it, with count 1024, must fit the byte cap."""


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        pytest.param(
            json.dumps([{"className": "a", "count": 1}] * 9000),
            # 9,000 entries of 30 bytes, 8,999 separators of 2, and the brackets
            f"is {9000 * 30 + 8999 * 2 + 2} bytes; at most 2048 are read",
            id="nine-thousand-entries-over-the-byte-cap",
        ),
        pytest.param(" " * 2047 + "[]", "is 2049 bytes; at most 2048", id="one-byte-over"),
        pytest.param(
            # 338 escapes of 6 bytes and 17 bytes around them: 2045 bytes, judged as usual
            '[{"className": "' + "\\u00e9" * 338 + '"}]',
            None,
            id="escapes-are-bytes-as-written",
        ),
        pytest.param(
            # 1,037 characters, but 2,057 bytes in UTF-8
            '[{"className": "' + "\N{LATIN SMALL LETTER E WITH ACUTE}" * 1020 + '"}]',
            "is over 2048 bytes; at most 2048",
            id="multi-byte-characters-counted-in-utf8",
        ),
        pytest.param(
            json.dumps([{"className": "a"}] * 17),
            "has 17 entries; at most 16",
            id="one-entry-over",
        ),
        pytest.param(
            json.dumps([{"className": "a", "count": 0}] * 40),
            "has 40 entries; at most 16",
            id="bad-entries-over-the-entry-cap-not-judged-one-by-one",
        ),
        pytest.param(
            "[" + "1," * 1000 + "1]", "has 1001 entries; at most 16", id="ints-not-judged"
        ),
    ],
)
def test_caps_refuse_with_one_cause(raw: str, message: str | None) -> None:
    selection = parse_selection(raw)
    if message is None:  # within the byte cap: judged as usual (here: not a DNS label)
        assert [c.field for c in selection.causes] == [entry_path(0, "className")]
        return
    assert selection.entries == () and selection.named == ()
    assert not selection.readable and not selection.has_classes
    [cause] = selection.causes
    assert (cause.field, cause.kind, cause.code) == (ANN, "invalid", TOO_LARGE)
    assert message in cause.message
    assert "list each class once with its count" in cause.message
    assert cause.message.endswith("the classes it names were not checked")


@pytest.mark.parametrize(
    "entries",
    [
        pytest.param([{"className": LONGEST, "count": 1024}] * 16, id="compact"),
        pytest.param(
            [{"className": f"{LONGEST[:-2]}{i:02d}", "count": 1024} for i in range(16)],
            id="distinct-names",
        ),
    ],
)
@pytest.mark.parametrize("indent", [None, 2], ids=["one-line", "pretty"])
def test_largest_legal_selection_fits_the_caps(entries: list[Any], indent: int | None) -> None:
    raw = json.dumps(entries, indent=indent)
    selection = parse_selection(raw)
    assert selection.causes == ()
    assert len(selection.entries) == 16


def test_caps_are_the_documented_figures() -> None:
    assert (MAX_SELECTION_BYTES, MAX_SELECTION_ENTRIES) == (2048, 16)


@pytest.mark.timeout(30)
def test_uncapped_parse_reports_every_bad_entry() -> None:
    """Stored VMIs are read uncapped (shared.core.model.vmiuse): one admitted before the caps keeps its classes."""
    raw = json.dumps([{"className": "a", "count": 0}] * STORED_SELECTION_ENTRIES)
    selection = parse_selection(raw, capped=False)
    assert selection.entries == ()
    assert [c.field for c in selection.causes] == [
        entry_path(i, "count") for i in range(STORED_SELECTION_ENTRIES)
    ]


@pytest.mark.timeout(30)
def test_uncapped_parse_reads_a_thousand_good_entries() -> None:
    raw = json.dumps([{"className": "a"}] * STORED_SELECTION_ENTRIES)
    selection = parse_selection(raw, capped=False)
    assert selection.causes == ()
    assert sum(e.units for e in selection.entries) == STORED_SELECTION_ENTRIES


@pytest.mark.parametrize("entry", [1, {"className": "a"}], ids=["numbers", "good-entries"])
def test_an_uncapped_list_past_the_stored_bound_names_no_class(entry: object) -> None:
    """Only an object stored past the webhook holds more than admission ever let through: such
    a list names nothing, with one cause, instead of a judgment per entry on every event of its
    VMI (what 256 KiB of `[1,1,...]` cost an event is in docs/performance.md)."""
    raw = json.dumps([entry] * (STORED_SELECTION_ENTRIES + 1))
    selection = parse_selection(raw, capped=False)
    assert selection.entries == () and selection.named == ()
    assert [c.field for c in selection.causes] == [ANN]
    assert f"holds {STORED_SELECTION_ENTRIES + 1} entries" in selection.causes[0].message


def hostile_vmi(raw: str) -> dict[str, Any]:
    return {"metadata": {"annotations": {"gpu.cozystack.io/classes": raw}}, "spec": {}}


@pytest.mark.timeout(30)
def test_256_kib_annotation_is_refused_by_the_cap() -> None:
    """The attack of issue 20: a legal 256 KiB annotation (~9,000 entries) costs one cause, unparsed."""
    entry = json.dumps({"className": "a", "count": 0})
    raw = "[" + ", ".join([entry] * (256 * 1024 // (len(entry) + 2))) + "]"
    assert 255 * 1024 < len(raw) <= 256 * 1024
    decision = admit_create(hostile_vmi(raw), "tenant-a", catalog=Catalog())
    assert isinstance(decision, Denied)
    assert [(c.field, c.code) for c in decision.causes] == [(ANN, TOO_LARGE)]
    status = render_response(decision, uid="u", api_version="admission.k8s.io/v1")["response"][
        "status"
    ]
    assert status["code"] == 422
    assert status["message"].startswith(f"{ANN}: is {len(raw)} bytes; at most 2048 are read")


def test_named_entries_keep_the_class_of_a_bad_count() -> None:
    """The class rules can judge an entry whose count is invalid: it counts 0 (a lower bound)."""
    selection = parse_selection('[{"className": "a", "count": 0}, {"className": "b", "count": 2}]')
    assert selection.entries == (ClassEntry("b", 2, 1),)
    assert selection.named == (ClassEntry("a", 0, 0), ClassEntry("b", 2, 1))
    assert selection.has_classes and selection.readable


def test_a_repeated_selection_answers_alike_and_the_memory_is_bounded() -> None:
    """Short annotations are parsed once and remembered (a platform repeats a few); a tenant
    sending ever new ones, or ones over the cap, cannot make the process hold more."""
    first = parse_selection('[{"className": "a", "count": 2}]')
    assert parse_selection('[{"className": "a", "count": 2}]') == first
    assert first.entries == (ClassEntry("a", 2, 0),)
    for i in range(3 * SELECTIONS_REMEMBERED):
        parse_selection(f'[{{"className": "c{i}", "count": 0}}]')
    assert remembered_selection.cache_info().currsize <= SELECTIONS_REMEMBERED
    remembered_selection.cache_clear()
    over = "[" + " " * MAX_SELECTION_BYTES + "]"
    assert [c.code for c in parse_selection(over).causes] == [TOO_LARGE]
    assert remembered_selection.cache_info().currsize == 0


@pytest.mark.parametrize(
    ("raw", "cause"),
    [
        # Deeper than either JSON parser reads: unreadable, nothing in it judged.
        ("[" * 1500, "must be a JSON list of GPU entries"),
        ("[" * 1000 + "]" * 1000, None),  # 1,000 levels: read, and its one entry is no object
    ],
    ids=["1500-levels-unclosed", "1000-levels-closed"],
)
def test_deep_nesting_within_the_byte_cap(raw: str, cause: str | None) -> None:
    selection = parse_selection(raw)
    if cause is None:
        assert selection.readable
        assert [c.field for c in selection.causes] == [entry_path(0)]
    else:
        assert not selection.readable
        [only] = selection.causes
        assert only.field == ANN and only.message.startswith(cause)


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param('[{"className": "a", "\\ud800": 1}]', id="lone-surrogate-key"),
        pytest.param('[{"className": "\\udfff"}]', id="lone-surrogate-class-name"),
        pytest.param('[{"className": "a", "count": ["\\ud800\\ud800"]}]', id="in-a-count"),
        pytest.param('[{"name": "x\\ud83d"}, 1.5, 99999999999999999999]', id="raw-entry"),
        # A float beside a long digit run: read again exactly, the big integer kept in a list.
        pytest.param(
            '[{"className": "a", "count": [99999999999999999999]}, 1.5]', id="big-integer-in-a-list"
        ),
    ],
)
def test_every_cause_of_a_hostile_annotation_can_be_sent_back(raw: str) -> None:
    """The response quotes the annotation's strings; each must be valid UTF-8 (orjson writes
    only that), or the webhook could only answer 500."""
    selection = parse_selection(raw)
    assert selection.causes
    for cause in selection.causes:
        orjson.dumps({"field": cause.field, "message": cause.message})
        assert cause.kind == "invalid"
