"""The soak's shortest form: the same world, churn, faults and invariants as benchmarks/soak.py,
for about two minutes instead of hours.

Its own control plane (a fault restarts the API server, which the session's shared plane must
not see), 16 nodes, 40 Pods, 16 VMIs, the five faults once each, back to back. What must hold,
whatever the machine: every check met (a from-scratch `--once` on a fresh list agrees with what
is written, every copy mounted and current, no class held in use by nothing, a living reconciler
holding the Lease), no admission failed while the webhook replicas rolled or otherwise, every
fault followed by a consistent state again, and nothing left behind once the last VMI is gone.
Figures (memory slopes, recovery seconds) are the benchmark's to print; here a recovery only has
to happen within the settle bound.

The check can fail: a license copy planted with no VMI mounting it is reported, and so is a Lease
still held by a killed leader.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.builders import api_secret
from tests.controlplane.cluster import AssetsUnavailable, ControlPlane, find_assets
from tests.controlplane.components import missing_binaries
from tests.controlplane.plugin import GPUCLASS_CRD, KUBEVIRT_CRDS
from tests.e2e_reconciler_helpers import FAST, MANAGED, TOKEN_KEY
from tests.soak_run import FAULTS, Report, Shape, Soak
from tests.soak_world import tenant

pytestmark = pytest.mark.controlplane

SHORT = Shape(
    seconds=95.0,
    nodes=16,
    pods=40,
    vmis=16,
    tenants=4,
    churn_per_second=4.0,
    probes_per_second=2.0,
    fault_every=4.0,
    check_every=30.0,
    sample_every=5.0,
    warmup=0.0,
    settle_timeout=60.0,
    timings=FAST,
    every_fault=True,  # a slow machine reaches the fifth fault later, never not at all
)


@pytest.fixture(scope="module")
def soak(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Soak, Report]]:
    try:
        assets = find_assets()
    except AssetsUnavailable as exc:
        pytest.skip(f"no control plane: {exc}")
    if missing := missing_binaries(assets, ("kwok",)):
        pytest.skip(f"{missing} not built")
    with ControlPlane(assets) as plane:
        plane.install_crds([GPUCLASS_CRD, *KUBEVIRT_CRDS])
        run = Soak(
            plane, SHORT, Path(tmp_path_factory.mktemp("soak")), print
        )  # shown when a test fails
        try:
            run.setup()
            yield run, run.run()
        finally:
            run.close()


@pytest.mark.timeout(600)
def test_every_check_holds_through_churn_and_every_fault(soak: tuple[Soak, Report]) -> None:
    _, report = soak
    assert report.changes > 50, "the churn ran"
    assert report.admissions.allowed > 20, "admissions flowed"
    assert [f.kind for f in report.faults][: len(FAULTS)] == list(FAULTS)
    assert report.violations == []
    assert [f for f in report.faults if f.recovered is None] == []
    assert report.leftovers == []


@pytest.mark.timeout(600)
def test_no_admission_failed_while_replicas_rolled(soak: tuple[Soak, Report]) -> None:
    _, report = soak
    roll = next(f for f in report.faults if f.kind == "webhook-roll")
    assert roll.lasted > 0, "the replicas rolled"
    assert report.admissions.failed_rolling == 0, report.admissions.examples
    assert report.admissions.failed == 0, report.admissions.examples


@pytest.mark.timeout(600)
def test_every_process_was_sampled(soak: tuple[Soak, Report]) -> None:
    run, report = soak
    labels = {t.label for t in run.fleet.tracked}
    assert len([label for label in labels if label.startswith("webhook")]) >= 4, "two rolled"
    assert len([label for label in labels if label.startswith("reconciler")]) >= 3, "one killed"
    assert set(report.samples) <= labels
    assert all(rss > 10 and fds > 3 for series in report.samples.values() for _, rss, fds in series)


@pytest.mark.timeout(600)
def test_kept_logs_hold_every_process_log_and_every_sample(
    soak: tuple[Soak, Report], tmp_path: Path
) -> None:
    run, report = soak
    run.keep_logs(tmp_path)
    assert {p.stem for p in tmp_path.glob("*.log")} == set(run.fleet.started)
    rows = (tmp_path / "samples.tsv").read_text().splitlines()
    assert rows[0].split("\t") == ["process", "seconds", "rss_mb", "fds"]
    kept = [row.split("\t") for row in rows[1:]]
    assert len(kept) == sum(len(series) for series in report.samples.values())
    assert {process for process, *_ in kept} == set(report.samples)


@pytest.mark.timeout(600)
def test_the_check_sees_a_copy_nobody_mounts(soak: tuple[Soak, Report]) -> None:
    run, _ = soak
    stray = api_secret("gpuclass-license-soak-licensed-1", tenant(0), {TOKEN_KEY: "x"}, MANAGED)
    admin = run.plane.admin
    with contextlib.suppress(Exception):
        admin.delete(stray)
    admin.create(stray)
    try:
        problems = run.problems()
    finally:
        admin.delete(stray)
    assert any("gpuclass-license-soak-licensed-1" in p and "left behind" in p for p in problems)


@pytest.mark.timeout(600)
def test_the_check_sees_a_lease_held_by_a_killed_leader(soak: tuple[Soak, Report]) -> None:
    """It kills the leader; in whatever order they run, the other tests read the report, or look
    for their own finding among the check's."""
    run, _ = soak
    with run.api() as api:
        leader = run.fleet.leader(api)
    assert leader is not None, "a living replica held the Lease at the end of the run"
    run.fleet.kill_reconciler(leader)  # its Lease stays until it expires
    assert "no living reconciler holds the Lease" in run.problems()
