"""`json_values` never under-counts: whatever JSON a client sends, its count is at least the number
of values a parse builds, so a limit on the count is a limit on the tree (docs/decisions.md,
"Values per review"). The values of the parsed tree are counted here by walking it, not from the
bytes."""

from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuclass.shared.core.base.jsonsize import json_values, values_over

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(), inner, max_size=6),
    max_leaves=60,
)


def values_below_the_top(value: object) -> int:
    """Values a parse builds inside lists and objects (keys not counted: orjson shares short ones)."""
    if isinstance(value, list):
        return len(value) + sum(values_below_the_top(v) for v in value)
    if isinstance(value, dict):
        return len(value) + sum(values_below_the_top(v) for v in value.values())
    return 0


@settings(max_examples=300, deadline=None)
@given(JSON)
def test_the_count_is_at_least_what_a_parse_builds(value: object) -> None:
    for text in (orjson.dumps(value), json.dumps(value, indent=2).encode()):
        assert json_values(text) >= values_below_the_top(value), text[:200]


@pytest.mark.parametrize(
    ("text", "values"),
    [
        pytest.param(b"[]", 1, id="empty-list"),
        pytest.param(b"[1,2,3]", 3, id="three-numbers"),
        # a container after a comma counts twice (the comma and its bracket): an over-count
        pytest.param(b'{"a":{},"b":[]}', 4, id="object-of-containers"),
        pytest.param(b'"a,[{"', 3, id="string-over-counts"),
        pytest.param(b"[]," * 4, 8, id="what-the-attack-sends"),
    ],
)
def test_commas_and_opening_brackets_are_counted(text: bytes, values: int) -> None:
    assert json_values(text) == values
    assert json_values(bytearray(text)) == values


@settings(max_examples=300, deadline=None)
@given(text=st.binary(max_size=200), limit=st.integers(min_value=0, max_value=220))
def test_a_text_is_counted_only_when_its_bytes_could_exceed_the_limit(
    text: bytes, limit: int
) -> None:
    # The shortcut on the length answers as the full count does: it never hides an excess.
    counted = json_values(text)
    assert values_over(text, limit) == (counted if counted > limit else None)


def test_a_text_of_nothing_but_brackets_at_the_limit_is_within_it() -> None:
    assert values_over(b"[" * 64, 64) is None
    assert values_over(b"[" * 65, 64) == 65
