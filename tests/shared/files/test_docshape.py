"""The shape of a parsed document (shared/files/docshape.py): depth and aliasing, never expanded."""

from __future__ import annotations

import json

import orjson
from hypothesis import given
from hypothesis import strategies as st

from gpuclass.shared.files.docshape import json_too_deep, yaml_shape


def test_yaml_shape_counts_without_expanding() -> None:
    leaf = ["x"] * 10
    level = [leaf] * 10
    assert yaml_shape({"a": [level] * 10}) == (
        4,
        1 + 1 + 10 * (1 + 10 * 11),
        1 + 1 + 11 + 11 + 11,
        1 + 10 * 10 * 10,  # the key "a", and each "x" in every place
    )


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.text(alphabet='[]{}"\\ab:,\n/\u00e9', max_size=6),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.text(alphabet='[]{}"\\k', max_size=4), children, max_size=3)
    ),
    max_leaves=40,
)


@given(value=json_values, limit=st.integers(min_value=1, max_value=8))
def test_the_byte_scan_agrees_with_the_tree_walk(value: object, limit: int) -> None:
    """json_too_deep reads the depth from the bytes (strings with brackets and escaped quotes
    included) exactly as the walk of the parsed value (`yaml_shape`) counts it."""
    expected = yaml_shape(value)[0] > limit
    assert json_too_deep(orjson.dumps(value), limit) == expected
    # The stdlib writes other escapes (`\u00e9`, `\n`) than orjson: the scan drops them alike.
    assert json_too_deep(json.dumps(value).encode(), limit) == expected
