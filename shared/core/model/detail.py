"""The cluster in the detail one VM's start needs: node labels, CPU, memory and ephemeral storage
allocatable and requested, and the namespaces' ResourceQuotas.

Only `gpuclass explain` reads the node detail (docs/decisions.md, "Can this VM start, in full"):
the class figures and the reconciler never do, so the compact snapshot of a 150,000-pod cluster
stays what it was; :class:`shared.core.model.snapshot.SnapshotBuilder` fills it when asked
(`detail=True`). Quotas are small and always kept: VM admission warns from them too. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal
from typing import Any

from gpuclass.shared.core.base.k8s import parse_quantity

CPU, MEMORY, EPHEMERAL = "cpu", "memory", "ephemeral-storage"
MAX_AMOUNT = 2**62
"""An amount is read as at most this (bytes or millicores): sums stay inside int64."""
MAX_QUOTAS = 64
"""ResourceQuotas kept per namespace (Kubernetes enforces every one; more than a few is rare)."""


def _amount(value: object, scale: int) -> int:
    """A quantity times `scale`, rounded up as Kubernetes' Value() and MilliValue() round; 0 when
    unreadable, MAX_AMOUNT at most."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return 0
    try:
        parsed = parse_quantity(str(value)) * scale
    except (ValueError, ArithmeticError):
        return 0
    if parsed <= 0:
        return 0
    return min(int(parsed.to_integral_value(rounding=ROUND_CEILING)), MAX_AMOUNT)


def read_compute(resources: object) -> dict[str, int]:
    """CPU (millicores), memory and ephemeral storage (bytes) of a resource list."""
    if not isinstance(resources, dict):
        return {}
    found = {}
    for key, scale in ((CPU, 1000), (MEMORY, 1), (EPHEMERAL, 1)):
        if key in resources:
            found[key] = _amount(resources[key], scale)
    return found


@dataclass(frozen=True, slots=True)
class NodeDetail:
    """A node's labels and its CPU, memory and ephemeral-storage allocatable."""

    labels: Mapping[str, str]
    allocatable: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class Quota:
    """One ResourceQuota as the API server keeps it: `status.hard` and `status.used` (the quota
    controller's figures), each amount a Decimal."""

    name: str
    hard: Mapping[str, Decimal]
    used: Mapping[str, Decimal]


@dataclass(slots=True)
class ClusterDetail:
    """Per node its detail and what its bound Pending or Running Pods request."""

    nodes: dict[str, NodeDetail] = field(default_factory=dict)
    used: dict[str, dict[str, int]] = field(default_factory=dict)
    quotas_unread: bool = False
    """The caller may not list the namespace's ResourceQuotas: the quota was not checked."""


def node_detail(obj: Mapping[str, Any]) -> NodeDetail:
    """A node's labels (string values only) and its CPU, memory and ephemeral allocatable."""
    meta = obj.get("metadata")
    labels = meta.get("labels") if isinstance(meta, dict) else None
    status = obj.get("status")
    return NodeDetail(
        {k: v for k, v in labels.items() if isinstance(k, str) and isinstance(v, str)}
        if isinstance(labels, dict)
        else {},
        read_compute(status.get("allocatable") if isinstance(status, dict) else None),
    )


def _decimals(value: object) -> dict[str, Decimal]:
    if not isinstance(value, dict):
        return {}
    found = {}
    for key, amount in value.items():
        if isinstance(key, str) and isinstance(amount, str | int) and not isinstance(amount, bool):
            try:
                found[key] = parse_quantity(str(amount))
            except ValueError:
                continue
    return found


def compact_quota(obj: Mapping[str, Any]) -> tuple[str, Quota] | None:
    """(namespace, quota) of a ResourceQuota; None without a name and namespace."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return None
    name, namespace = meta.get("name"), meta.get("namespace")
    if not isinstance(name, str) or not isinstance(namespace, str):
        return None
    status, spec = obj.get("status"), obj.get("spec")
    status = status if isinstance(status, dict) else {}
    spec = spec if isinstance(spec, dict) else {}
    hard = _decimals(status.get("hard")) or _decimals(spec.get("hard"))
    return namespace, Quota(name, hard, _decimals(status.get("used")))


def extended_quota(obj: Mapping[str, Any]) -> tuple[str, Quota] | None:
    """(namespace, quota) of a ResourceQuota cut to its `requests.<extended resource>` keys: what
    a long-running reader keeps (the webhook), bounded whatever else the quota lists."""
    found = compact_quota(obj)
    if found is None:
        return None
    namespace, quota = found

    def cut(amounts: Mapping[str, Decimal]) -> dict[str, Decimal]:
        return {k: v for k, v in amounts.items() if k.startswith("requests.") and "/" in k}

    return namespace, Quota(quota.name, cut(quota.hard), cut(quota.used))


def group_quotas(quotas: Iterable[tuple[str, Quota]]) -> dict[str, list[Quota]]:
    """(namespace, quota) pairs grouped by namespace, sorted by name, at most MAX_QUOTAS each."""
    grouped: dict[str, list[Quota]] = {}
    for namespace, quota in sorted(quotas, key=lambda pair: (pair[0], pair[1].name)):
        held = grouped.setdefault(namespace, [])
        if len(held) < MAX_QUOTAS:
            held.append(quota)
    return grouped


def extended_left(quotas: Iterable[Quota]) -> dict[str, Decimal]:
    """`requests.<extended resource>` -> the least any of the quotas leaves of it: what VM
    admission's quota warning reads (docs/decisions.md, "Can this VM start, in full")."""
    left: dict[str, Decimal] = {}
    for quota in quotas:
        for key, hard in quota.hard.items():
            if key.startswith("requests.") and "/" in key:
                room = max(hard - quota.used.get(key, Decimal(0)), Decimal(0))
                left[key] = min(room, left.get(key, room))
    return left


def quota_keys(resource: str) -> tuple[str, ...]:
    """The quota keys that bound a Pod's request of `resource`: `requests.<r>` and, for CPU,
    memory and ephemeral storage, the bare name too (Kubernetes' ResourceQuota; an extended
    resource has only the `requests.` form)."""
    if resource in (CPU, MEMORY, EPHEMERAL):
        return (f"requests.{resource}", resource)
    return (f"requests.{resource}",)


@dataclass(frozen=True, slots=True)
class Headroom:
    """What one quota leaves of one key: the quota, the key, hard, used, and what is left."""

    quota: str
    key: str
    hard: Decimal
    used: Decimal

    @property
    def left(self) -> Decimal:
        """What the quota still admits of the key (never below 0)."""
        return max(self.hard - self.used, Decimal(0))


def headroom(quotas: list[Quota], wanted: Mapping[str, Decimal]) -> list[tuple[Headroom, Decimal]]:
    """Every (quota key, amount wanted) a namespace's quotas bound, with what they leave; the
    quota admission plugin refuses a Pod when any of them has less left than it asks."""
    found = []
    for quota in quotas:
        for resource, amount in wanted.items():
            for key in quota_keys(resource):
                if key in quota.hard:
                    room = Headroom(
                        quota.name, key, quota.hard[key], quota.used.get(key, Decimal(0))
                    )
                    found.append((room, amount))
    return found
