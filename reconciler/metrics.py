"""The reconciler's Prometheus metrics (documented in docs/metrics.md, "## Reconciler").

Each :class:`ReconcilerMetrics` owns a private CollectorRegistry, so tests and the
benchmark can run several reconcilers in one process. Per-class series are set
from the computed status (by every replica, leader or not: dashboards work on any
pod) and removed when the class is deleted.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

from gpuclass.shared.core.base import names
from gpuclass.shared.core.status.availability import Figures
from gpuclass.shared.process.processmetrics import (
    MetricSpec,
    build_metrics,
    register_standard_metrics,
)

# No `<counter>_created` gauges, as in the webhook: nothing reads them, they double the series count.
disable_created_metrics()  # type: ignore[no-untyped-call]

CONDITION_STATUSES = ("True", "False", "Unknown")
MAX_TENANT_SERIES = 500
"""Largest namespace x class series of gpuclass_tenant_units (docs/metrics.md, "Cardinality")."""
OTHER = "_other"
"""Namespace label of the series that sums the rest (not a valid namespace name)."""


METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "free",
        "gauge",
        "gpuclass_free_units",
        "Free units of the class across eligible nodes (KubeVirt can start a VM there)",
        ("class",),
    ),
    MetricSpec(
        "max_free",
        "gauge",
        "gpuclass_max_free_per_node_units",
        "Largest free units of the class on one eligible node",
        ("class",),
    ),
    MetricSpec(
        "max_units",
        "gauge",
        "gpuclass_max_units_per_node_units",
        "Largest allocatable of the class on any host that runs virt-handler, ready or not",
        ("class",),
    ),
    MetricSpec(
        "eligible",
        "gauge",
        "gpuclass_eligible_nodes",
        "Ready, schedulable KubeVirt nodes (virt-handler ready, its devices advertised) whose taints the class tolerates",
        ("class",),
    ),
    MetricSpec(
        "allocatable",
        "gauge",
        "gpuclass_allocatable_units",
        "Allocatable units of the class summed over eligible nodes",
        ("class",),
    ),
    MetricSpec(
        "used",
        "gauge",
        "gpuclass_used_units",
        "Units of the class requested on eligible nodes (allocatable - free)",
        ("class",),
    ),
    MetricSpec(
        "tenant_units",
        "gauge",
        "gpuclass_tenant_units",
        "Units in use by admitted, scheduled or running VMIs, per namespace and class "
        f"(the {MAX_TENANT_SERIES} largest; the rest summed under namespace {OTHER!r})",
        ("namespace", "class"),
    ),
    MetricSpec(
        "waiting",
        "gauge",
        "gpuclass_waiting_vmis",
        "Admitted VMIs of the class whose launcher Pod is not bound yet (phase Pending or "
        "Scheduling)",
        ("class",),
    ),
    MetricSpec(
        "condition",
        "gauge",
        "gpuclass_condition",
        "1 for the current status of each condition of the class",
        ("class", "type", "status"),
    ),
    MetricSpec(
        "condition_reason",
        "gauge",
        "gpuclass_condition_reason",
        "1 for the current reason of each condition of the class (one series per condition; "
        "reasons are a fixed set, docs/contract.md 6.4 and 6.8)",
        ("class", "type", "reason"),
    ),
    MetricSpec(
        "reconcile", "counter", "gpuclass_reconcile", "Class reconciles by result", ("result",)
    ),
    MetricSpec(
        "duration",
        "histogram",
        "gpuclass_reconcile_duration_seconds",
        "Time of one reconcile pass over the dirty work",
        buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
    ),
    MetricSpec(
        "queue_depth", "gauge", "gpuclass_queue_depth", "Dirty items waiting for the worker"
    ),
    MetricSpec(
        "watch_restarts",
        "counter",
        "gpuclass_watch_restarts",
        "Re-lists of a watched resource (expired or failed watch)",
        ("resource",),
    ),
    MetricSpec(
        "store_errors",
        "counter",
        "gpuclass_store_errors",
        "Objects the cache raised on (a bug in the reconciler, logged with a traceback)",
        ("resource",),
    ),
    MetricSpec(
        "status_writes", "counter", "gpuclass_status_writes", "Successful writes of a class status"
    ),
    MetricSpec(
        "object_writes",
        "counter",
        "gpuclass_object_writes",
        "Other writes: license copies and finalizers, by kind, action and result",
        ("kind", "action", "result"),
    ),
    MetricSpec("leader", "gauge", "gpuclass_leader", "1 while this replica holds the Lease"),
    MetricSpec(
        "synced",
        "gauge",
        "gpuclass_source_synced",
        "1 while the watched resource's view is complete (listed, not re-listing)",
        ("resource",),
    ),
    MetricSpec(
        "ready",
        "gauge",
        "gpuclass_ready",
        "1 while /readyz answers 200: every resource listed, none failing to re-list too long",
    ),
    MetricSpec(
        "last_sync",
        "gauge",
        "gpuclass_last_sync_timestamp_seconds",
        "Unix time of the last reconcile pass with every watch in sync",
    ),
)
"""Every metric of :class:`ReconcilerMetrics`, in exposition order: docs/metrics.md lists them and
the chart's alerts read them, so a name, help text or label here is part of the interface."""


class ReconcilerMetrics:
    """Every metric the reconciler exports, in its own registry (one per Manager, so tests and the
    offline twin do not collide); declared in :data:`METRICS`, one attribute each."""

    free: Gauge
    max_free: Gauge
    max_units: Gauge
    eligible: Gauge
    allocatable: Gauge
    used: Gauge
    tenant_units: Gauge
    waiting: Gauge
    condition: Gauge
    condition_reason: Gauge
    reconcile: Counter
    duration: Histogram
    queue_depth: Gauge
    watch_restarts: Counter
    store_errors: Counter
    status_writes: Counter
    object_writes: Counter
    leader: Gauge
    synced: Gauge
    ready: Gauge
    last_sync: Gauge

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        register_standard_metrics(self.registry)
        for attribute, metric in build_metrics(METRICS, self.registry).items():
            setattr(self, attribute, metric)
        self._tenant_series: set[tuple[str, str]] = set()
        self._waiting_series: set[str] = set()
        self._reasons: dict[str, dict[str, str]] = {}
        self._figure_gauges = (
            self.free,
            self.max_free,
            self.max_units,
            self.eligible,
            self.allocatable,
            self.used,
        )
        """The per-class figure gauges, in the order :meth:`set_class` sets them."""
        self._figure_series: dict[str, tuple[Gauge, ...]] = {}
        """Each class's child series of `_figure_gauges` (`labels()` looked up once)."""
        self._conditions_shown: dict[str, tuple[tuple[Any, Any, Any], ...]] = {}
        """(type, status, reason) of each class's conditions as the series show them now."""

    def set_class(self, name: str, status: Mapping[str, Any], *, figures: Figures) -> None:
        """The class's gauges from the status just computed (whether or not it is written, so a
        follower's /metrics is current too): figures, per-condition status series, and the reason
        series.

        Called for every class a pass recomputes, so the figure series are looked up once per
        class and kept, and the condition series are set again only when a condition's status or
        reason changed (most pod events move a figure, not a condition).
        """
        series = self._figure_series.get(name)
        if series is None:
            series = self._figure_series[name] = tuple(
                gauge.labels(name) for gauge in self._figure_gauges
            )
        values = (
            status.get("free", 0),
            status.get("maxFreePerNode", 0),
            status.get("maxUnitsPerNode", 0),
            figures.eligible_nodes,
            figures.allocatable,
            figures.allocatable - figures.free,
        )
        for child, value in zip(series, values, strict=True):
            child.set(value)
        conditions = [c for c in status.get("conditions") or () if isinstance(c, dict)]
        shown = tuple((c.get("type"), c.get("status"), c.get("reason")) for c in conditions)
        if self._conditions_shown.get(name) == shown:
            return
        current = {c.get("type"): c.get("status") for c in conditions}
        for type_ in names.STATUS_CONDITION_TYPES:
            for value in CONDITION_STATUSES:
                self.condition.labels(name, type_, value).set(
                    1 if current.get(type_) == value else 0
                )
        self._set_reasons(name, status)
        self._conditions_shown[name] = shown

    def _set_reasons(self, name: str, status: Mapping[str, Any]) -> None:
        """One series per condition, its reason a label; a changed reason's old series goes."""
        reasons = {
            str(c["type"]): str(c["reason"])
            for c in status.get("conditions") or ()
            if isinstance(c, dict)
            and c.get("type") in names.STATUS_CONDITION_TYPES
            and c.get("reason")
        }
        before = self._reasons.get(name, {})
        for type_, reason in before.items():
            if reasons.get(type_) != reason:
                _remove(self.condition_reason, name, type_, reason)
        for type_, reason in reasons.items():
            self.condition_reason.labels(name, type_, reason).set(1)
        self._reasons[name] = reasons

    def forget_class(self, name: str) -> None:
        """Remove a deleted class's series (a stale gauge would keep alerting)."""
        self._figure_series.pop(name, None)
        self._conditions_shown.pop(name, None)
        for gauge in self._figure_gauges:
            _remove(gauge, name)
        for type_ in names.STATUS_CONDITION_TYPES:
            for value in CONDITION_STATUSES:
                _remove(self.condition, name, type_, value)
        for type_, reason in self._reasons.pop(name, {}).items():
            _remove(self.condition_reason, name, type_, reason)

    def set_usage(self, units: Mapping[tuple[str, str], int], waiting: Mapping[str, int]) -> None:
        """Tenant usage (bounded: :func:`bounded_tenant_units`) and waiting VMIs, stale series removed."""
        bounded = bounded_tenant_units(units)
        for key in self._tenant_series - set(bounded):
            _remove(self.tenant_units, *key)
        for (namespace, class_name), value in bounded.items():
            self.tenant_units.labels(namespace, class_name).set(value)
        self._tenant_series = set(bounded)
        for class_name in self._waiting_series - set(waiting):
            _remove(self.waiting, class_name)
        for class_name, count in waiting.items():
            self.waiting.labels(class_name).set(count)
        self._waiting_series = set(waiting)


def bounded_tenant_units(
    units: Mapping[tuple[str, str], int], cap: int = MAX_TENANT_SERIES
) -> dict[tuple[str, str], int]:
    """The `cap` largest (namespace, class) series; the rest summed per class under `_other`.

    Ties are broken by namespace and class, so the same state always gives the same series.
    At most `cap` + (number of classes) series, whatever the number of tenants.
    """
    ranked = sorted(units.items(), key=lambda item: (-item[1], item[0]))
    kept = dict(ranked[:cap])
    for (_, class_name), value in ranked[cap:]:
        key = (OTHER, class_name)
        kept[key] = kept.get(key, 0) + value
    return kept


def _remove(gauge: Gauge, *labels: str) -> None:
    with contextlib.suppress(KeyError):
        gauge.remove(*labels)
