"""`gpuclass_build_info` and the process metrics on both servers' /metrics
(shared/kube/processmetrics.py; docs/metrics.md, "Build and process").

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
