"""Alert rules (charts/gpuclass/files/alerts.yaml) and the Grafana dashboard (files/dashboard.json).

promtool checks the rules and runs tests/alerts/alerts_test.yaml (one unit test per alert) when it is
on PATH (Debian: `apt-get install prometheus`); without it those tests skip, unless
GPUCLASS_REQUIRE_PROMTOOL=1 makes its absence a failure (CI). The structural checks need nothing:
every alert is unit-tested, documented, and uses only metrics the binaries export.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart_helpers import CHART, ROOT

ALERTS = CHART / "files" / "alerts.yaml"
DASHBOARD = CHART / "files" / "dashboard.json"
ALERT_TESTS = ROOT / "tests" / "alerts" / "alerts_test.yaml"
OPERATIONS = ROOT / "docs" / "operations.md"

# The metrics the two binaries export (docs/metrics.md); histograms as their base name.
EXPORTED_METRICS = {
    "gpuclass_webhook_requests_total",
    "gpuclass_webhook_request_duration_seconds",
    "gpuclass_webhook_requests_in_flight",
    "gpuclass_webhook_catalog_synced",
    "gpuclass_webhook_catalog_age_seconds",
    "gpuclass_webhook_cert_expiry_timestamp_seconds",
    "gpuclass_webhook_denials_total",
    "gpuclass_webhook_watch_restarts_total",
    "gpuclass_free_units",
    "gpuclass_max_free_per_node_units",
    "gpuclass_max_units_per_node_units",
    "gpuclass_condition",
    "gpuclass_eligible_nodes",
    "gpuclass_reconcile_total",
    "gpuclass_reconcile_duration_seconds",
    "gpuclass_queue_depth",
    "gpuclass_watch_restarts_total",
    "gpuclass_status_writes_total",
    "gpuclass_object_writes_total",
    "gpuclass_leader",
    "gpuclass_last_sync_timestamp_seconds",
}
HISTOGRAMS = {"gpuclass_webhook_request_duration_seconds", "gpuclass_reconcile_duration_seconds"}
SCRAPE_METRICS = {"up"}
JOBS = {"gpuclass-webhook", "gpuclass-reconciler"}


def _rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def _dashboard() -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return dashboard


def _dashboard_exprs() -> list[str]:
    return [t["expr"] for p in _dashboard()["panels"] for t in p.get("targets", [])]


def _metric_names(expr: str) -> set[str]:
    return {name for name in re.findall(r"\b(gpuclass_[a-z_]+|up)\b", expr)}


def _base_name(metric: str) -> str:
    for suffix in ("_bucket", "_sum", "_count"):
        if metric.endswith(suffix) and metric.removesuffix(suffix) in HISTOGRAMS:
            return metric.removesuffix(suffix)
    return metric


# ---------------------------------------------------------------------------------------------
# structure (no promtool needed)


def test_alert_names_are_unique_and_every_alert_is_labelled_and_explained() -> None:
    rules = _rules()
    names = [rule["alert"] for rule in rules]
    assert len(names) == len(set(names))
    assert len(names) >= 8
    for rule in rules:
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, rule["alert"]
        assert {"summary", "description", "runbook"} <= set(rule["annotations"]), rule["alert"]
        assert rule["annotations"]["runbook"] == f"docs/operations.md#{rule['alert'].lower()}"


def test_the_issue_asks_for_these_alerts() -> None:
    exprs = {rule["alert"]: rule["expr"] for rule in _rules()}
    wanted = {
        "webhook down": "GPUClassWebhookDown",
        "webhook slow": "GPUClassWebhookSlow",
        "error rate": "GPUClassWebhookErrors",
        "reconciler without leader": "GPUClassReconcilerNoLeader",
        "status stale": "GPUClassStatusStale",
        "class not Ready": "GPUClassNotReady",
        "no free units for a while": "GPUClassNoFreeUnits",
    }
    assert set(wanted.values()) <= set(exprs)
    assert "gpuclass_free_units" in exprs["GPUClassNoFreeUnits"]
    assert "gpuclass_leader" in exprs["GPUClassReconcilerNoLeader"]
    assert 'type="Ready"' in exprs["GPUClassNotReady"]


def test_every_alert_has_a_firing_promtool_unit_test() -> None:
    tests = yaml.safe_load(ALERT_TESTS.read_text())
    assert tests["rule_files"] == [os.path.relpath(ALERTS, ALERT_TESTS.parent)]
    fired = {
        case["alertname"]
        for test in tests["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    quiet = {
        case["alertname"]
        for test in tests["tests"]
        for case in test.get("alert_rule_test", [])
        if not case.get("exp_alerts")
    }
    names = {rule["alert"] for rule in _rules()}
    assert names <= fired, f"alerts without a firing test: {names - fired}"
    assert names <= quiet, f"alerts without a not-firing case: {names - quiet}"


def test_every_alert_has_a_section_in_the_operations_guide() -> None:
    guide = OPERATIONS.read_text()
    headings = {line.lstrip("#").strip() for line in guide.splitlines() if line.startswith("#")}
    missing = {rule["alert"] for rule in _rules()} - headings
    assert not missing, f"docs/operations.md has no heading for {missing}"


def test_alerts_and_dashboard_use_only_exported_metrics_of_our_jobs() -> None:
    for expr in [rule["expr"] for rule in _rules()] + _dashboard_exprs():
        names = _metric_names(expr)
        assert names, expr
        unknown = {_base_name(n) for n in names} - EXPORTED_METRICS - SCRAPE_METRICS
        assert not unknown, f"{unknown} in {expr}"
        jobs = set(re.findall(r'job="([^"]+)"', expr))
        assert jobs and jobs <= JOBS, expr
        for histogram in HISTOGRAMS:
            assert not re.search(rf"\b{histogram}\b(?!_)", expr), f"use {histogram}_bucket: {expr}"


@pytest.mark.parametrize("binary", ["webhook", "reconciler"])
def test_documented_metrics_cover_what_alerts_and_dashboard_use(binary: str) -> None:
    def belongs(name: str) -> bool:
        return name.startswith("gpuclass_webhook_") is (binary == "webhook")

    text = (ROOT / "docs" / "metrics.md").read_text()
    documented = {n for n in re.findall(r"\bgpuclass_[a-z_]+", text) if belongs(n)}
    if not documented:
        pytest.skip(f"docs/metrics.md lists no {binary} metric yet")
    exprs = [r["expr"] for r in _rules()] + _dashboard_exprs()
    used = {_base_name(n) for e in exprs for n in _metric_names(e) if belongs(_base_name(n))}
    missing = used - documented - SCRAPE_METRICS
    assert not missing, f"used but not in docs/metrics.md: {missing}"


def test_exported_metrics_are_the_ones_the_binaries_register() -> None:
    from gpuclass.reconciler.metrics import ReconcilerMetrics
    from gpuclass.webhook.metrics import WebhookMetrics

    registered: set[str] = set()
    for metrics in (WebhookMetrics(), ReconcilerMetrics()):
        for family in metrics.registry.collect():
            suffix = "_total" if family.type == "counter" else ""
            registered.add(family.name + suffix)
    assert registered >= EXPORTED_METRICS, EXPORTED_METRICS - registered


def test_dashboard_shows_what_operators_need() -> None:
    dashboard = _dashboard()
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert dashboard["uid"] == "gpuclass"
    assert {v["name"] for v in dashboard["templating"]["list"]} == {"datasource", "class"}
    for panel in panels:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}"
    used = {_base_name(n) for expr in _dashboard_exprs() for n in _metric_names(expr)}
    wanted = {
        "gpuclass_free_units",  # per-class free over time
        "gpuclass_max_free_per_node_units",
        "gpuclass_max_units_per_node_units",
        "gpuclass_condition",
        "gpuclass_webhook_requests_total",  # admission rate
        "gpuclass_webhook_request_duration_seconds",  # admission latency
        "gpuclass_webhook_denials_total",  # denials by cause
        "gpuclass_reconcile_duration_seconds",
        "gpuclass_watch_restarts_total",
    }
    assert wanted <= used, wanted - used
    denials = [e for e in _dashboard_exprs() if "gpuclass_webhook_denials_total" in e]
    assert any("cause" in e for e in denials)


def test_dashboard_panels_do_not_overlap() -> None:
    cells: set[tuple[int, int]] = set()
    for panel in _dashboard()["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, panel["title"]
                cells.add((x, y))


# ---------------------------------------------------------------------------------------------
# promtool


def _promtool() -> str:
    binary = shutil.which("promtool")
    if binary is None:
        if os.environ.get("GPUCLASS_REQUIRE_PROMTOOL") == "1":
            pytest.fail("promtool is not on PATH (Debian: apt-get install prometheus)")
        pytest.skip("promtool is not on PATH (Debian: apt-get install prometheus)")
    return binary


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, check=False, timeout=120)


def test_promtool_checks_the_rules() -> None:
    result = _run(_promtool(), "check", "rules", str(ALERTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in result.stdout


def test_promtool_unit_tests_pass() -> None:
    result = _run(_promtool(), "test", "rules", str(ALERT_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("alert", "before", "after"),
    [
        pytest.param("GPUClassNoFreeUnits", "for: 1h", "for: 2h", id="longer-wait"),
        pytest.param(
            "GPUClassNotReady", 'status="False"', 'status="True"', id="inverted-condition"
        ),
        pytest.param("GPUClassWebhookSlow", ") > 1", ") > 5", id="looser-threshold"),
        pytest.param(
            "GPUClassReconcilerNoLeader", "severity: critical", "severity: warning", id="downgraded"
        ),
    ],
)
def test_promtool_unit_tests_catch_a_broken_rule(
    tmp_path: Path, alert: str, before: str, after: str
) -> None:
    promtool = _promtool()
    rules = yaml.safe_load(ALERTS.read_text())
    broken = False
    for group in rules["groups"]:
        for rule in group["rules"]:
            if rule["alert"] == alert:
                text = yaml.safe_dump(rule)
                assert before in text or before in rule["expr"], (alert, before)
                rule.update(yaml.safe_load(text.replace(before, after)))
                rule["expr"] = rule["expr"].replace(before, after)
                broken = True
    assert broken
    (tmp_path / "alerts.yaml").write_text(yaml.safe_dump(rules))
    tests = yaml.safe_load(ALERT_TESTS.read_text())
    tests["rule_files"] = ["alerts.yaml"]
    (tmp_path / "alerts_test.yaml").write_text(yaml.safe_dump(tests))
    result = _run(promtool, "test", "rules", str(tmp_path / "alerts_test.yaml"))
    assert result.returncode != 0, f"the unit tests did not notice {alert}: {before} -> {after}"
    assert alert in result.stdout + result.stderr


def test_promtool_parses_every_dashboard_query(tmp_path: Path) -> None:
    promtool = _promtool()
    records = [
        {
            "record": f"dashboard:query_{i}",
            "expr": expr.replace("$__rate_interval", "5m").replace("$class", ".*"),
        }
        for i, expr in enumerate(_dashboard_exprs())
    ]
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": records}]}))
    result = _run(promtool, "check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
