"""The webhook under 1,000 hostile connections, beside the same figures without them, in one run.

Starts `gpuclass-webhook --objects examples` with its production limits on 127.0.0.1 (pinned
to CPU 0 when `taskset` exists). A well-behaved client (one keep-alive HTTPS connection, as
the API server keeps) posts the example VMI review for `BENCH_SECONDS` (default 15) and its
p50/p99 are taken; then `tests/attack_clients.py` (its own process, CPU 1) opens 1,000
hostile connections — idle, unfinished handshakes, slow headers, slow bodies, held 7 MiB
bodies, each reopened a second after the server cuts it — and the same client runs again.
Prints the server's RSS (at rest, and the peak under attack), p50/p99 without and with the
attack, and every wrong answer (there must be none). Goals: RSS under attack <= 150 MB
(the chart's limit is 256Mi), p99 under attack <= 3x p99 without. Bounded: the attack stops
by itself after the measurement. With `BENCH_BEFORE=<git ref>` the same run follows against
that commit's webhook (exported with `git archive`, benchmarks/before.py), for before/after
figures from one invocation.
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import before  # noqa: E402
from gpuclass.shared.cli.reviewcmd import offline_catalog  # noqa: E402
from gpuclass.shared.core.admission.decisions import encode_response  # noqa: E402
from gpuclass.shared.core.admission.review import review  # noqa: E402
from gpuclass.shared.core.status.catalog import Policy  # noqa: E402
from tests.attack_clients import PeakRss, rss_mb  # noqa: E402
from tests.webhook_process import WebhookProcess  # noqa: E402

SECONDS = float(os.environ.get("BENCH_SECONDS", "15"))
BEFORE = os.environ.get("BENCH_BEFORE", "")
HOSTILE = {"idle": 300, "no-handshake": 150, "slow-header": 250, "slow-body": 150, "held-body": 150}
RAMP_SECONDS = 4.0
BODY = (ROOT / "examples" / "reviews" / "vmi-whole-gpu.json").read_bytes()


def pinned(cpu: int) -> list[str]:
    return ["taskset", "-c", str(cpu)] if shutil.which("taskset") else []


def good_client(url: str, ca: str, expected: bytes, seconds: float) -> tuple[list[float], int]:
    """Latencies (ms) of back-to-back reviews on one keep-alive connection, and wrong answers."""
    latencies, wrong = [], 0
    deadline = time.monotonic() + seconds
    with httpx.Client(verify=ssl.create_default_context(cafile=ca), timeout=10) as client:
        while time.monotonic() < deadline:
            started = time.perf_counter()
            response = client.post(url, content=BODY, headers={"content-type": "application/json"})
            latencies.append((time.perf_counter() - started) * 1000)
            wrong += response.status_code != 200 or response.content != expected
    return latencies, wrong


def cut_and_refused(server: WebhookProcess) -> str:
    """What the limits did, from the server's own metrics."""
    text = httpx.get(
        server.url + "/metrics", verify=ssl.create_default_context(cafile=server.ca)
    ).text
    counts: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("gpuclass_webhook_connections_cut_total{"):
            counts[line.split('"')[1]] = float(line.split()[-1])
        elif line.startswith("gpuclass_webhook_requests_total{") and 'allowed="error"' in line:
            code = line.split('code="')[1].split('"')[0]
            counts[f"HTTP {code}"] = counts.get(f"HTTP {code}", 0) + float(line.split()[-1])
    return ", ".join(f"{k} {v:.0f}" for k, v in sorted(counts.items()) if v)


def pct(values: list[float], p: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(p) - 1]


@dataclass
class Figures:
    """One server's run: RSS at rest and its peak under attack, the well-behaved client's
    latencies without and with the attack, wrong answers, what the limits did."""

    rest_rss: float
    peak_rss: float
    quiet: list[float]
    loud: list[float]
    wrong: int
    alive: bool
    stats: str


def measure(expected: bytes, env: dict[str, str]) -> Figures:
    """The run described above, against one server (`env` may point PYTHONPATH elsewhere)."""
    work = Path(tempfile.mkdtemp(prefix="gpuclass-bench-attack-"))
    server = WebhookProcess(["--objects", "examples", "--vgpu-entitled"], tls_dir=work, env=env)
    if pinned(0):
        subprocess.run(
            ["taskset", "-p", "-c", "0", str(server.proc.pid)], check=True, capture_output=True
        )
    url = server.url + "/mutate/virtualmachineinstances"
    try:
        good_client(url, server.ca, expected, 1.0)  # warm-up
        rest_rss = rss_mb(server.proc.pid)
        quiet, quiet_wrong = good_client(url, server.ca, expected, SECONDS)
        monitor = PeakRss(server.proc.pid)
        monitor.start()
        attack = subprocess.Popen(
            [*pinned(1), sys.executable, "-m", "tests.attack_clients", str(server.port)]
            + [f"{kind}={count}" for kind, count in HOSTILE.items()]
            + ["--seconds", str(RAMP_SECONDS + SECONDS + 1)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        time.sleep(RAMP_SECONDS)
        loud, loud_wrong = good_client(url, server.ca, expected, SECONDS)
        attack.communicate(timeout=60)
        monitor.stopped.set()
        alive = server.proc.poll() is None
        stats = cut_and_refused(server)
    finally:
        server.stop()
    return Figures(rest_rss, monitor.peak, quiet, loud, quiet_wrong + loud_wrong, alive, stats)


def main() -> int:
    expected = encode_response(
        review(
            json.loads(BODY), offline_catalog([str(ROOT / "examples")], Policy(vgpu_entitled=True))
        )
    )
    if hasattr(os, "sched_setaffinity") and pinned(1):
        os.sched_setaffinity(0, {1})  # the measuring client beside the attack, not the server
    runs = {"this checkout": measure(expected, {})}
    if BEFORE:
        path = before.export(BEFORE, Path(tempfile.mkdtemp(prefix="gpuclass-before-")))
        runs[f"{before.short(BEFORE)} (before)"] = measure(expected, {"PYTHONPATH": str(path)})
    print(f"well-behaved client: example VMI review, one keep-alive connection, {SECONDS:g} s each")
    print(
        f"hostile connections: {sum(HOSTILE.values())} ({', '.join(f'{k} {v}' for k, v in HOSTILE.items())})"
    )
    for label, f in runs.items():
        q50, q99, l50, l99 = pct(f.quiet, 50), pct(f.quiet, 99), pct(f.loud, 50), pct(f.loud, 99)
        print(f"-- {label}")
        print(f"server-side: {f.stats}")
        print(f"server alive after the attack: {f.alive}")
        print(f"RSS at rest:            {f.rest_rss:6.1f} MB")
        print(f"RSS peak under attack:  {f.peak_rss:6.1f} MB (goal <= 150 MB; chart limit 256Mi)")
        print(f"without attack: {len(f.quiet):6d} answers, p50 {q50:6.2f} ms, p99 {q99:6.2f} ms")
        print(f"under attack:   {len(f.loud):6d} answers, p50 {l50:6.2f} ms, p99 {l99:6.2f} ms")
        print(f"wrong answers: {f.wrong}; p99 under attack / without: {l99 / q99:.2f} (goal <= 3)")
    return 0 if all(f.alive and not f.wrong for f in runs.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
