"""The webhook survives hostile clients while a well-behaved one keeps getting correct answers.

The real `gpuclass-webhook` listens on 127.0.0.1 with the production defaults except shorter
timeouts (so the test is short) and a lower connection cap (so the cap is reached). Hostile
clients (`tests/attack_clients.py`, in their own process) hold idle, unfinished-handshake,
slow-header, slow-body and held-body connections, more than the cap, for a bounded time.
Meanwhile a well-behaved client posts a VMI review again and again: each answer must be the
CLI's answer byte for byte and come back within the API server's default timeout, the
process must stay up, and its RSS must stay under the chart's 256Mi limit with a margin.
Speed is not asserted here; `benchmarks/bench_attack.py` prints the latency figures.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from gpuclass.shared.cli.main import offline_catalog
from gpuclass.shared.core.admission.decisions import encode_response
from gpuclass.shared.core.admission.review import review
from gpuclass.shared.core.status.catalog import Policy
from gpuclass.webhook import paths
from tests.attack_clients import PeakRss
from tests.conftest import OBJECTS
from tests.webhook_process import ROOT, WebhookProcess

CHART_MEMORY_LIMIT_MB = 256
MARGIN_MB = 64
ATTACK_SECONDS = 15
HOSTILE = {"idle": 80, "no-handshake": 40, "slow-header": 80, "slow-body": 60, "held-body": 40}
BODY = (ROOT / "examples" / "reviews" / "vmi-whole-gpu.json").read_bytes()


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads RSS from /proc")
def test_hostile_clients_do_not_take_the_webhook_down(tmp_path: Path) -> None:
    catalog = offline_catalog(OBJECTS, Policy(vgpu_entitled=True))
    expected = encode_response(review(json.loads(BODY), catalog))
    server = WebhookProcess(
        [
            *(a for p in OBJECTS for a in ("--objects", p)),
            "--vgpu-entitled",
            "--max-connections=200",
            "--max-in-flight=64",
            "--header-timeout-seconds=2",
            "--body-timeout-seconds=3",
        ],
        tls_dir=tmp_path,
    )
    monitor = PeakRss(server.proc.pid)
    monitor.start()
    attack = subprocess.Popen(
        [sys.executable, "-m", "tests.attack_clients", str(server.port)]
        + [f"{kind}={count}" for kind, count in HOSTILE.items()]
        + ["--seconds", str(ATTACK_SECONDS), "--pause", "0.2"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    answers, wrong, slowest = 0, [], 0.0
    try:
        time.sleep(2)  # let the attack reach the caps
        with httpx.Client(
            verify=ssl.create_default_context(cafile=server.ca), timeout=10
        ) as client:
            while attack.poll() is None:
                started = time.monotonic()
                response = client.post(
                    server.url + paths.MUTATE_VMIS,
                    content=BODY,
                    headers={"content-type": "application/json"},
                )
                slowest = max(slowest, time.monotonic() - started)
                answers += 1
                if response.status_code != 200 or response.content != expected:
                    wrong.append((response.status_code, response.text[:200]))
                time.sleep(0.02)
            metrics = client.get(server.url + paths.METRICS).text
        stats = attack.stdout.read() if attack.stdout else ""
        assert server.proc.poll() is None, "the webhook died under attack"
    finally:
        attack.kill()
        monitor.stopped.set()
        server.stop()
    print(f"answers {answers}, slowest {slowest:.3f} s, peak RSS {monitor.peak:.0f} MB, {stats}")
    assert answers >= 50
    assert wrong == [], f"{len(wrong)} wrong answers, first: {wrong[:3]}"
    assert slowest < 5, "every answer within the API server's default webhook timeout"
    assert monitor.peak < CHART_MEMORY_LIMIT_MB - MARGIN_MB
    for reason in ("header_timeout", "idle_evicted"):
        line = next(
            x
            for x in metrics.splitlines()
            if x.startswith(f'gpuclass_webhook_connections_cut_total{{reason="{reason}"}}')
        )
        assert float(line.split()[-1]) > 0, f"the attack never reached {reason}"
    assert 'code="408"' in metrics or 'code="503"' in metrics, "no body limit was reached"
