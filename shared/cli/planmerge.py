"""What the merge of a catalog change stores: the proposed classes as the API server keeps them.

`gpuclass plan` (:mod:`shared.cli.plan`) judges the cluster as it will be after the merge:
:func:`proposed_snapshot` applies the proposed manifests' specs over the stored classes, keeping
what the API server owns (:data:`SERVER_OWNED`) from the cluster, and :func:`stored_object`
renders a stored class as the `oldObject` of the GPUClass admitter. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gpuclass.shared.core.base import names
from gpuclass.shared.core.model.snapshot import ClassRecord, Snapshot, compact_class


def stored_object(record: ClassRecord) -> dict[str, Any]:
    """The stored GPUClass as the API server would send it as `oldObject`."""
    meta: dict[str, Any] = {"name": record.name}
    if record.created:
        meta["creationTimestamp"] = record.created
    if record.uid:
        meta["uid"] = record.uid
    if record.generation:
        meta["generation"] = record.generation
    if record.finalizers:
        meta["finalizers"] = list(record.finalizers)
    return {"apiVersion": names.API_VERSION, "kind": names.KIND, "metadata": meta,
            "spec": dict(record.raw_spec)}  # fmt: skip


SERVER_OWNED = frozenset(
    {
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "finalizers",
        "resourceVersion",
        "uid",
        "generation",
        "managedFields",
        "selfLink",
    }
)
"""Metadata the API server keeps whatever a manifest says (or a controller writes: the in-use
finalizer): a plan takes it from the cluster, never from the pull request."""


def proposed_snapshot(
    current: Snapshot, accepted: Mapping[str, Mapping[str, Any]], *, now: str
) -> Snapshot:
    """The cluster with the proposed catalog: accepted classes replace or join the stored ones;
    a class left out is deleted, which its in-use finalizer holds while VMIs use it.

    What the merge applies is the spec (and the labels and annotations); the server-owned
    metadata (:data:`SERVER_OWNED`) and `status` stay the stored class's, and a new class gets
    what the API server gives it: created `now` (the newest class, so it loses a resource-name
    conflict to every stored one), no finalizer, not being deleted.
    """
    classes: dict[str, ClassRecord] = {}
    for name, record in current.classes.items():
        if name in accepted:
            continue
        if record.finalizers or any(name in v.admitted for v in current.vmis):
            classes[name] = replace(record, deleting=True)
    for name, obj in accepted.items():
        old = current.classes.get(name)
        meta = obj.get("metadata")
        kept = {
            k: v
            for k, v in (meta.items() if isinstance(meta, Mapping) else ())
            if k not in SERVER_OWNED
        }
        merged = {k: v for k, v in obj.items() if k != "status"}
        merged["metadata"] = kept
        compact = compact_class(merged)
        if compact is None:
            continue
        if old is not None:
            compact = replace(
                compact,
                created=old.created,
                deleting=old.deleting,
                finalizers=old.finalizers,
                uid=old.uid,
                generation=old.generation,
            )
        else:
            compact = replace(compact, created=now, deleting=False, finalizers=(), uid="")
        classes[name] = replace(compact, status=None)
    return replace(current, classes=classes)
