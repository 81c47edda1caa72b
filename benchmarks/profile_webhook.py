"""Where a loaded webhook's time goes: cProfile inside the server while wrk drives it.

Starts `gpuclass-webhook --objects examples` (TLS, pinned to CPU 0, as bench_webhook.py runs
it) inside a small runner that switches cProfile on at SIGUSR1 and off at SIGUSR2, drives the
4-GPU VMI review with wrk (CPU 1, 16 keep-alive connections) for `BENCH_DURATION` (default
10s) after a warm-up, and prints the profiled CPU time split into the layers of the request
path: TLS, HTTP (the parser and uvicorn's protocol), our connection limits, ASGI/Starlette,
our handler (body read, decision, encode, log line, metrics) and the event loop with its
socket calls. Time spent waiting in epoll is left out (the server is idle then).
`BENCH_BEFORE=<git ref>` profiles that commit's webhook too (exported with `git archive`,
benchmarks/before.py), both servers driven in turn in 5 slices, so the two splits come from one
run under the same neighbours' load. `BENCH_TOP=N` also prints each
run's N largest functions by own time. cProfile slows Python code more than C code, so the
split overstates the Python layers; it shows where to look, and bench_webhook.py measures
the result.

Not run by pytest: `.venv/bin/python benchmarks/profile_webhook.py`
"""

from __future__ import annotations

import os
import pstats
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import before  # noqa: E402
from benchmarks.bench_webhook import free_port, review_body, wait_ready  # noqa: E402

DURATION = os.environ.get("BENCH_DURATION", "10s")
BEFORE = os.environ.get("BENCH_BEFORE", "")
TOP = int(os.environ.get("BENCH_TOP", "0"))
ROUNDS = 5

RUNNER = """
import cProfile, signal, sys
from gpuclass.webhook.main import main
profile = cProfile.Profile()
def stop(*_):
    profile.disable()
    profile.dump_stats(sys.argv[1])
signal.signal(signal.SIGUSR1, lambda *_: profile.enable())
signal.signal(signal.SIGUSR2, stop)
sys.exit(main(sys.argv[2:]))
"""

# (layer, pattern on "file:function"), first match wins; builtins have the file "~".
LAYERS = [
    ("idle (epoll wait)", r"~:<method 'poll' of 'select\.epoll'"),
    ("TLS", r"asyncio/sslproto\.py|/ssl\.py:|_ssl\._SSL"),
    # uvicorn's protocol with its parser: cProfile does not see httptools' C methods as calls
    # of their own, so llhttp's time shows in uvicorn's `data_received`; h11's is Python.
    ("HTTP: parser, uvicorn protocol", r"/uvicorn/|/h11/|httptools"),
    ("our connection limits", r"webhook/server\.py"),
    ("ASGI/Starlette routing", r"/starlette/|/fastapi/|webhook/app\.py:dispatch"),
    ("handler: body read", r"webhook/limits\.py"),
    ("handler: decision", r"shared/core/|webhook/catalogs\.py"),
    ("handler: JSON parse/encode", r"orjson|/base64\.py|binascii"),
    ("handler: log line", r"/logging/|shared/process/logs\.py"),
    ("handler: metrics", r"/prometheus_client/"),
    ("handler: route", r"webhook/app\.py"),
    ("event loop, sockets", r"/asyncio/|/selectors\.py|_socket\.socket|~:<built-in method _"),
]


def layer_of(file: str, function: str) -> str:
    key = f"{file}:{function}"
    return next((name for name, pattern in LAYERS if re.search(pattern, key)), "other")


Function = tuple[str, int, str]


def split(stats_file: Path) -> tuple[dict[str, float], int, list[tuple[float, str]]]:
    """Own time per layer, the number of admission answers, and the largest functions. A
    function of no layer (a builtin such as `isinstance`, the standard library's `re` or
    `enum`) has its time charged to its callers' layers, in the shares cProfile recorded."""
    raw = pstats.Stats(str(stats_file)).stats  # type: ignore[attr-defined]
    layers: dict[str, float] = defaultdict(float)

    def charge(function: Function, seconds: float, depth: int = 0) -> None:
        layer = layer_of(function[0], function[2])
        callers = raw.get(function, (0, 0, 0, 0, {}))[4]
        spent = sum(entry[2] for entry in callers.values())
        if layer != "other" or depth > 8 or not spent:
            layers[layer] += seconds
            return
        for caller, entry in callers.items():
            charge(caller, seconds * entry[2] / spent, depth + 1)

    answers = 0
    functions = []
    for function, (_cc, calls, own, _cum, _callers) in raw.items():
        charge(function, own)
        file, line, name = function
        if file.endswith("webhook/app.py") and name in ("_answer", "answer"):
            answers = max(answers, calls)
        functions.append((own, f"{Path(file).name}:{line}:{name}"))
    return layers, answers, sorted(functions, reverse=True)[:TOP]


def wrk(url: str, script: Path, duration: str) -> str:
    taskset = ["taskset", "-c", "1"] if shutil.which("taskset") else []
    return subprocess.run(
        [*taskset, "wrk", "-t1", "-c16", f"-d{duration}", "-s", str(script), url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


@dataclass
class Profiled:
    """One server under cProfile: its process, URL and the file its profile is written to."""

    proc: subprocess.Popen[bytes]
    url: str
    out: Path


def start(label: str, env: dict[str, str], work: Path) -> Profiled:
    port = free_port()
    tls = work / f"tls-{label}"
    taskset = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    args = ["--objects", "examples", "--vgpu-entitled", "--bind-address", "127.0.0.1"]
    args += ["--port", str(port), "--tls-dir", str(tls), "--drain-seconds", "0"]
    out = work / f"{label}.prof"
    proc = subprocess.Popen(
        [*taskset, sys.executable, "-c", RUNNER, str(out), *args],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_ready(port, tls / "ca.crt")
    return Profiled(proc, f"https://127.0.0.1:{port}/mutate/virtualmachineinstances", out)


def profile(servers: dict[str, Profiled], script: Path) -> None:
    """Warm each up, then drive them in turn (`ROUNDS` slices of `DURATION`) with cProfile on in
    all: every server sees the same neighbours' load."""
    for server in servers.values():
        wrk(server.url, script, "2s")
        server.proc.send_signal(signal.SIGUSR1)
    seconds = max(1, round(float(DURATION.rstrip("s")) / ROUNDS))  # wrk takes whole seconds
    served: dict[str, float] = dict.fromkeys(servers, 0.0)
    for _ in range(ROUNDS):
        for label, server in servers.items():
            out = wrk(server.url, script, f"{seconds}s")
            served[label] += float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    for label, server in servers.items():
        server.proc.send_signal(signal.SIGUSR2)
        print(f"{label}: {served[label] / ROUNDS:.0f} requests/s under cProfile")
    for server in servers.values():
        deadline = time.monotonic() + 30
        while not server.out.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)  # the dump is written by now


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="gpuclass-profile-"))
    (work / "body.json").write_bytes(review_body())
    script = work / "post.lua"
    script.write_text(
        'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
        f'local f = io.open("{work / "body.json"}", "rb")\nwrk.body = f:read("*all")\nf:close()\n'
    )
    runs: dict[str, dict[str, str]] = {"this checkout": {}}
    if BEFORE:
        path = before.export(BEFORE, work / "before")
        runs[f"{before.short(BEFORE)} (before)"] = {"PYTHONPATH": str(path)}
    servers: dict[str, Profiled] = {}
    try:
        for index, (label, env) in enumerate(runs.items()):
            servers[label] = start(str(index), env, work)
        profile(servers, script)
    finally:
        for server in servers.values():
            server.proc.send_signal(signal.SIGTERM)
            server.proc.wait(timeout=30)
    results = {label: split(server.out) for label, server in servers.items()}
    names = [name for name, _ in LAYERS if not name.startswith("idle")] + ["other"]
    print(
        f"\nprofiled CPU per admission answer (us) and share, cProfile on, {DURATION} of wrk "
        "each, 16 connections"
    )
    print(f"{'layer':30}" + "".join(f"{label:>22}" for label in results))
    for name in names:
        cells = []
        for layers, answers, _ in results.values():
            busy = sum(v for k, v in layers.items() if not k.startswith("idle"))
            us = layers.get(name, 0.0) * 1e6 / max(answers, 1)
            cells.append(f"{us:8.0f} {100 * layers.get(name, 0.0) / busy:5.1f}%")
        print(f"{name:30}" + "".join(f"{c:>22}" for c in cells))
    totals = []
    for layers, answers, _ in results.values():
        busy = sum(v for k, v in layers.items() if not k.startswith("idle"))
        totals.append(f"{busy * 1e6 / max(answers, 1):8.0f} ({answers} answers)")
    print(f"{'total':30}" + "".join(f"{t:>22}" for t in totals))
    for label, (_, _, top) in results.items():
        if top:
            print(f"\n{label}: largest own times (s)")
            for own, name in top:
                print(f"  {own:7.3f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
