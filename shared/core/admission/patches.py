"""Narrow JSON patches on foreign objects (docs/conventions.md rule 5).

The builder only ever appends to lists, creating the missing containers on the
way, with JSON-pointer escaping; it never replaces `/spec` or reorders
anything, so fields we do not know survive untouched. It tracks what earlier
operations created so that several appends under one new parent compose.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

_MISSING = object()


def pointer(path: Sequence[str]) -> str:
    """An RFC 6901 JSON pointer for the path, `~` and `/` escaped (annotation keys hold slashes)."""
    return _pointer(tuple(path))


@functools.lru_cache(maxsize=64)
def _pointer(path: tuple[str, ...]) -> str:
    # The paths are the rules' own constants (a handful): each is escaped once.
    return "".join("/" + part.replace("~", "~0").replace("/", "~1") for part in path)


def _containers(value: Any) -> Any:
    """A copy of the lists and dicts this builder created, sharing the appended items.

    Items are never mutated here; only containers are, by later appends under a
    parent created earlier, so only they must be frozen into the operation.
    """
    if isinstance(value, dict):
        return {k: _containers(v) for k, v in value.items()}
    if isinstance(value, list):
        return list(value)
    return value


class PatchBuilder:
    """Appends as narrow operations. Items passed in are shared, never modified or copied."""

    def __init__(self, obj: Mapping[str, Any]) -> None:
        self._obj = obj
        self._created: dict[tuple[str, ...], Any] = {}
        self.operations: list[dict[str, Any]] = []

    def get(self, path: Sequence[str]) -> Any:
        """The value at `path` in the object as patched so far, or None when absent."""
        return self._walk(tuple(path))[0]

    def append(self, path: Sequence[str], items: Sequence[Any]) -> None:
        """Append `items` to the list at `path`, creating it (and its parents) when absent."""
        if not items:
            return
        path = tuple(path)
        existing, depth = self._walk(path)
        if isinstance(existing, list):
            where, grows = _pointer(path) + "/-", path in self._created
            for item in items:
                self.operations.append({"op": "add", "path": where, "value": item})
                if grows:
                    existing.append(item)
            return
        # Below the deepest existing object on the way, add one nested value.
        value: Any = list(items)
        self._created[path] = value
        for level in range(len(path) - 1, depth, -1):
            value = {path[level]: value}
            self._created[path[:level]] = value
        self.operations.append(
            {"op": "add", "path": _pointer(path[: depth + 1]), "value": _containers(value)}
        )
        if depth >= 1 and tuple(path[:depth]) in self._created:
            self._created[tuple(path[:depth])][path[depth]] = value

    def _walk(self, path: tuple[str, ...]) -> tuple[Any, int]:
        """The value at `path` in the object as patched so far (None when absent), and the length
        of the longest proper prefix of `path` (at least 1) whose value is an object, 0 when none
        is: where a missing list and its missing parents are added. One walk for both."""
        node: Any = self._obj
        created = self._created
        depth = 0
        for i, part in enumerate(path):
            if i and isinstance(node, dict):
                depth = i
            made = created.get(path[: i + 1], _MISSING) if created else _MISSING
            if made is not _MISSING:
                node = made
            elif isinstance(node, dict) and part in node:
                node = node[part]
            else:
                return None, depth
        return node, depth
