"""Webhook throughput and latency against a bare ASGI baseline, measured in the same run.

Starts `gpuclass-webhook --objects examples` and `benchmarks/bare_app.py` on the
same uvicorn, TLS and one worker each, pinned to CPU 0, and drives each with wrk
(pinned to CPU 1) over 16 keep-alive connections, alternating runs. Prints the
throughput of the 4-GPU VMI mutation as a ratio to the baseline and wrk's p50/p99.
It also prints each server's CPU time per request (from /proc): on a machine shared with
other work, wall-clock throughput swings with the neighbours' load, while CPU per request
barely moves, so the CPU ratio is the steadier reading of the same question.
Goals: ratio >= 0.5, p99 <= 5 ms at 16 connections. Needs `wrk` (Debian package).

Speed of wrong answers is worthless, so the bodies are checked: one answer is
read first and checked against the contract (allowed, uid echoed, a patch adding
gpu1..gpu4 of example.com/whole-gpu), and wrk then counts every response whose
body lacks that answer's exact patch (or, for the baseline, `"allowed":true`).
Any wrong body fails the run (exit 1).
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
BIN = Path(sys.executable).parent
DURATION = os.environ.get("BENCH_DURATION", "8s")
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
CONNECTIONS = 16


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


def start(command: list[str]) -> subprocess.Popen[bytes]:
    taskset = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    return subprocess.Popen(
        [*taskset, *command], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
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


def main() -> int:
    if not shutil.which("wrk"):
        print("bench_webhook: wrk not found (apt-get install wrk)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="gpuclass-bench-"))
    body = review_body()
    (work / "body.json").write_bytes(body)
    post = (
        'wrk.method = "POST"\n'
        'wrk.headers["Content-Type"] = "application/json"\n'
        f'local f = io.open("{work / "body.json"}", "rb")\nwrk.body = f:read("*all")\nf:close()\n'
    )
    webhook_port, bare_port = free_port(), free_port()
    webhook = start(
        [
            str(BIN / "gpuclass-webhook"),
            "--objects",
            "examples",
            "--vgpu-entitled",
            "--bind-address",
            "127.0.0.1",
            "--port",
            str(webhook_port),
            "--tls-dir",
            str(work / "tls"),
        ]
    )
    wait_ready(webhook_port, work / "tls" / "ca.crt")
    script = work / "post.lua"
    script.write_text(
        post + body_check(reference_patch(webhook_port, work / "tls" / "ca.crt", body))
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
            str(work / "tls" / "tls.crt"),
            "--ssl-keyfile",
            str(work / "tls" / "tls.key"),
            "--no-access-log",
            "--log-level",
            "warning",
        ]
    )
    wait_ready(bare_port, work / "tls" / "ca.crt")
    results: dict[str, list[tuple[float, float, float, int]]] = {"bare": [], "webhook": []}
    cpu_ms: dict[str, list[float]] = {"bare": [], "webhook": []}
    urls = {
        "bare": (f"https://127.0.0.1:{bare_port}/", bare, bare_script),
        "webhook": (
            f"https://127.0.0.1:{webhook_port}/mutate/virtualmachineinstances",
            webhook,
            script,
        ),
    }
    try:
        for url, _, lua in urls.values():
            wrk(url, lua)  # warm-up
        for _ in range(ROUNDS):
            for name, (url, proc, lua) in urls.items():
                before = cpu_seconds(proc.pid)
                result = wrk(url, lua)
                results[name].append(result)
                cpu_ms[name].append((cpu_seconds(proc.pid) - before) * 1000 / max(result[3], 1))
    finally:
        for proc in (webhook, bare):
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
    bare_rps = sorted(r[0] for r in results["bare"])[ROUNDS // 2]
    hook = sorted(results["webhook"])[ROUNDS // 2]
    print(
        f"review: 4-GPU VMI mutation, {len(body)} bytes; {ROUNDS} alternating rounds of {DURATION}, "
        f"{CONNECTIONS} connections, servers on CPU 0, wrk on CPU 1"
    )
    print(f"bare ASGI app:    {bare_rps:8.0f} req/s (median)")
    print(
        f"gpuclass-webhook: {hook[0]:8.0f} req/s (median), p50 {hook[1]:.2f} ms, p99 {hook[2]:.2f} ms"
    )
    print(
        f"throughput ratio: {hook[0] / bare_rps:.2f} (goal >= 0.5); p99 {hook[2]:.2f} ms (goal <= 5 ms)"
    )
    bare_cpu, hook_cpu = (sorted(cpu_ms[n])[ROUNDS // 2] for n in ("bare", "webhook"))
    if bare_cpu and hook_cpu:
        print(
            f"CPU per request: bare {bare_cpu:.3f} ms, webhook {hook_cpu:.3f} ms (medians); "
            f"CPU ratio {bare_cpu / hook_cpu:.2f} (the throughput ratio on an idle machine)"
        )
    print(
        f"response bodies checked: {BODIES['checked']}, wrong: {BODIES['bad']} "
        "(webhook: the reference patch; baseline: allowed)"
    )
    return 1 if BODIES["bad"] else 0


if __name__ == "__main__":
    sys.exit(main())
