"""The soak's memory slope (`tests/soak_run.py`): a drift counts, a role's step does not.

Expected figures come from the series' construction: a flat line with a step where a standby
took the Lease has no drift; a line rising 2 MB an hour has 2 MB/h, step or not.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.soak_run import Drift, FaultRecord, Report, Shape, envelope, pooled_slope

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
    for drift in slopes.values():
        assert (drift.floor, drift.ceiling, drift.every_sample) == pytest.approx(
            (0, 0, 0), abs=1e-9
        )
    assert slopes["reconciler-5"].hours == pytest.approx(4785 / HOUR)


def test_a_kept_report_gives_the_same_figures_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from benchmarks.soak import figures, main

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
    kept = tmp_path / "report.json"
    kept.write_text(report.to_json())
    assert main(["--figures-from", str(kept)]) == 1  # the failed admission
    assert capsys.readouterr().out.splitlines() == figures(report)[0]
    assert "(1.33 h)" in figures(report)[0][1]
    main(["--figures-from", str(kept), "--warmup", "1800"])
    assert "(0.83 h)" in capsys.readouterr().out


def sawtooth(
    seconds: int, trough: float, peak: float, drift_per_hour: float, phase: int = 0
) -> list[tuple[float, float, int]]:
    """15 s samples of a server that gives memory back every 300 s, `phase` seconds before the
    first sample: at `trough` for the minute after each return, at `peak` for the rest, both
    rising `drift_per_hour`."""
    out = []
    for t in range(0, seconds, 15):
        level = trough if (t + phase) % 300 < 60 else peak
        out.append((float(t), level + drift_per_hour * t / HOUR, 20))
    return out


def drift_of(samples: list[tuple[float, float, int]]) -> Drift:
    report = Report(Shape(warmup=0.0))
    report.started, report.samples = {"webhook-1": 0.0}, {"webhook-1": samples}
    return report.slopes()["webhook-1"]


def test_a_flat_sawtooth_has_no_floor_or_ceiling_slope_wherever_the_returns_fall() -> None:
    # half an hour of a flat sawtooth: a line through every sample tilts with where the returns
    # fall (up when the stretch starts on a return, down when it ends on one); the envelope not
    every_sample = set()
    for phase in (0, 60, 120, 180, 240):
        drift = drift_of(sawtooth(1800, 112.0, 120.0, 0.0, phase))
        assert drift.floor == pytest.approx(0.0, abs=1e-9)
        assert drift.ceiling == pytest.approx(0.0, abs=1e-9)
        every_sample.add(round(drift.every_sample, 1))
    assert max(every_sample) > 1.0 and min(every_sample) < -1.0


@pytest.mark.parametrize("mb_per_hour", [0.5, 2.0, 6.0])
def test_a_rising_sawtooth_shows_its_rise_on_the_floor_and_the_ceiling(mb_per_hour: float) -> None:
    drift = drift_of(sawtooth(7200, 112.0, 120.0, mb_per_hour))
    assert [(mid, low) for mid, low, _ in drift.windows][:2] == [
        (300.0, 112.0),
        (900.0, pytest.approx(112.0 + mb_per_hour / 6)),
    ]
    # each window's lowest sample sits at its first return, its highest at its end: both one
    # window apart from the next, so both rise exactly as the line does
    assert drift.floor == pytest.approx(mb_per_hour, rel=1e-6)
    assert drift.ceiling == pytest.approx(mb_per_hour, rel=1e-6)


def test_a_window_mostly_unsampled_is_left_out() -> None:
    points = [(float(t), 1.0) for t in range(0, 1200, 15)] + [(1250.0, 50.0)]
    assert [(mid, low, high) for mid, low, high in envelope(points, 600.0)] == [
        (300.0, 1.0, 1.0),
        (900.0, 1.0, 1.0),
    ]


def relisting_report(step_at: list[float], step_mb: float) -> Report:
    """Two hours of a flat floor at 80 MB, rising `step_mb` at each re-list in `step_at`
    (seconds: the API server restarted there), sampled every 15 s."""
    report = Report(Shape(warmup=300.0))
    report.started = {"reconciler-4": 0.0}
    report.samples = {
        "reconciler-4": [
            (float(t), 80.0 + step_mb * sum(1 for at in step_at if t >= at + 30), 27)
            for t in range(0, 7200, 15)
        ]
    }
    report.faults = [FaultRecord("apiserver-restart", at, 20.0, 2.0, 30.0) for at in step_at]
    return report


def test_the_first_relist_is_warm_up_and_its_step_is_shown() -> None:
    report = relisting_report([2580.0, 5100.0], 0.0)
    report.samples["reconciler-4"] = [
        (t, rss + (11.0 if t >= 2610 else 0.0), n) for t, rss, n in report.samples["reconciler-4"]
    ]
    drift = report.slopes()["reconciler-4"]
    assert drift.floor == pytest.approx(0.0, abs=1e-9)  # flat after its first re-list
    assert drift.first_relist_step == pytest.approx(11.0)
    assert report.warm_from("reconciler-4") == 2580.0 + 20.0 + 120.0


def test_a_leak_paid_at_every_relist_is_still_seen() -> None:
    # 3 MB at each of four re-lists: the first is warm-up, the three after it rise 9 MB in
    # the 1.5 hours measured, a staircase far above the 1 MB/h goal
    drift = relisting_report([1500.0, 3000.0, 4500.0, 6000.0], 3.0).slopes()["reconciler-4"]
    assert drift.first_relist_step == pytest.approx(3.0)
    assert drift.floor > 3.0


def test_a_process_that_saw_no_relist_warms_up_for_warmup_seconds() -> None:
    report = relisting_report([], 0.0)
    assert report.warm_from("reconciler-4") == 300.0
    assert report.slopes()["reconciler-4"].first_relist_step is None
