"""In-process admission decision time for a 4-GPU VMI, through `shared.review.review`.

The catalog is built once (as the webhook does per change of state); each run
times one `review(body, catalog)` call with `time.perf_counter_ns`: envelope
checks, selection parsing, every rule of docs/contract.md section 4, the patch and the
rendered response. Scenarios:

- `4x-one-class`: 4 units of the passthrough class example-whole-gpu (examples/);
- `2+2-two-classes`: 2 units of example-whole-gpu and 2 of example-big-gpu
  (examples/ plus tests/fixtures/objects/).

For context it also prints the same decision with the webhook's byte handling
around it (orjson parse of the request body, encoding of the response).

Goal: p99 <= 0.3 ms per decision. Run: `.venv/bin/python benchmarks/bench_decision.py`
(`BENCH_RUNS` overrides the 20,000 timed runs per scenario; at least 10,000 are used).
"""

from __future__ import annotations

import base64
import copy
import gc
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpuclass.shared.admission import encode_response  # noqa: E402
from gpuclass.shared.catalog import Catalog, Policy  # noqa: E402
from gpuclass.shared.cli import offline_catalog  # noqa: E402
from gpuclass.shared.review import review  # noqa: E402

RUNS = max(int(os.environ.get("BENCH_RUNS", "20000")), 10_000)
WARMUP = 1_000
ROUNDS = 5
GOAL_P99_MS = 0.3
ANNOTATION = "gpu.cozystack.io/classes"


def review_body(selection: list[dict[str, Any]]) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(
        (ROOT / "examples" / "reviews" / "vmi-whole-gpu.json").read_text()
    )
    body = copy.deepcopy(body)
    body["request"]["object"]["metadata"]["annotations"][ANNOTATION] = json.dumps(selection)
    return body


def percentile(sorted_ns: list[int], q: float) -> float:
    index = min(len(sorted_ns) - 1, max(0, round(q * len(sorted_ns)) - 1))
    return sorted_ns[index] / 1e6


def measure(call: Callable[[], object]) -> tuple[float, float, float]:
    """(median, p99 over every run, p99 of the quietest round) in ms.

    The runs are split into ROUNDS rounds: on a shared machine a burst of other
    work inflates one round's tail, and the quietest round shows the code's own.
    """
    for _ in range(WARMUP):
        call()
    gc.collect()
    clock = time.perf_counter_ns
    everything: list[int] = []
    round_p99: list[float] = []
    for _ in range(ROUNDS):
        timings = []
        for _ in range(RUNS // ROUNDS):
            start = clock()
            call()
            timings.append(clock() - start)
        timings.sort()
        round_p99.append(percentile(timings, 0.99))
        everything += timings
    everything.sort()
    return statistics.median(everything) / 1e6, percentile(everything, 0.99), min(round_p99)


def check(body: dict[str, Any], catalog: Catalog, gpus: int) -> None:
    """The scenario must exercise the full path: allowed, with a patch adding `gpus` GPU entries."""
    response = review(body, catalog)["response"]
    assert response["allowed"] is True, response
    ops = json.loads(base64.b64decode(response["patch"]))
    entries = next(op["value"] for op in ops if op["path"] == "/spec/domain/devices/gpus")
    assert len(entries) == gpus, entries


def main() -> None:
    examples = offline_catalog([str(ROOT / "examples")], Policy(vgpu_entitled=True))
    with_fixtures = offline_catalog(
        [str(ROOT / "examples"), str(ROOT / "tests" / "fixtures" / "objects")],
        Policy(vgpu_entitled=True),
    )
    scenarios = [
        ("4x-one-class", review_body([{"className": "example-whole-gpu", "count": 4}]), examples),
        (
            "2+2-two-classes",
            review_body(
                [
                    {"className": "example-whole-gpu", "count": 2},
                    {"className": "example-big-gpu", "count": 2},
                ]
            ),
            with_fixtures,
        ),
    ]
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"decision benchmark: {RUNS} timed runs per scenario in {ROUNDS} rounds after {WARMUP} warm-up runs"
        f" (python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {load})"
    )
    worst = 0.0
    for name, body, catalog in scenarios:
        check(body, catalog, 4)
        median, p99, quiet = measure(partial(review, body, catalog))
        worst = max(worst, p99)
        print(
            f"review() {name}: median {median:.4f} ms, p99 {p99:.4f} ms, quietest-round p99 {quiet:.4f} ms"
            f" (goal p99 <= {GOAL_P99_MS} ms: {_verdict(p99)}; quietest round: {_verdict(quiet)})"
        )
        raw = orjson.dumps(body)
        median, p99, quiet = measure(partial(_webhook_like, raw, catalog))
        print(
            f"  with body parse + response encode: median {median:.4f} ms, p99 {p99:.4f} ms,"
            f" quietest-round p99 {quiet:.4f} ms (context, no goal)"
        )
    print(f"worst p99 {worst:.4f} ms vs goal {GOAL_P99_MS} ms: {_verdict(worst)}")


def _webhook_like(raw: bytes, catalog: Catalog) -> bytes:
    return encode_response(review(orjson.loads(raw), catalog))


def _verdict(p99: float) -> str:
    return "met" if p99 <= GOAL_P99_MS else "MISSED"


if __name__ == "__main__":
    main()
