"""In-process admission decision time for a 4-GPU VMI, through `shared.core.admission.review.review`.

The catalog is built once (as the webhook does per change of state); each run
times one `review(body, catalog)` call with `time.perf_counter_ns`: envelope
checks, selection parsing, every rule of docs/contract.md section 4, the patch and the
rendered response. Scenarios:

- `4x-one-class`: 4 units of the passthrough class example-whole-gpu (examples/);
- `2+2-two-classes`: 2 units of example-whole-gpu and 2 of example-big-gpu
  (examples/ plus tests/fixtures/objects/).

A short annotation is parsed once and remembered (`shared.core.model.selection`), so the
scenarios above find theirs remembered, as a platform's repeated selections do; each is also
timed with a selection not seen before (the memory cleared before every run). For context it
also prints the same decision with the webhook's byte handling around it (orjson parse of the
request body, encoding of the response).

Then hostile reviews (issue 20), each as a ratio of its median to the median of a
normal review measured in the same run (`normal-1-class`: one unit of
example-whole-gpu), since a ratio survives a shared, busy machine better than a time:

- `hostile-256KiB`: the old legal maximum, a 256 KiB annotation of about 6,000
  entries of an unknown class (the costliest shape before the caps: one catalog
  look-up and one cause per entry);
- `hostile-at-caps:<shape>`: the costliest shapes that pass the caps of
  docs/contract.md 4.1 (2048 bytes, 16 entries) and are judged in full: 16 distinct
  unknown classes with invalid counts and raw `gpus` beside them, one entry with as
  many unknown keys as 2048 bytes hold, 16 valid entries of a vGPU class in an
  unentitled namespace, 1,000 integers, nesting 2,000 deep, a 2,000-digit count.

Last, a 96 KB spec with 3,000 license references 600 lists down (`deep-secret-references`), per
KB against the normal review per KB (no goal).

Goal: p99 <= 0.3 ms per decision; a hostile review's median <= 3x a normal one's, taken
round by round against the normal review interleaved with it. `BENCH_ONLY=hostile` runs the
hostile part alone.
Run: `.venv/bin/python benchmarks/bench_decision.py` (`BENCH_RUNS` overrides the 20,000
timed runs per scenario, at least 10,000 are used; hostile scenarios use a tenth).
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

from gpuclass.shared.cli.reviewcmd import offline_catalog  # noqa: E402
from gpuclass.shared.core.admission.decisions import encode_response  # noqa: E402
from gpuclass.shared.core.admission.resolution import remembered  # noqa: E402
from gpuclass.shared.core.admission.review import review  # noqa: E402
from gpuclass.shared.core.model.selection import (  # noqa: E402
    MAX_SELECTION_BYTES,
    remembered_selection,
)
from gpuclass.shared.core.status.catalog import Catalog, Policy  # noqa: E402

RUNS = max(int(os.environ.get("BENCH_RUNS", "20000")), 10_000)
WARMUP = 1_000
ROUNDS = 5
GOAL_P99_MS = 0.3
GOAL_HOSTILE_RATIO = 3.0
ANNOTATION = "gpu.cozystack.io/classes"


def review_body(selection: list[dict[str, Any]] | str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(
        (ROOT / "examples" / "reviews" / "vmi-whole-gpu.json").read_text()
    )
    body = copy.deepcopy(body)
    raw = selection if isinstance(selection, str) else json.dumps(selection)
    body["request"]["object"]["metadata"]["annotations"][ANNOTATION] = raw
    return body


def hostile_256_kib() -> dict[str, Any]:
    """The old legal maximum: a 256 KiB annotation (the API server's limit for all of them)."""
    entry = json.dumps({"className": "no-such-class"})
    raw = "[" + ", ".join([entry] * (256 * 1024 // (len(entry) + 2))) + "]"
    return review_body(raw)


def hostile_at_caps() -> list[tuple[str, dict[str, Any]]]:
    """The costliest selections the caps still let through to be judged in full."""
    unknown = [{"className": f"no-such-class-{i:02d}-" + "x" * 30, "count": 0} for i in range(16)]
    with_gpus = review_body(unknown)
    with_gpus["request"]["object"]["spec"]["domain"]["devices"]["gpus"] = [
        {"name": "gpu1", "deviceName": "example.com/whole-gpu"}
    ]
    keys = ",".join(f'"k{i}":1' for i in range(235))  # as many as 2048 bytes hold
    unentitled = review_body([{"className": "example-byol-vgpu"}] * 16)
    unentitled["request"]["namespace"] = "tenant-c"
    unentitled["request"]["object"]["metadata"]["namespace"] = "tenant-c"
    shapes = [
        ("16-unknown-classes-bad-counts-raw-gpus", with_gpus),
        ("unknown-keys", review_body(f'[{{"className": "example-whole-gpu", {keys}}}]')),
        ("16-vgpu-entries-unentitled", unentitled),
        ("1000-integers", review_body("[" + "1," * 1000 + "1]")),
        ("nesting-2000-deep", review_body("[" * 2000)),
        (
            "2000-digit-count",
            review_body('[{"className": "example-whole-gpu", "count": ' + "9" * 2000 + "}]"),
        ),
    ]
    for name, body in shapes:
        size = len(body["request"]["object"]["metadata"]["annotations"][ANNOTATION].encode())
        assert size <= MAX_SELECTION_BYTES, (name, size)
    return shapes


def percentile(sorted_ns: list[int], q: float) -> float:
    index = min(len(sorted_ns) - 1, max(0, round(q * len(sorted_ns)) - 1))
    return sorted_ns[index] / 1e6


def measure(call: Callable[[], object], *, runs: int = RUNS) -> tuple[float, float, float]:
    """(median, p99 over every run, p99 of the quietest round) in ms.

    The runs are split into ROUNDS rounds: on a shared machine a burst of other
    work inflates one round's tail, and the quietest round shows the code's own.
    """
    for _ in range(min(WARMUP, runs // 10)):
        call()
    gc.collect()
    clock = time.perf_counter_ns
    everything: list[int] = []
    round_p99: list[float] = []
    for _ in range(ROUNDS):
        timings = []
        for _ in range(max(runs // ROUNDS, 1)):
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
    if os.environ.get("BENCH_ONLY") == "hostile":  # the ratios alone, a minute instead of several
        hostile(
            offline_catalog(
                [str(ROOT / "examples"), str(ROOT / "tests" / "fixtures" / "objects")],
                Policy(vgpu_entitled=True),
            )
        )
        return
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
        median, p99, quiet = measure(_unremembered(partial(review, body, catalog), catalog))
        print(
            f"  with a selection not seen before: median {median:.4f} ms, p99 {p99:.4f} ms,"
            f" quietest-round p99 {quiet:.4f} ms (goal p99 <= {GOAL_P99_MS} ms: {_verdict(p99)})"
        )
        worst = max(worst, p99)
        raw = orjson.dumps(body)
        median, p99, quiet = measure(partial(_webhook_like, raw, catalog))
        print(
            f"  with body parse + response encode: median {median:.4f} ms, p99 {p99:.4f} ms,"
            f" quietest-round p99 {quiet:.4f} ms (context, no goal)"
        )
    print(f"worst p99 {worst:.4f} ms vs goal {GOAL_P99_MS} ms: {_verdict(worst)}")
    hostile(with_fixtures)


def hostile(catalog: Catalog) -> None:
    """Hostile reviews as ratios against a normal one, all measured in this run.

    Both sides of every ratio parse and resolve their annotation (the memories of selections and
    resolutions are cleared before each run): a tenant varies what it sends. Each scenario alternates with the normal review,
    round by round (ROUNDS x 2 rounds), and the ratio is taken per round: on a shared machine the
    load changes within seconds, and a ratio of two medians taken minutes apart would measure the
    load, not the code. The median of the round ratios is the figure; the range shows the noise.
    """
    runs = max(RUNS // 10, 1_000)
    normal_body = review_body([{"className": "example-whole-gpu", "count": 1}])
    check(normal_body, catalog, 1)
    # A tenant varies its selection, so neither side of a ratio finds it remembered: both are parsed.
    normal_call = _unremembered(partial(review, normal_body, catalog), catalog)
    normal, _, _ = measure(normal_call, runs=runs)
    print(f"review() normal-1-class: median {normal:.4f} ms ({runs} runs; the ratios' base)")
    worst = 0.0
    scenarios = [("hostile-256KiB", hostile_256_kib())]
    scenarios += [(f"hostile-at-caps:{name}", body) for name, body in hostile_at_caps()]
    for name, body in scenarios:
        response = review(body, catalog)["response"]
        assert response["allowed"] is False, (name, response)
        call = _unremembered(partial(review, body, catalog), catalog)
        ratios, medians = [], []
        for _ in range(ROUNDS * 2):
            base, _, _ = measure(normal_call, runs=runs // ROUNDS)
            median, _, _ = measure(call, runs=runs // ROUNDS)
            ratios.append(median / base)
            medians.append(median)
        ratio = statistics.median(ratios)
        worst = max(worst, ratio)
        causes = len(response["status"]["details"]["causes"])
        print(
            f"review() {name}: median {statistics.median(medians):.4f} ms, {ratio:.1f}x normal"
            f" (rounds {min(ratios):.1f}-{max(ratios):.1f}x; code {response['status']['code']},"
            f" {causes} causes listed)"
        )
    verdict = "met" if worst <= GOAL_HOSTILE_RATIO else "MISSED"
    print(
        f"worst hostile review {worst:.2f}x a normal one vs goal {GOAL_HOSTILE_RATIO}x: {verdict}"
    )
    deep_secret_references(catalog, normal_body, normal)
    many_volumes_many_licenses(catalog, normal_body, normal)


LICENSED_CLASSES = 256
VOLUMES = 12_000


def many_volumes_many_licenses(
    catalog: Catalog, normal_body: dict[str, Any], normal: float
) -> None:
    """Rule 8's own-volume check on a 1 MB VMI (12,000 volumes) against a catalog of 256 licensed
    classes, with a selection that cannot be read (so every licensed class is a candidate): per
    KB against the normal review per KB (goal: within 3x). What it cost when every volume was
    compared with every class is in docs/performance.md."""
    from dataclasses import replace as _replace

    from gpuclass.shared.core.model.snapshot import compact_class
    from gpuclass.shared.core.status.catalog import Offer

    offers = dict(catalog.offers)
    for i in range(LICENSED_CLASSES):
        record = compact_class(
            {
                "metadata": {"name": f"lic-{i}"},
                "spec": {
                    "vendor": "v",
                    "model": "m",
                    "mode": "vgpu",
                    "profile": "p",
                    "source": {"devicePlugin": {"resourceName": f"lic{i}.example.com/vgpu"}},
                    "license": {"secretName": "example-vgpu-license"},
                },
            }
        )
        assert record is not None and record.spec is not None
        offers[record.name] = Offer(record, None, True, 1, 1)
    licensed = _replace(catalog, offers=offers)
    body = review_body("not json")
    spec = body["request"]["object"]["spec"]
    spec["volumes"] = [
        {"name": f"v{i}", "secret": {"secretName": f"gpuclass-license-lic-{i % 300}"}}
        for i in range(VOLUMES)
    ]
    ratio = per_kb_against_normal(
        f"{VOLUMES}-volumes-{LICENSED_CLASSES}-licensed-classes",
        body,
        licensed,
        normal_body,
        normal,
        runs=20,
    )
    print(f"  goal <= {GOAL_HOSTILE_RATIO}x: {'met' if ratio <= GOAL_HOSTILE_RATIO else 'MISSED'}")


def deep_secret_references(catalog: Catalog, normal_body: dict[str, Any], normal: float) -> None:
    """A spec as large as the tenant likes costs in proportion to its bytes: 3,000 image pull
    Secrets naming a license copy, 600 lists down in `domain.clock` (which KubeVirt's schema keeps
    as written), per KB of JSON against the normal review per KB. No goal: a guide for rule 8's
    walk (what it cost before it kept only license names and made paths lazily is in
    docs/performance.md)."""
    node: Any = {"imagePullSecrets": [{"name": "gpuclass-license-a"}] * 3000}
    for _ in range(600):
        node = [node]
    body = review_body([])
    spec = body["request"]["object"]["spec"]
    spec["domain"]["clock"] = {"utc": {}, "x": node}
    per_kb_against_normal("deep-secret-references", body, catalog, normal_body, normal, runs=50)


def per_kb_against_normal(
    name: str,
    body: dict[str, Any],
    catalog: Catalog,
    normal_body: dict[str, Any],
    normal: float,
    *,
    runs: int,
) -> float:
    """Time a refused review per KB of its JSON against the normal review per KB; print both and
    return the ratio."""
    response = review(body, catalog)["response"]
    assert response["allowed"] is False
    size_kb = len(json.dumps(body)) / 1024
    normal_kb = len(json.dumps(normal_body)) / 1024
    median, _, _ = measure(partial(review, body, catalog), runs=runs)
    per_kb, normal_per_kb = median / size_kb * 1000, normal / normal_kb * 1000
    print(
        f"review() {name} ({size_kb:.0f} KB): median {median:.2f} ms,"
        f" {per_kb:.1f} us per KB against {normal_per_kb:.1f} us per KB for the normal review"
        f" ({per_kb / normal_per_kb:.1f}x)"
    )
    return per_kb / normal_per_kb


def _unremembered(call: Callable[[], object], catalog: Catalog) -> Callable[[], object]:
    """`call` with the remembered selections and resolutions forgotten first: each review parses
    and resolves its annotation."""

    def fresh() -> object:
        remembered_selection.cache_clear()
        remembered(catalog).clear()
        return call()

    return fresh


def _webhook_like(raw: bytes, catalog: Catalog) -> bytes:
    return encode_response(review(orjson.loads(raw), catalog))


def _verdict(p99: float) -> str:
    return "met" if p99 <= GOAL_P99_MS else "MISSED"


if __name__ == "__main__":
    main()
