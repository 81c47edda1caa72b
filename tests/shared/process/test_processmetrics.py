"""`gpuclass_build_info` and the process metrics on both servers' /metrics
(shared/process/processmetrics.py; docs/metrics.md, "Build and process").

Each server is started for real, from the example files, and scraped over HTTP(S).
"""

from __future__ import annotations

import asyncio
import platform
import re
import ssl
from importlib import metadata
from pathlib import Path

import httpx

from gpuclass.reconciler.offline import file_reconciler
from gpuclass.reconciler.settings import ReconcilerSettings
from tests.webhook_process import WebhookProcess

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"
BUILD_INFO = (
    f'gpuclass_build_info{{python="{platform.python_version()}",'
    f'version="{metadata.version("gpuclass")}"}} 1.0'
)
PROCESS_SERIES = (
    "process_cpu_seconds_total",
    "process_resident_memory_bytes",
    "process_start_time_seconds",
    "process_open_fds",
    "python_info",
)


def check(exposition: str) -> None:
    assert BUILD_INFO in exposition.splitlines()
    for name in PROCESS_SERIES:
        assert re.search(rf"^{name}(\{{.*\}})? \S+$", exposition, re.M), name
    assert "_created" not in exposition  # docs/metrics.md, "No `_created` series"


def test_the_webhook_serves_build_info_and_process_metrics(tmp_path: Path) -> None:
    server = WebhookProcess(["--objects", str(EXAMPLES)], tls_dir=tmp_path)
    try:
        verify = ssl.create_default_context(cafile=server.ca)
        with httpx.Client(verify=verify, timeout=10) as client:
            check(client.get(server.url + "/metrics").text)
    finally:
        server.stop()


def test_the_reconciler_serves_build_info_and_process_metrics() -> None:
    settings = ReconcilerSettings(objects=[EXAMPLES], port=0, bind_address="127.0.0.1")

    async def scrape() -> str:
        reconciler, _ = file_reconciler(settings)
        running = asyncio.create_task(reconciler.run())
        try:
            while not reconciler.ready or reconciler.bound_port() is None:
                await asyncio.sleep(0.02)
            async with httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{reconciler.bound_port()}"
            ) as http:
                return (await http.get("/metrics")).text
        finally:
            reconciler.stop()
            await asyncio.wait_for(running, 10)

    check(asyncio.run(asyncio.wait_for(scrape(), 30)))


def test_declared_metrics_are_built_in_order_each_as_its_type_says() -> None:
    from typing import get_type_hints

    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

    from gpuclass.reconciler.metrics import METRICS as RECONCILER
    from gpuclass.reconciler.metrics import ReconcilerMetrics
    from gpuclass.shared.process.processmetrics import MetricSpec, build_metrics
    from gpuclass.webhook.metrics import METRICS as WEBHOOK
    from gpuclass.webhook.metrics import WebhookMetrics

    specs = (
        MetricSpec("b", "counter", "t_b", "B.", ("x",)),
        MetricSpec("a", "histogram", "t_a", "A.", buckets=(1.0, 2.0)),
        MetricSpec("c", "gauge", "t_c", "C."),
    )
    registry = CollectorRegistry()
    built = build_metrics(specs, registry)
    assert list(built) == ["b", "a", "c"]
    assert [type(m) for m in built.values()] == [Counter, Histogram, Gauge]
    assert [m.name for m in registry.collect()] == ["t_b", "t_a", "t_c"]
    kinds = {"counter": Counter, "gauge": Gauge, "histogram": Histogram}
    for owner, table in ((ReconcilerMetrics, RECONCILER), (WebhookMetrics, WEBHOOK)):
        hints = get_type_hints(owner)
        assert {s.attribute: kinds[s.type] for s in table} == {
            name: hint for name, hint in hints.items() if hint in kinds.values()
        }, f"{owner.__name__}: one annotated attribute per declared metric, of its type"
