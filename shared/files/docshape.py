"""The shape of a parsed document, measured without expanding it: nesting depth and aliasing.

Hostile files nest past any Kubernetes object or name one node through thousands of aliases
(500 bytes of YAML can reach 10^8 values). :func:`json_too_deep` reads the depth of valid JSON
from its bytes, :func:`yaml_shape` the depth, values and characters of a parsed YAML document
looking at each node once; the loader (:mod:`shared.files.loader`) refuses a file past the
bounds before anything copies it. Pure: bytes and values in, numbers out.
"""

from __future__ import annotations

import re
from typing import Any

MAX_DEPTH = 100
"""Deepest nesting accepted in one object; real manifests stay far below (a CRD schema ~40)."""


_QUOTED = re.compile(rb'"[^"]*"')


_ESCAPE = re.compile(rb"\\.", re.DOTALL)  # a backslash and the character it escapes


_ONE_BRACKET = bytes.maketrans(b"{}", b"[]")


_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'"[]{}')


def json_too_deep(data: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether valid JSON `data` nests deeper than `limit`, read from the bytes, not the tree.

    Escape sequences are dropped first (each backslash with the character it escapes, one
    regex pass, skipped when a C-speed search finds no backslash at all), so every quote
    left delimits a string; then every byte but quotes and brackets, braces becoming
    brackets (the input is valid JSON: pairs match whatever their kind). Adjacent quotes go
    next: an empty string, or two strings with nothing between them merged into one, which
    moves no bracket in or out of a string. What is left quoted (the rare string holding a
    bracket) is cut out, and innermost pairs are removed one level a pass (`replace` does
    not see the pairs its own removals make). Every step is a C-speed pass, the later ones
    over the few structural bytes only, so the guard costs a fraction of parsing
    (docs/decisions.md, "Nesting guard"). Only for input orjson parsed.
    """
    unescaped = _ESCAPE.sub(b"", data) if b"\\" in data else data
    structure = unescaped.translate(_ONE_BRACKET, _NOT_STRUCTURE)
    brackets = _QUOTED.sub(b"", structure.replace(b'""', b""))
    for _ in range(limit):
        if not brackets:
            return False
        brackets = brackets.replace(b"[]", b"")
    return bool(brackets)


MAX_ALIASED_VALUES = 1 << 20
"""Values a YAML document may reach through aliases beyond what it writes (and twice that)."""


MAX_ALIASED_CHARS = 16 << 20
"""Characters of strings a YAML document may reach through aliases beyond its file's bytes (and
twice that): a long string named by many aliases is copied as many times by whatever reads it."""


class AliasLoop(ValueError):
    """A YAML alias inside the node it names: the document holds itself."""


def yaml_shape(document: object) -> tuple[int, int, int, int]:
    """(depth, values, written, chars) of a parsed YAML document, without expanding its aliases.

    An alias makes one Python object appear in several places, so a walk of every path costs
    what the aliases expand to: 500 bytes of nested aliases (`a1: [*a0, *a0, ...]`) reach
    10^8 values. Each list and mapping is looked at once here: its depth below and the values
    under it are the same wherever it appears. `values` counts every place (what a reader
    walking the document would visit), `written` each list or mapping once, `chars` the
    characters of every string and key in every place (what a reader copying it would hold:
    one aliased 1 MB string named 300 times is 300 MB). Raises AliasLoop for a document that
    holds itself (`&a [*a]`)."""
    known: dict[int, tuple[int, int, int]] = {}  # id -> (depth, values, chars), each container
    open_: set[int] = set()  # containers whose children are being looked at
    written = 0
    # (node, None): look at its children; (node, children): they are done, fold them
    stack: list[tuple[Any, list[Any] | None]] = [(document, None)]
    while stack:
        node, children = stack.pop()
        if not isinstance(node, dict | list):
            continue
        key = id(node)
        if children is None:
            if key in known:
                continue
            children = list(node.values() if isinstance(node, dict) else node)
            open_.add(key)
            stack.append((node, children))
            for child in children:
                if isinstance(child, dict | list) and id(child) not in known:
                    if id(child) in open_:  # an alias to a node it is inside
                        raise AliasLoop
                    stack.append((child, None))
            continue
        open_.discard(key)
        depth, values = 1, 1
        chars = sum(len(k) for k in node if isinstance(k, str)) if isinstance(node, dict) else 0
        for child in children:
            if isinstance(child, dict | list):
                below, under, held = known[id(child)]
                depth, values, chars = max(depth, below + 1), values + under, chars + held
            else:
                values += 1
                if isinstance(child, str | bytes):
                    chars += len(child)
        known[key] = (depth, values, chars)
        written += 1 + len(children)
    if not isinstance(document, dict | list):
        return 0, 1, 1, len(document) if isinstance(document, str | bytes) else 0
    depth, values, chars = known[id(document)]
    return depth, values, written, chars
