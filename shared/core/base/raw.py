"""Tolerant reads of raw API objects: a field of the wrong shape reads as absent.

Foreign objects (VMIs, Pods, Nodes, KubeVirt CRs, manifests) stay plain dicts
(docs/conventions.md rule 4) and may hold anything a schema lets through, or more when they come
from a file. Every reader of the core, the edge and the shells reads them through these few
accessors, so that a list where a map belongs (`ownerReferences: 5`, an object as `deviceName`)
is read as empty everywhere alike instead of raising in one module and not in another.

Each accessor takes the value and, optionally, the keys of a path below it; a step through
anything but a dict ends the walk as absent. Pure, and cheap enough for every review.
"""

from __future__ import annotations

from typing import Any


def dig(obj: object, *path: str) -> object:
    """The value at `path` below `obj`, or None when a step is missing or not a dict."""
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def dict_at(obj: object, *path: str) -> dict[str, Any]:
    """The dict at `path` below `obj` (`obj` itself without a path), or a new empty one."""
    value = dig(obj, *path) if path else obj
    return value if isinstance(value, dict) else {}


def list_at(obj: object, *path: str) -> list[Any]:
    """The list at `path` below `obj` (`obj` itself without a path), or a new empty one."""
    value = dig(obj, *path) if path else obj
    return value if isinstance(value, list) else []


def str_at(obj: object, *path: str) -> str | None:
    """The string at `path` below `obj` (`obj` itself without a path), or None."""
    value = dig(obj, *path) if path else obj
    return value if isinstance(value, str) else None


def metadata(obj: object) -> dict[str, Any]:
    """An object's `metadata`, or a new empty dict: the map most readers start from."""
    return dict_at(obj, "metadata")


def str_map(value: object) -> dict[str, str]:
    """The string-to-string entries of a map (labels, Secret data), others dropped; a value
    that is not a dict reads as a new empty one."""
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}
