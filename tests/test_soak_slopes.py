"""The soak's memory slope (`tests/soak_run.py`): a drift counts, a role's step does not.

Expected figures come from the series' construction: a flat line with a step where a standby
took the Lease has no drift; a line rising 2 MB an hour has 2 MB/h, step or not.
"""

from __future__ import annotations

import pytest

from tests.soak_run import FaultRecord, Report, Shape, pooled_slope

HOUR = 3600.0


def series(minutes: int, level: float, drift_per_hour: float) -> list[tuple[float, float]]:
    return [(m * 60.0, level + drift_per_hour * m / 60) for m in range(minutes)]


def test_a_step_between_stretches_is_no_slope() -> None:
    before, after = series(60, 112.0, 0.0), [(t + HOUR, v + 8.0) for t, v in series(60, 112.0, 0)]
    assert pooled_slope([before, after]) == 0.0
    assert pooled_slope([before + after]) * HOUR > 4  # one stretch: the step reads as a drift


def test_a_drift_is_seen_across_a_step() -> None:
    before = series(60, 112.0, 2.0)
    after = [(t + HOUR, v + 8.0) for t, v in series(60, 114.0, 2.0)]
    assert pooled_slope([before, after]) * HOUR == pytest.approx(2.0)


def test_one_point_stretches_and_no_stretch_give_nothing() -> None:
    assert pooled_slope([]) == 0.0
    assert pooled_slope([[(0.0, 1.0)], [(60.0, 5.0)]]) == 0.0


def test_a_reconciler_that_takes_the_lease_gets_two_stretches() -> None:
    report = Report(Shape(warmup=0.0))
    report.started = {"reconciler-5": 0.0, "webhook-1": 0.0}
    # standby for 40 min at 112 MB, then leader at 120 MB, both flat; the webhook flat throughout
    report.samples = {
        "reconciler-5": [(t, 112.0 if t < 2400 else 120.0, 27) for t in range(0, 4800, 15)],
        "webhook-1": [(t, 110.0, 17) for t in range(0, 4800, 15)],
    }
    report.holders = [(0.0, "reconciler-4"), (2395.0, None), (2400.0, "reconciler-5")]
    stretches = report.role_stretches("reconciler-5", report.samples["reconciler-5"])
    assert [len(part) for part in stretches] == [160, 160]
    slopes = report.slopes()
    assert slopes["reconciler-5"][0] == pytest.approx(0.0, abs=1e-9)
    assert slopes["webhook-1"][0] == pytest.approx(0.0, abs=1e-9)
    assert slopes["reconciler-5"][2] == pytest.approx(4785 / HOUR)


def test_a_kept_report_gives_the_same_figures_again() -> None:
    from benchmarks.soak import figures

    report = Report(Shape(warmup=0.0, fault_every=840.0))
    report.started = {"reconciler-5": 0.0}
    report.samples = {"reconciler-5": [(t, 112.0 + t / HOUR, 27) for t in range(0, 4800, 15)]}
    report.holders = [(0.0, "reconciler-5")]
    report.faults = [FaultRecord("leader-kill", 840.0, 0.1, 17.5, 25.0)]
    report.admissions.total, report.admissions.failed = 100, 1
    report.changes, report.status_writes = 50, {"reconciler-5": 8.0}
    again = Report.from_json(report.to_json())
    assert again == report
    assert figures(again) == figures(report)
