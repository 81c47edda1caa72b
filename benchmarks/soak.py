"""Soak: hours of churn and faults on a real control plane; nothing may drift, leak or fail.

The real kube-apiserver, etcd and kwok; two `gpuclass-webhook` replicas behind a Service and two
`gpuclass-reconciler` replicas with leader election, each as the chart's ServiceAccount with the
chart's RBAC and policies; a few hundred GPU nodes, a few thousand Pods and VMIs. Steady churn
(VMIs created through the webhooks and deleted, launcher Pods bound and ended, Pods, nodes
cordoned, tainted, relabelled and resized, classes edited, license sources rotated, namespaces
entitled and not) and a fault every `--fault-every` seconds, in turn: SIGKILL of the leader, a
rolling update of the webhook, a kube-apiserver restart, etcd compaction and defragmentation, and
every watch cut by a proxy; certificates and CAs rotate on their (minutes-long) lifetimes.

The machinery, and what each check compares, is in tests/soak_run.py; docs/testing.md ("The
soak") gives the design and the latest figures. Prints each figure with its goal; exits 1 when
an invariant was violated or an admission failed.

    .venv/bin/python benchmarks/soak.py                 # 30 minutes, 200 nodes
    .venv/bin/python benchmarks/soak.py --minutes 120   # every fault kind, each process short-lived
    # what a release's note reports: the leader killed last, so one leader lives 1.8 hours
    .venv/bin/python benchmarks/soak.py --minutes 120 --fault-every 1300 \
        --faults apiserver-restart,webhook-roll,etcd-compact-defrag,watch-cut,leader-kill
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.controlplane.cluster import ControlPlane, find_assets  # noqa: E402
from tests.controlplane.plugin import GPUCLASS_CRD, KUBEVIRT_CRDS  # noqa: E402
from tests.e2e_reconciler_helpers import FAST, PRODUCTION  # noqa: E402
from tests.soak_run import FAULTS, Report, Shape, Soak  # noqa: E402

MEMORY_GOAL_MB_PER_HOUR = 1.0
FD_GOAL_PER_HOUR = 1.0
WRITES_PER_CHANGE_GOAL = 1.0


def parse(argv: list[str]) -> tuple[Shape, argparse.Namespace]:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--nodes", type=int, default=200)
    p.add_argument("--pods", type=int, default=1500)
    p.add_argument("--vmis", type=int, default=300)
    p.add_argument("--churn-per-second", type=float, default=4.0)
    p.add_argument("--fault-every", type=float, default=600.0, help="seconds between faults")
    p.add_argument("--check-every", type=float, default=60.0, help="seconds between checks")
    p.add_argument(
        "--warmup",
        type=float,
        help=f"seconds a process runs before its memory counts (default {Shape.warmup:.0f})",
    )
    p.add_argument(
        "--fast-lease", action="store_true", help="3 s Lease instead of the chart's 15 s"
    )
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--faults",
        default=",".join(FAULTS),
        help=f"comma-separated, in turn (default: {','.join(FAULTS)})",
    )
    p.add_argument(
        "--keep-logs",
        type=Path,
        help="write each process's log, the samples and the report (report.json) into this folder",
    )
    p.add_argument(
        "--figures-from",
        type=Path,
        help="run nothing: print the figures of a kept report.json (--warmup applies again)",
    )
    a = p.parse_args(argv)
    unknown = set(a.faults.split(",")) - set(FAULTS)
    if unknown:
        p.error(f"unknown faults {sorted(unknown)}; choose from {', '.join(FAULTS)}")
    return (
        Shape(
            seconds=a.minutes * 60,
            nodes=a.nodes,
            pods=a.pods,
            vmis=a.vmis,
            churn_per_second=a.churn_per_second,
            fault_every=a.fault_every,
            check_every=a.check_every,
            warmup=Shape.warmup if a.warmup is None else a.warmup,
            timings=FAST if a.fast_lease else PRODUCTION,
            seed=a.seed,
            faults=tuple(a.faults.split(",")),
        ),
        a,
    )


def row(name: str, value: str, goal: str, met: bool | None) -> str:
    verdict = "" if met is None else ("MET" if met else "MISSED")
    return f"  {name:<46} {value:>18}   goal {goal:<14} {verdict}"


def figures(report: Report) -> tuple[list[str], bool]:
    """The lines to print and whether every hard goal (0 violations, 0 failed admissions) held."""
    lines = [
        f"soak: {report.elapsed / 60:.1f} min, {report.changes} changes, {report.checks} checks"
    ]
    slopes = report.slopes()
    for label, drift in sorted(slopes.items()):
        for name, value in (("floor", drift.floor), ("ceiling", drift.ceiling)):
            lines.append(
                row(
                    f"{label}: RSS {name} slope ({drift.hours:.2f} h)",
                    f"{value:+.2f} MB/h",
                    f"<= {MEMORY_GOAL_MB_PER_HOUR} MB/h",
                    value <= MEMORY_GOAL_MB_PER_HOUR,
                )
            )
        lines.append(
            row(
                f"{label}: RSS slope, every sample",
                f"{drift.every_sample:+.2f} MB/h",
                "(info)",
                None,
            )
        )
        lines.append(
            row(
                f"{label}: open files slope",
                f"{drift.fds:+.2f} /h",
                f"<= {FD_GOAL_PER_HOUR} /h",
                drift.fds <= FD_GOAL_PER_HOUR,
            )
        )
    for label, drift in sorted(slopes.items()):
        shape = "  ".join(f"{t / 60:.0f}m {low:.1f}/{high:.1f}" for t, low, high in drift.windows)
        lines.append(f"  {label} RSS floor/ceiling MB per window: {shape}")
        if drift.first_relist_step is not None:
            lines.append(
                f"  {label} floor across its first re-list (warm-up): "
                f"{drift.first_relist_step:+.1f} MB"
            )
    for label, series in sorted(report.samples.items()):
        if label not in slopes and series:
            first, last = series[0], series[-1]
            lines.append(
                row(
                    f"{label}: RSS first -> last (too short for a slope)",
                    f"{first[1]:.0f} -> {last[1]:.0f} MB",
                    "(info)",
                    None,
                )
            )
    violations = len(report.violations)
    lines.append(row("invariant violations", str(violations), "0", violations == 0))
    adm = report.admissions
    lines.append(
        row("admissions failed (webhook)", f"{adm.failed} of {adm.total}", "0", adm.failed == 0)
    )
    lines.append(
        row(
            "admissions failed while replicas rolled",
            str(adm.failed_rolling),
            "0",
            adm.failed_rolling == 0,
        )
    )
    lines.append(row("admissions refused by a decision", str(adm.refused), "(info)", None))
    lines.append(row("admissions with the API server down", str(adm.unreachable), "(info)", None))
    for fault in report.faults:
        took = "never" if fault.recovered is None else f"{fault.recovered:.1f} s"
        met = fault.recovered is not None and fault.recovered <= fault.goal
        lines.append(
            row(
                f"{fault.at / 60:5.1f} min {fault.kind} ({fault.lasted:.0f} s): consistent after",
                took,
                f"<= {fault.goal:.0f} s",
                met,
            )
        )
    writes = sum(report.status_writes.values())
    ratio = writes / report.changes if report.changes else 0.0
    lines.append(
        row(
            "status writes per change",
            f"{ratio:.2f} ({writes:.0f}/{report.changes})",
            f"<= {WRITES_PER_CHANGE_GOAL}",
            ratio <= WRITES_PER_CHANGE_GOAL,
        )
    )
    if report.settle_seconds:
        lines.append(
            row(
                "periodic check: settle p50 / max",
                f"{statistics.median(report.settle_seconds):.1f} / {max(report.settle_seconds):.1f} s",
                "(info)",
                None,
            )
        )
    lines.append(
        row(
            "serving certificates / CAs seen",
            f"{report.certificates_seen} / {report.cas_seen}",
            "(info)",
            None,
        )
    )
    lines.append(
        row("churn writes the API server refused", str(report.churn_errors), "(info)", None)
    )
    for text in report.slow_settles[:10]:
        lines.append(f"  slow settle: {text}")
    for text in report.violations[:10]:
        lines.append(f"  violation: {text}")
    for text in adm.examples[:10]:
        lines.append(f"  failed admission: {text}")
    return lines, violations == 0 and adm.failed == 0


def main(argv: list[str]) -> int:
    shape, a = parse(argv)
    keep_logs: Path | None = a.keep_logs
    if a.figures_from is not None:
        kept = Report.from_json(a.figures_from.read_text())
        if a.warmup is not None:
            kept.shape = dataclasses.replace(kept.shape, warmup=a.warmup)
        lines, held = figures(kept)
        print("\n".join(lines))
        return 0 if held else 1
    started = time.monotonic()

    def log(text: str) -> None:
        print(f"[{time.monotonic() - started:7.1f}s] {text}", flush=True)

    with ControlPlane(find_assets()) as plane, tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        plane.install_crds([GPUCLASS_CRD, *KUBEVIRT_CRDS])
        soak = Soak(plane, shape, Path(tmp), log)
        try:
            soak.setup()
            report = soak.run()
        finally:
            if keep_logs is not None:
                soak.keep_logs(keep_logs)
            soak.close()
    lines, held = figures(report)
    print("\n".join(lines))
    return 0 if held else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
