"""Webhook throughput and latency against two floors, measured in the same run.

Starts `gpuclass-webhook --objects examples`, `benchmarks/bare_app.py` on the same
uvicorn, HTTP protocol and event loop (the bare-ASGI floor: our stack doing nothing) and the Go floor
(`benchmarks/gofloor/`: a minimal controller-runtime webhook answering with a fixed
patch, what a hoster would otherwise run), each serving the same certificate with one
worker pinned to CPU 0, and drives each with wrk (pinned to CPU 1) over 16 keep-alive
connections, alternating runs. Prints the throughput of the 4-GPU VMI mutation and
wrk's p50/p99 over HTTPS for the three, and the ratios of gpuclass-webhook to each floor.
It also prints each server's CPU time per request (from /proc): on a machine shared with
other work, wall-clock throughput swings with the neighbours' load, while CPU per request
barely moves, so the CPU ratio is the steadier reading of the same question.
Goals: throughput >= 0.65x the bare-ASGI floor and >= 0.5x the Go floor, p99 <= 5 ms at
16 connections. Needs `wrk` (Debian package) and Go (the floor is built on first use,
`benchmarks/gofloor/build.sh`).

Speed of wrong answers is worthless, so the bodies are checked: one answer is
read first and checked against the contract (allowed, uid echoed, a patch adding
gpu1..gpu4 of example.com/whole-gpu), and wrk then counts every response whose
body lacks that answer's exact patch (the Go floor is given that patch), or, for the
bare floor, `"allowed":true`. Any wrong body fails the run (exit 1).

With `BENCH_BEFORE=<git ref>` (e.g. the commit before a change) a fourth server runs in the
same rounds: that commit's gpuclass-webhook (exported with `git archive`, benchmarks/before.py,
run by this interpreter with the same certificate and checked against the same patch), and the
throughput and CPU ratios of this checkout to it are printed too: a before/after figure taken
under the same neighbours' load.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
BIN = Path(sys.executable).parent
DURATION = os.environ.get("BENCH_DURATION", "8s")
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
CONNECTIONS = 16
GOAL_BARE, GOAL_GO, GOAL_P99_MS = 0.65, 0.5, 5.0
# The bare floor runs on the webhook's own HTTP protocol and event loop (webhook/main.py), not on
# uvicorn's "auto" choice, which follows whatever happens to be installed.
BARE_STACK = ["--http", "httptools", "--loop", "asyncio"]

from benchmarks import before, go_floor  # noqa: E402

BEFORE = os.environ.get("BENCH_BEFORE", "")


def review_body() -> bytes:
    review = json.loads((ROOT / "examples" / "reviews" / "vmi-whole-gpu.json").read_text())
    annotations = review["request"]["object"]["metadata"]["annotations"]
    annotations["gpu.cozystack.io/classes"] = json.dumps(
        [{"className": "example-whole-gpu", "count": 4}]
    )
    return json.dumps(review).encode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(port: int, ca: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            context = ssl.create_default_context(cafile=str(ca))
            with (
                socket.create_connection(("127.0.0.1", port), timeout=1) as raw,
                context.wrap_socket(raw, server_hostname="127.0.0.1"),
            ):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"server on {port} did not come up")


def start(command: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    taskset = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    return subprocess.Popen(
        [*taskset, *command],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (0 where /proc is missing)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def reference_patch(port: int, ca: Path, body: bytes) -> str:
    """POST the review once, check the answer against the contract, return its base64 patch."""
    context = ssl.create_default_context(cafile=str(ca))
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    try:
        conn.request(
            "POST",
            "/mutate/virtualmachineinstances",
            body,
            {"Content-Type": "application/json"},
        )
        reply = conn.getresponse()
        answer = json.loads(reply.read())
    finally:
        conn.close()
    response = answer["response"]
    uid = json.loads(body)["request"]["uid"]
    if reply.status != 200 or response.get("uid") != uid or response.get("allowed") is not True:
        raise RuntimeError(f"unexpected answer: {answer}")
    operations = json.loads(base64.b64decode(response["patch"]))
    gpus = [
        entry
        for op in operations
        if op["path"].startswith("/spec/domain/devices/gpus")
        for entry in (op["value"] if isinstance(op["value"], list) else [op["value"]])
    ]
    wanted = [{"name": f"gpu{i}", "deviceName": "example.com/whole-gpu"} for i in range(1, 5)]
    if gpus != wanted:
        raise RuntimeError(f"patch does not add the four GPUs: {operations}")
    return str(response["patch"])


def body_check(expected: str) -> str:
    """wrk Lua that counts responses that are not 200 with `expected` in the body."""
    return LUA_BODY_CHECK.replace("EXPECTED", json.dumps(expected))


LUA_BODY_CHECK = r"""
local expected = EXPECTED
local threads = {}
function setup(thread) table.insert(threads, thread) end
checked = 0
bad = 0
function response(status, headers, body)
  checked = checked + 1
  if status ~= 200 or not string.find(body, expected, 1, true) then bad = bad + 1 end
end
function done(summary, latency, requests)
  local c, b = 0, 0
  for _, t in ipairs(threads) do c = c + t:get("checked"); b = b + t:get("bad") end
  io.write(string.format("bodies checked %d bad %d\n", c, b))
end
"""


BODIES = {"checked": 0, "bad": 0}


def wrk(url: str, script: Path) -> tuple[float, float, float, int]:
    taskset = ["taskset", "-c", "1"] if shutil.which("taskset") else []
    out = subprocess.run(
        [
            *taskset,
            "wrk",
            "-t1",
            f"-c{CONNECTIONS}",
            f"-d{DURATION}",
            "--latency",
            "-s",
            str(script),
            url,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if non2xx:
        raise RuntimeError(f"{url}: {non2xx.group(1)} error responses\n{out}")
    bodies = re.search(r"bodies checked (\d+) bad (\d+)", out)
    if not bodies:
        raise RuntimeError(f"{url}: wrk did not report the body check\n{out}")
    BODIES["checked"] += int(bodies.group(1))
    BODIES["bad"] += int(bodies.group(2))

    def pct(p: str) -> float:
        value, unit = re.search(rf"{p}%\s+([\d.]+)(us|ms|s)", out).groups()  # type: ignore[union-attr]
        return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]

    served = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    return rps, pct("50"), pct("99"), served


WEBHOOK_RUN = "import sys; from gpuclass.webhook.main import main; sys.exit(main())"


def webhook_command(port: int, tls: list[str], *, python: bool = False) -> list[str]:
    """gpuclass-webhook on `port` (the console script, or this interpreter running `main`)."""
    program = (
        [str(BIN / "python"), "-c", WEBHOOK_RUN] if python else [str(BIN / "gpuclass-webhook")]
    )
    args = ["--objects", "examples", "--vgpu-entitled", "--bind-address", "127.0.0.1"]
    return [*program, *args, "--port", str(port), *tls]


def main() -> int:
    if not shutil.which("wrk"):
        print("bench_webhook: wrk not found (apt-get install wrk)", file=sys.stderr)
        return 2
    gofloor, build_seconds = go_floor.build()
    print(f"Go floor: {gofloor} (build step {build_seconds:.1f} s; cached after the first build)")
    work = Path(tempfile.mkdtemp(prefix="gpuclass-bench-"))
    body = review_body()
    (work / "body.json").write_bytes(body)
    post = (
        'wrk.method = "POST"\n'
        'wrk.headers["Content-Type"] = "application/json"\n'
        f'local f = io.open("{work / "body.json"}", "rb")\nwrk.body = f:read("*all")\nf:close()\n'
    )
    tls, ca = work / "tls", work / "tls" / "ca.crt"
    webhook_port, bare_port = free_port(), free_port()
    webhook = start(webhook_command(webhook_port, ["--tls-dir", str(tls)]))
    wait_ready(webhook_port, ca)
    script = work / "post.lua"
    patch = reference_patch(webhook_port, ca, body)
    script.write_text(post + body_check(patch))
    floor = go_floor.GoFloor(
        gofloor, port=free_port(), cert_dir=tls, patch=base64.b64decode(patch), cpus="0"
    )
    bare_script = work / "bare.lua"
    bare_script.write_text(post + body_check('"allowed":true'))
    bare = start(
        [
            str(BIN / "python"),
            "-m",
            "uvicorn",
            "benchmarks.bare_app:app",
            "--host",
            "127.0.0.1",
            "--port",
            str(bare_port),
            "--ssl-certfile",
            str(tls / "tls.crt"),
            "--ssl-keyfile",
            str(tls / "tls.key"),
            "--no-access-log",
            "--log-level",
            "warning",
            *BARE_STACK,
        ]
    )
    wait_ready(bare_port, ca)
    path = "/mutate/virtualmachineinstances"
    urls = {
        "bare": (f"https://127.0.0.1:{bare_port}/", bare, bare_script),
        "gofloor": (f"{floor.url}{path}", floor.proc, script),
        "webhook": (f"https://127.0.0.1:{webhook_port}{path}", webhook, script),
    }
    labels = {"bare": "bare ASGI floor", "gofloor": "Go floor", "webhook": "gpuclass-webhook"}
    if BEFORE:
        before_port = free_port()
        pair = ["--tls-cert-file", str(tls / "tls.crt"), "--tls-key-file", str(tls / "tls.key")]
        old = start(
            webhook_command(before_port, pair, python=True),
            env={"PYTHONPATH": str(before.export(BEFORE, work / "before"))},
        )
        wait_ready(before_port, ca)
        if reference_patch(before_port, ca, body) != patch:
            raise RuntimeError(f"{BEFORE} answers with another patch than this checkout")
        urls["before"] = (f"https://127.0.0.1:{before_port}{path}", old, script)
        labels["before"] = f"webhook {before.short(BEFORE)}"
    results: dict[str, list[tuple[float, float, float, int]]] = {name: [] for name in urls}
    cpu_ms: dict[str, list[float]] = {name: [] for name in urls}
    try:
        for url, _, lua in urls.values():
            wrk(url, lua)  # warm-up
        for _ in range(ROUNDS):
            for name, (url, proc, lua) in urls.items():
                started = cpu_seconds(proc.pid)
                result = wrk(url, lua)
                results[name].append(result)
                cpu_ms[name].append((cpu_seconds(proc.pid) - started) * 1000 / max(result[3], 1))
    finally:
        floor.stop()
        for name, (_, proc, _) in urls.items():
            if name != "gofloor":
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=30)
    report(results, cpu_ms, labels, len(body))
    return 1 if BODIES["bad"] else 0


def report(
    results: dict[str, list[tuple[float, float, float, int]]],
    cpu_ms: dict[str, list[float]],
    labels: dict[str, str],
    body_bytes: int,
) -> None:
    print(
        f"review: 4-GPU VMI mutation, {body_bytes} bytes; {ROUNDS} alternating rounds of "
        f"{DURATION}, {CONNECTIONS} connections, servers on CPU 0, wrk on CPU 1; load average "
        f"{os.getloadavg()[0]:.1f}"
    )
    median = {name: sorted(runs)[ROUNDS // 2] for name, runs in results.items()}
    for name, (rps, p50, p99, _) in median.items():
        print(
            f"{labels[name]:17} {rps:8.0f} req/s (median round), p50 {p50:.2f} ms, p99 {p99:.2f} ms"
        )
    hook = median["webhook"]
    for name, goal in (("bare", GOAL_BARE), ("gofloor", GOAL_GO)):
        ratio = hook[0] / median[name][0]
        print(
            f"throughput vs {labels[name]}: {ratio:.2f}x (goal >= {goal}x: "
            f"{'MET' if ratio >= goal else 'MISSED'})"
        )
    if "before" in median:
        print(f"throughput vs {labels['before']}: {hook[0] / median['before'][0]:.2f}x")
    print(
        f"gpuclass-webhook p99 {hook[2]:.2f} ms (goal <= {GOAL_P99_MS:g} ms: "
        f"{'MET' if hook[2] <= GOAL_P99_MS else 'MISSED'}); Go floor p99 {median['gofloor'][2]:.2f} ms"
    )
    cpu = {name: sorted(values)[ROUNDS // 2] for name, values in cpu_ms.items()}
    if all(cpu.values()):
        print(
            f"CPU per request (medians): bare {cpu['bare']:.3f} ms, Go floor {cpu['gofloor']:.3f} ms, "
            f"webhook {cpu['webhook']:.3f} ms; CPU ratios (the throughput ratios on an idle "
            f"machine) {cpu['bare'] / cpu['webhook']:.2f} vs bare, "
            f"{cpu['gofloor'] / cpu['webhook']:.2f} vs Go"
        )
        if "before" in cpu:
            print(
                f"CPU per request, {labels['before']}: {cpu['before']:.3f} ms; this checkout "
                f"needs {cpu['webhook'] / cpu['before']:.2f}x its CPU per request"
            )
    print(
        f"response bodies checked: {BODIES['checked']}, wrong: {BODIES['bad']} "
        "(webhook and Go floor: the reference patch; bare floor: allowed)"
    )


if __name__ == "__main__":
    sys.exit(main())
