"""The catalog as admission sees it: each class with what the rules derive about it.

Built once per change of state, never per request. Two sources of capacity
figures feed it through one function: offline, they are computed from nodes and
pods by :mod:`shared.core.status.availability`; in a cluster, they are the reconciler's
`status.maxUnitsPerNode` / `status.maxFreePerNode` (the webhook never watches pods).
Conflicts and permission are always derived here from the catalog itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Literal

from gpuclass.shared.core.base import names
from gpuclass.shared.core.model.detail import extended_left
from gpuclass.shared.core.model.snapshot import ClassRecord, Snapshot
from gpuclass.shared.core.status.availability import (
    UsageIndex,
    compute_figures,
    conflict_winners,
)
from gpuclass.shared.core.status.capacity import effective_max_count
from gpuclass.shared.core.status.conditions import class_state
from gpuclass.shared.core.status.entitlement import entitlement_problem


@dataclass(frozen=True, slots=True)
class Policy:
    """Platform settings the decisions depend on."""

    vgpu_entitled: bool = False
    license_namespace: str = names.DEFAULT_LICENSE_NAMESPACE
    kubevirt_controller_user: str = names.DEFAULT_KUBEVIRT_CONTROLLER_USER


@dataclass(frozen=True, slots=True)
class Offer:
    """One class as admission judges it: its record, the class it lost a resource-name conflict to
    (None: it owns its resource), whether KubeVirt permits its resource, and the per-node figures
    behind the default limit and the shortage warning."""

    record: ClassRecord
    conflict_with: str | None
    permitted: bool
    max_units_per_node: int
    max_free_per_node: int | None  # None: not known yet (no status written)

    def effective_max_count(self) -> int | None:
        """spec.maxCount; else 1 for vgpu; else the passthrough default (None = no check yet).

        One rule, one place: the same function the Schedulable condition uses."""
        return effective_max_count(self.record, self.max_units_per_node)


@dataclass(frozen=True, slots=True, weakref_slot=True)
class Catalog:
    """Everything admission reads, built once per change of state by :func:`build_catalog`: the
    offers by class name, namespace labels (for entitlement) and the platform policy."""

    offers: Mapping[str, Offer] = field(default_factory=dict)
    namespaces: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    policy: Policy = field(default_factory=Policy)
    resources: frozenset[str] = frozenset()
    """The resourceName of every catalog class (rule 4.2: no raw request of one beside classes)."""
    quota_left: Mapping[str, Mapping[str, Decimal]] = field(default_factory=dict)
    """Per namespace, `requests.<resource>` -> the least its ResourceQuotas leave
    (:func:`shared.core.model.detail.extended_left`): VM admission's quota warning."""
    vgpu_resources: frozenset[str] = frozenset()
    """Every resource that is a vGPU (rule 4.5): the resourceName of every `mode: vgpu` class, valid
    or not, and every `mediatedDevices` resourceName of the KubeVirt CR, whether a class names it
    or not. Whoever asks for one, by class, raw VMI entry or plain Pod, needs entitlement."""

    def resource_by_class(self) -> dict[str, str]:
        """className -> resourceName of every class that claims one (invalid classes too): what
        GPUClass admission compares a new class with to warn of a shared resource (5.8)."""
        return {n: o.record.resource_name for n, o in self.offers.items() if o.record.resource_name}

    def vgpu_problem(self, namespace: str) -> str | None:
        """Rule 4.5 for `namespace` under this platform's setting: None when it may take vGPUs."""
        return entitlement_problem(
            namespace, self.namespaces, vgpu_entitled=self.policy.vgpu_entitled
        )


def build_catalog(
    snapshot: Snapshot, policy: Policy, *, figures: Literal["computed", "stored"]
) -> Catalog:
    """The admission view of a snapshot. `figures="computed"` derives the per-node figures from the
    snapshot's nodes and pods (offline); `"stored"` reads the reconciler's `status` (the webhook,
    which never watches pods): None free until a status is written."""
    winners = conflict_winners(snapshot.classes)
    index = UsageIndex.build(snapshot) if figures == "computed" else None
    offers = {}
    for name, record in snapshot.classes.items():
        state = class_state(
            record, snapshot, winners=winners, license_namespace=policy.license_namespace
        )
        free: int | None
        if index is not None:
            computed = compute_figures(
                record,
                index,
                conflict_lost=state.conflict_with is not None,
                needs=snapshot.launcher_devices,
            )
            units, free = computed.max_units_per_node, computed.max_free_per_node
        else:
            stored = record.status
            units = stored.max_units_per_node if stored else 0
            free = stored.max_free_per_node if stored else None
        offers[name] = Offer(record, state.conflict_with, state.permitted, units, free)
    resources = frozenset(r.resource_name for r in snapshot.classes.values() if r.resource_name)
    vgpu = snapshot.mediated | {
        r.resource_name
        for r in snapshot.classes.values()
        # an invalid vGPU class's units need entitlement too
        if r.mode == "vgpu" and r.resource_name
    }
    quota_left = {
        namespace: left
        for namespace, quotas in snapshot.quotas.items()
        if (left := extended_left(quotas))
    }
    return Catalog(
        offers,
        dict(snapshot.namespaces),
        policy,
        resources,
        quota_left=quota_left,
        vgpu_resources=vgpu,
    )
