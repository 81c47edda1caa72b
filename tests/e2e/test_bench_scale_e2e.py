"""benchmarks/bench_scale_e2e.py runs end to end, at a tiny scale (a smoke test, no timings).

The benchmark starts its own control plane and kwok; this test runs it once with 32
nodes and 100 pods so that a change that breaks it is seen before someone needs the
figures. It checks what the run must show whatever the machine: every figure is
printed, every webhook response was right, and the positive control reached status.
Goals are not asserted (a figure is evidence to read, not a gate).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.controlplane.cluster import ControlPlane
from tests.controlplane.components import missing_binaries

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_scale_e2e.py"
TINY = {
    "BENCH_NODES": "32",
    "BENCH_PODS": "100",
    "BENCH_GPU_PODS": "10",
    "BENCH_ROUNDS": "1",
    "BENCH_CHURN_SECONDS": "4",
    "BENCH_VMIS": "10",
}


@pytest.mark.timeout(300)
def test_the_scale_benchmark_runs_at_a_tiny_scale(control_plane: ControlPlane) -> None:
    if missing := missing_binaries(control_plane.assets, ("kwok",)):
        pytest.skip(f"{missing} not built")
    env = {**os.environ, **TINY, "KUBEBUILDER_ASSETS": str(control_plane.assets)}
    done = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, env=env, timeout=280
    )
    out = done.stdout
    assert done.returncode in (0, 1), f"exit {done.returncode}\n{out}\n{done.stderr[-3000:]}"
    for line in ("setup: 32 kwok nodes", "initial sync", "reconciler process:", "churn 4s"):
        assert line in out, out
    assert "positive control reached status: True" in out, out
    assert "wrong responses 0" in out, out
    assert "pods kwok has not run yet: 0" in out, out
