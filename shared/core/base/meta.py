"""What every Kubernetes object's metadata tells a store: its key and its resourceVersion.

Used by every store of the list/watch loop (the reconciler's `ClusterStore`, the webhook's
`CatalogStore`) and by the sync view that compares versions. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Key = tuple[str, str]
"""(namespace, name); namespace is "" for cluster-scoped objects."""


def object_key(obj: Mapping[str, Any]) -> Key | None:
    """The store key of a raw object; None when it has no string metadata.name, so callers skip it
    instead of keying it under a made-up name."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
        return None
    namespace = meta.get("namespace")
    return (namespace if isinstance(namespace, str) else "", meta["name"])


def resource_version(obj: Mapping[str, Any]) -> str:
    """metadata.resourceVersion as an opaque string, "" when absent; compare versions only with
    :func:`version_reached`."""
    meta = obj.get("metadata")
    value = meta.get("resourceVersion") if isinstance(meta, dict) else None
    return value if isinstance(value, str) else ""


def version_reached(view: str, required: str) -> bool:
    """True when a view at resourceVersion `view` has seen every change up to `required`.

    kube-apiserver writes etcd's revision, one counter for all resources, as a
    decimal integer; such versions compare numerically. Anything else cannot be
    compared and counts as reached (docs/decisions.md, "Reconciler view").
    """
    if not required:
        return True
    if not view:
        return False
    if view.isdecimal() and required.isdecimal():
        return int(view) >= int(required)
    return True
