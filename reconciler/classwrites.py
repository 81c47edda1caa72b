"""GPUClass writes: the status subresource and the in-use finalizer, each returning its outcome.

The worker decides what to write (a status that differs from the stored one, a finalizer
change) and whether it may write now (leadership, backoff, a store recent enough); this module
sends the one write, pinned to the resourceVersion the store holds, logs and counts it, and
returns what happened (:mod:`reconciler.outcomes`). It never retries, backs off or waits: the
worker does, from the outcome.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from gpuclass.reconciler.api.port import ApiError
from gpuclass.reconciler.outcomes import (
    Conflicted,
    Failed,
    Gone,
    Outcome,
    Watched,
    WriterDeps,
    Written,
)
from gpuclass.reconciler.state.inuse import FinalizerChange
from gpuclass.reconciler.state.records import StoredClass
from gpuclass.reconciler.state.statusdiff import transitions
from gpuclass.shared.core.base.meta import object_key, resource_version

log = logging.getLogger("gpuclass.reconciler.worker")


def written(gate: object, obj: Mapping[str, Any] | None) -> Written:
    """The outcome of a write the server took and answered with `obj` (None in a dry run, where
    nothing was sent and nothing is waited for)."""
    key = object_key(obj) if obj is not None else None
    if obj is None or key is None:
        return Written(gate)
    return Written(gate, Watched("gpuclasses", key), resource_version(obj))


def refused(gate: object, exc: ApiError, *, stale: str, name: str) -> Outcome:
    """The outcome of a class write the API refused: a 409 on a write pinned to `stale`, a 404
    (the class is gone), or a failure."""
    if exc.conflict:  # the store is behind the server: decide again on a newer version
        return Conflicted(gate, Watched("gpuclasses", ("", name)), stale)
    if exc.not_found:
        return Gone(gate)
    return Failed(gate, exc)


class ClassWriter:
    """Sends a class's status and finalizer writes and says what each did."""

    def __init__(self, deps: WriterDeps) -> None:
        self.deps = deps

    async def write_status(
        self, entry: StoredClass, *, status: Mapping[str, Any], patch: Mapping[str, Any]
    ) -> Outcome:
        """Merge-patch the status subresource with `patch` (the part of `status` that changed),
        pinned to the stored resourceVersion."""
        name, api = entry.record.name, self.deps.api
        gate = ("status", name)
        body = {"metadata": {"resourceVersion": entry.resource_version}, "status": dict(patch)}
        try:
            answer = await api.patch_class_status(name, body)
        except ApiError as exc:
            return refused(gate, exc, stale=entry.resource_version, name=name)
        if not self.deps.dry_run:
            self.deps.metrics.status_writes.inc()
            log.info(
                "status written", extra={"fields": {"class": name, "free": status.get("free")}}
            )
        return written(gate, answer)

    async def announce(self, entry: StoredClass, *, status: Mapping[str, Any]) -> None:
        """Emit an Event per condition the written `status` flips (for a first status, Ready)."""
        for change in transitions(entry.raw_status, status):
            await self.deps.events.emit(
                entry.record.name,
                reason=change.reason,
                type_=change.type,
                message=f"{change.condition} is {change.status}: {change.message}",
            )

    async def write_finalizers(self, entry: StoredClass, change: FinalizerChange) -> Outcome:
        """Patch `metadata.finalizers` to the change's list, pinned to the stored resourceVersion."""
        name, metrics = entry.record.name, self.deps.metrics
        gate = ("finalizer", name)
        try:
            answer = await self.deps.api.patch_class_finalizers(
                name, list(change.finalizers), resource_version=entry.resource_version
            )
        except ApiError as exc:
            metrics.object_writes.labels("finalizer", change.action, "error").inc()
            return refused(gate, exc, stale=entry.resource_version, name=name)
        if not self.deps.dry_run:
            metrics.object_writes.labels("finalizer", change.action, "ok").inc()
            log.info(
                "in-use finalizer " + ("added" if change.action == "add" else "removed"),
                extra={"fields": {"class": name}},
            )
        return written(gate, answer)
