"""What the reconciler decides from its store: statuses, figures, in-use and license-copy plans.

The store (:mod:`reconciler.state.store`) holds and indexes what the reflector brought; the
functions here read it and say what the classes and copies should be, for the worker to
compare with what is stored and write. They never change the store: its only writer is the
reflector, and the worker alone takes and sets the dirty marks.

Pure: no I/O, no clock; `now` and settings come in as arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuclass.reconciler.state.inuse import uses_class
from gpuclass.reconciler.state.licenses import CopyAction, desired_copies, plan_copies
from gpuclass.reconciler.state.store import ClusterStore
from gpuclass.shared.core.model.snapshot import Snapshot
from gpuclass.shared.core.status.availability import Figures, compute_figures, compute_status


@dataclass(frozen=True, slots=True)
class StatusContext:
    """What computing statuses needs, built once per batch (winners are catalog-wide)."""

    snapshot: Snapshot
    winners: Mapping[str, str]


def status_context(store: ClusterStore) -> StatusContext:
    """The snapshot and conflict winners a pass computes every status against, built once per
    pass rather than per class."""
    snapshot = Snapshot(classes=store.records, secrets=store.license_secrets)
    snapshot.use_kubevirt(store.kubevirt)
    return StatusContext(snapshot, store.winners())


def class_status(
    store: ClusterStore, name: str, *, context: StatusContext, now: str
) -> dict[str, Any]:
    """The class's status, by :func:`shared.core.status.availability.compute_status` over the
    live counters and the class's survey tally (:mod:`reconciler.state.surveys`)."""
    return compute_status(
        store.records[name],
        context.snapshot,
        index=store.usage.surveys,
        winners=context.winners,
        license_namespace=store.license_namespace,
        now=now,
    )


def class_figures(store: ClusterStore, name: str, *, context: StatusContext) -> Figures:
    """The class's figures from its survey tally, for the per-class usage metrics (the status
    itself comes from :func:`class_status`)."""
    record = store.records[name]
    winner = context.winners.get(record.resource_name) if record.resource_name else None
    return compute_figures(
        record,
        store.usage.surveys,
        conflict_lost=winner not in (None, name),
        needs=context.snapshot.launcher_devices,
    )


def in_use(store: ClusterStore, name: str) -> bool:
    """Whether a VMI the store holds passed admission with this class: what keeps the in-use
    finalizer on. Only as complete as the store's VMIs; the worker's sync gate decides when a
    False may release it."""
    if name not in store.records:
        return False
    return any(uses_class(store.vmis[key], name) for key in store.vmis_of_class(name))


def copy_actions(
    store: ClusterStore, *, vgpu_entitled: bool, verify: bool = False
) -> list[CopyAction]:
    """The license-copy writes that would bring the recorded copies to what the store wants now
    (creates, updates, deletes); `verify` writes every wanted copy again."""
    plan = desired_copies(
        store.license_vmis(),
        store.records,
        secrets=store.license_secrets,
        namespaces=store.namespaces,
        license_namespace=store.license_namespace,
        vgpu_entitled=vgpu_entitled,
        started=frozenset(store.launchers.values()),
    )
    return plan_copies(plan, store.copy_record.entries, verify=verify)
