"""Metrics every gpuclass server exports beside its own: `gpuclass_build_info` and the
process, platform and garbage-collector collectors of prometheus-client.

Both servers keep their metrics in a private CollectorRegistry (several instances can run in
one test process), and prometheus-client registers these collectors only in its global
default registry, which neither server serves; so they are registered here, per registry.
"""

from __future__ import annotations

import platform

from prometheus_client import (
    CollectorRegistry,
    Gauge,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
)

from gpuclass.shared.kube.version import package_version


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
