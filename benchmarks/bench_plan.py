"""`gpuclass plan` on a large proposed catalog: CPU seconds for 4,000 classes in one file.

A pull request controls the proposed catalog, so its size is the attacker's. The run writes the
examples' cluster and a catalog of N classes (BENCH_CLASSES, default 4,000; every one new, each on
its own resource) into one YAML file, runs `gpuclass plan --objects examples FILE` as a
subprocess and prints its CPU time (user + system, from the child's rusage) and peak memory.
With BENCH_BEFORE=<git ref> the same command runs from that ref's tree first, so before and after
come from one run. Goal: at most 2 s of CPU for 4,000 classes.

Run: `.venv/bin/python benchmarks/bench_plan.py` (BENCH_BEFORE=HEAD~3 for a comparison).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.before import export, short  # noqa: E402

CLASSES = int(os.environ.get("BENCH_CLASSES", "4000"))
GOAL_SECONDS = 2.0


def catalog(count: int) -> str:
    return yaml.safe_dump_all(
        {
            "apiVersion": "cozystack.io/v1alpha1",
            "kind": "GPUClass",
            "metadata": {"name": f"pr-class-{i:05d}"},
            "spec": {
                "vendor": "example",
                "model": f"m{i}",
                "mode": "passthrough",
                "source": {"devicePlugin": {"resourceName": f"pr{i}.example.com/gpu"}},
            },
        }
        for i in range(count)
    )


def timed(path: Path, env: dict[str, str]) -> tuple[float, float, int]:
    """(CPU seconds, peak RSS in MiB, exit code) of one `gpuclass plan` run."""
    command = [
        sys.executable,
        "-c",
        "import sys; from gpuclass.shared.cli.main import main; sys.exit(main())",
        "plan",
        "--objects",
        str(ROOT / "examples"),
        "--fail-on",
        "none",
        "-o",
        "json",
        str(path),
    ]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    return (
        usage.ru_utime + usage.ru_stime,
        usage.ru_maxrss / 1024,
        os.waitstatus_to_exitcode(status),
    )


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "catalog.yaml"
        path.write_text(catalog(CLASSES))
        size = path.stat().st_size / 2**20
        print(f"proposed catalog: {CLASSES} classes in one file of {size:.1f} MiB")
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUCLASS_")}
        before = os.environ.get("BENCH_BEFORE")
        if before:
            old = export(before, Path(folder) / "before")
            cpu, rss, code = timed(path, {**env, "PYTHONPATH": str(old)})
            print(f"  {short(before)}: {cpu:.2f} s CPU, peak {rss:.0f} MiB, exit {code}")
        cpu, rss, code = timed(path, env)
        verdict = "MET" if cpu <= GOAL_SECONDS else "MISSED"
        print(
            f"  this tree: {cpu:.2f} s CPU, peak {rss:.0f} MiB, exit {code}"
            f"   (goal <= {GOAL_SECONDS:.0f} s: {verdict})"
        )


if __name__ == "__main__":
    main()
