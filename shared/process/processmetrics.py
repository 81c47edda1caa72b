"""Metrics every gpuclass server exports beside its own: `gpuclass_build_info` and the
process, platform and garbage-collector collectors of prometheus-client; and the one way both
declare their own, as data (:class:`MetricSpec`: name, type, help, labels, buckets), from which
:func:`build_metrics` fills a registry.

Both servers keep their metrics in a private CollectorRegistry (several instances can run in
one test process), and prometheus-client registers these collectors only in its global
default registry, which neither server serves; so they are registered here, per registry.
"""

from __future__ import annotations

import platform
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)

from gpuclass.shared.process.version import package_version


def register_standard_metrics(registry: CollectorRegistry) -> None:
    """`gpuclass_build_info{version, python}` (always 1), `process_*`, `python_info` and
    `python_gc_*` in `registry` (docs/metrics.md, "Build and process")."""
    info = Gauge(
        "gpuclass_build_info",
        "Always 1; the labels name the installed gpuclass version and the Python version",
        ["version", "python"],
        registry=registry,
    )
    info.labels(package_version(), platform.python_version()).set(1)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)


Metric = Counter | Gauge | Histogram


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One metric as declared: the attribute its owner keeps it in, its type, exposition name
    (a counter's gets `_total` from prometheus-client), help, labels, and a histogram's buckets."""

    attribute: str
    type: Literal["counter", "gauge", "histogram"]
    name: str
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()


def build_metric(spec: MetricSpec, registry: CollectorRegistry) -> Metric:
    """The metric `spec` declares, registered in `registry`."""
    if spec.type == "histogram":
        return Histogram(spec.name, spec.help, spec.labels, registry=registry, buckets=spec.buckets)
    kind = Counter if spec.type == "counter" else Gauge
    return kind(spec.name, spec.help, spec.labels, registry=registry)


def build_metrics(specs: Iterable[MetricSpec], registry: CollectorRegistry) -> dict[str, Metric]:
    """Every metric of `specs`, in their order (the exposition's), by attribute."""
    return {spec.attribute: build_metric(spec, registry) for spec in specs}
