"""Alert rules (charts/gpuclass/files/alerts.yaml) and the Grafana dashboard (files/dashboard.json).

promtool checks the rules and runs tests/alerts/alerts_test.yaml (one unit test per alert) when it is
on PATH (Debian: `apt-get install prometheus`); without it those tests skip, unless
GPUCLASS_REQUIRE_PROMTOOL=1 makes its absence a failure (CI). The structural checks need nothing:
every alert is unit-tested, documented, links its runbook, and uses only metrics the binaries export
(or the API server's admission metrics, selected by our webhook names). The chart's PrometheusRule is
rendered by the real Helm engine: by default it carries the file as is; `disabled`, `overrides` and
`runbookBaseURL` change exactly what they name.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart_helpers import CHART, ROOT, load_yaml, one, render, render_objects, webhooks

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
    "gpuclass_webhook_certificate_last_sync_timestamp_seconds",
    "gpuclass_webhook_certificate_sync_failures_total",
    "gpuclass_webhook_denials_total",
    "gpuclass_webhook_watch_restarts_total",
    "gpuclass_free_units",
    "gpuclass_max_free_per_node_units",
    "gpuclass_max_units_per_node_units",
    "gpuclass_condition",
    "gpuclass_condition_reason",
    "gpuclass_eligible_nodes",
    "gpuclass_allocatable_units",
    "gpuclass_used_units",
    "gpuclass_tenant_units",
    "gpuclass_waiting_vmis",
    "gpuclass_reconcile_total",
    "gpuclass_reconcile_duration_seconds",
    "gpuclass_queue_depth",
    "gpuclass_watch_restarts_total",
    "gpuclass_status_writes_total",
    "gpuclass_object_writes_total",
    "gpuclass_leader",
    "gpuclass_last_sync_timestamp_seconds",
    "gpuclass_source_synced",
    "gpuclass_ready",
}
HISTOGRAMS = {"gpuclass_webhook_request_duration_seconds", "gpuclass_reconcile_duration_seconds"}
SCRAPE_METRICS = {"up"}
# The API server's admission metrics (k8s.io/apiserver pkg/admission/metrics): its job name differs
# between monitoring stacks, so these are selected by our webhook names, never by job.
APISERVER_METRICS = {
    "apiserver_admission_webhook_rejection_count",
    "apiserver_admission_webhook_request_total",
    "apiserver_admission_webhook_fail_open_count",
}
OUR_WEBHOOK_NAMES = 'name=~".+[.]gpuclass[.]cozystack[.]io"'
JOBS = {"gpuclass-webhook", "gpuclass-reconciler"}
# How the progress alerts keep to the replica holding the Lease (followers pass too).
LEADER_ONLY = 'and on (instance) (gpuclass_leader{job="gpuclass-reconciler"} == 1)'
RUNBOOK_BASE = load_yaml(CHART / "values.yaml")["monitoring"]["prometheusRule"]["runbookBaseURL"]


def _rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def _dashboard() -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return dashboard


def _dashboard_exprs() -> list[str]:
    return [t["expr"] for p in _dashboard()["panels"] for t in p.get("targets", [])]


def _metric_names(expr: str) -> set[str]:
    unquoted = re.sub(r'"[^"]*"', '""', expr)  # label values are not metric names
    return set(re.findall(r"\b(gpuclass_[a-z_]+|apiserver_[a-z_]+|up)\b", unquoted))


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
        assert {"summary", "description", "runbook_url"} <= set(rule["annotations"]), rule["alert"]
        assert rule["annotations"]["runbook_url"] == RUNBOOK_BASE + rule["alert"].lower()


def test_the_default_runbook_base_is_the_operations_guide() -> None:
    assert RUNBOOK_BASE.startswith("https://")
    assert RUNBOOK_BASE.endswith("/docs/operations.md#")


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
        "class cannot start a VM": "GPUClassCannotStartVMs",
    }
    assert set(wanted.values()) <= set(exprs)
    assert "gpuclass_free_units" in exprs["GPUClassNoFreeUnits"]
    assert "gpuclass_leader" in exprs["GPUClassReconcilerNoLeader"]
    assert 'type="Ready"' in exprs["GPUClassNotReady"]
    cannot = exprs["GPUClassCannotStartVMs"]
    assert "gpuclass_condition_reason{" in cannot and 'type="Schedulable"' in cannot
    assert "NoNodeAdvertises" in cannot and "NoEligibleNode" in cannot
    assert "AllUnitsInUse" not in cannot, "sold out is GPUClassNoFreeUnits' (info), not a warning"


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
        unknown = (
            {_base_name(n) for n in names} - EXPORTED_METRICS - SCRAPE_METRICS - APISERVER_METRICS
        )
        assert not unknown, f"{unknown} in {expr}"
        selectors = re.findall(r"\b([a-z_]+)\{([^}]*)\}", expr)
        for metric, labels in selectors:
            if metric in APISERVER_METRICS:
                assert OUR_WEBHOOK_NAMES in labels and "job=" not in labels, expr
            else:
                jobs = set(re.findall(r'job="([^"]+)"', labels))
                assert jobs and jobs <= JOBS, expr
        assert len(selectors) == len(re.findall(r"\b(?:gpuclass|apiserver|up)[a-z_]*\{", expr))
        for histogram in HISTOGRAMS:
            assert not re.search(rf"\b{histogram}\b(?!_)", expr), f"use {histogram}_bucket: {expr}"


def test_the_api_server_rules_select_every_webhook_of_the_chart() -> None:
    pattern = re.compile(r".+[.]gpuclass[.]cozystack[.]io")
    names = set(webhooks(render_objects()))
    assert len(names) == 6
    assert all(pattern.fullmatch(name) for name in names), names
    assert not pattern.fullmatch("virt-api.kubevirt.io")


def test_the_api_server_rules_are_the_ones_for_our_failure_policies() -> None:
    rules = {rule["alert"]: rule for rule in _rules()}
    failing = rules["GPUClassWebhookCallsFailing"]["expr"]
    assert "apiserver_admission_webhook_rejection_count" in failing
    assert "no_error" not in failing  # denials are decisions, not failures
    assert rules["GPUClassWebhookCallsFailing"]["labels"]["severity"] == "critical"
    assert (
        "apiserver_admission_webhook_fail_open_count" in rules["GPUClassWebhookFailingOpen"]["expr"]
    )
    for alert in ("GPUClassWebhookCallsFailing", "GPUClassWebhookFailingOpen"):
        assert "absent(" not in rules[alert]["expr"], (
            "must stay silent without an API server scrape"
        )


def test_every_write_kind_has_an_alert() -> None:
    exprs = {rule["alert"]: rule["expr"] for rule in _rules()}
    status = [
        a
        for a, e in exprs.items()
        if 'gpuclass_reconcile_total{job="gpuclass-reconciler", result="error"}' in e
    ]
    objects = [a for a, e in exprs.items() if "gpuclass_object_writes_total" in e]
    assert status and objects
    assert 'result="error"' in exprs[objects[0]] and "by (kind, action)" in exprs[objects[0]]


def test_progress_alerts_read_only_the_leaders_series() -> None:
    expr = {rule["alert"]: rule["expr"] for rule in _rules()}["GPUClassStatusStale"]
    for metric in ("gpuclass_last_sync_timestamp_seconds", "gpuclass_queue_depth"):
        part = expr[expr.index(metric) :]
        assert part.index(LEADER_ONLY) < part.index(")"), metric


@pytest.mark.parametrize("binary", ["webhook", "reconciler"])
def test_documented_metrics_cover_what_alerts_and_dashboard_use(binary: str) -> None:
    def belongs(name: str) -> bool:
        ours = name.startswith("gpuclass_")
        return ours and name.startswith("gpuclass_webhook_") is (binary == "webhook")

    text = (ROOT / "docs" / "metrics.md").read_text()
    documented = {n for n in re.findall(r"\bgpuclass_[a-z_]+", text) if belongs(n)}
    if not documented:
        pytest.skip(f"docs/metrics.md lists no {binary} metric yet")
    exprs = [r["expr"] for r in _rules()] + _dashboard_exprs()
    used = {_base_name(n) for e in exprs for n in _metric_names(e) if belongs(_base_name(n))}
    missing = used - documented - SCRAPE_METRICS
    assert not missing, f"used but not in docs/metrics.md: {missing}"


def test_documented_api_server_metrics_are_the_ones_the_alerts_read() -> None:
    text = (ROOT / "docs" / "metrics.md").read_text()
    used = {
        n for rule in _rules() for n in _metric_names(rule["expr"]) if n.startswith("apiserver_")
    }
    assert used == APISERVER_METRICS
    assert used <= set(re.findall(r"\bapiserver_[a-z_]+", text))


def test_exported_metrics_are_the_ones_the_binaries_register() -> None:
    from gpuclass.reconciler.metrics import ReconcilerMetrics
    from gpuclass.webhook.metrics import WebhookMetrics

    registered: set[str] = set()
    webhook = WebhookMetrics()
    webhook.certificate_sync(True)  # the webhook-managed certificates' series come with a sync
    webhook.served_certificate(1.0)  # and the expiry with the first certificate loaded
    for metrics in (webhook, ReconcilerMetrics()):
        for family in metrics.registry.collect():
            suffix = "_total" if family.type == "counter" else ""
            registered.add(family.name + suffix)
    assert registered >= EXPORTED_METRICS, EXPORTED_METRICS - registered


@pytest.mark.parametrize(
    "module", ["webhook.metrics:WebhookMetrics", "reconciler.metrics:ReconcilerMetrics"]
)
def test_no_binary_exports_created_series(module: str) -> None:
    # A process of its own: disable_created_metrics() is process-wide, so importing the other
    # binary's module here could hide a missing call.
    name, cls = module.split(":")
    script = (
        f"from {name} import {cls}\n"
        "from prometheus_client import generate_latest\n"
        f"print(generate_latest({cls}().registry).decode())\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert "_total " in result.stdout or "_total{" in result.stdout  # counters are there
    assert "_created" not in result.stdout
    assert "_created" in (ROOT / "docs" / "metrics.md").read_text()


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
        "gpuclass_allocatable_units",  # usage: capacity planning and billing
        "gpuclass_used_units",
        "gpuclass_tenant_units",
        "gpuclass_waiting_vmis",
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
        pytest.param(
            "GPUClassStatusStale",
            LEADER_ONLY,
            "",
            id="followers-hide-a-stuck-leader",
        ),
        pytest.param("GPUClassReconcileErrors", "[10m])) > 0", "[10m])) > 0.1", id="ratio-like"),
        pytest.param(
            "GPUClassObjectWritesFailing", 'result="error"', 'result="ok"', id="wrong-result"
        ),
        pytest.param(
            "GPUClassWebhookCallsFailing",
            'error_type=~"calling_webhook_error|apiserver_internal_error"',
            'error_type=~".+"',
            id="denials-counted-as-failures",
        ),
        pytest.param("GPUClassWebhookFailingOpen", "for: 10m", "for: 30m", id="slower-fail-open"),
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


# ---------------------------------------------------------------------------------------------
# the chart's PrometheusRule (real Helm engine)

RULE_ON = {"enabled": True}


def _rendered_rules(**prometheus_rule: Any) -> dict[str, dict[str, Any]]:
    values = {"monitoring": {"prometheusRule": {**RULE_ON, **prometheus_rule}}}
    spec = one(render_objects(values), "PrometheusRule")["spec"]
    return {rule["alert"]: rule for group in spec["groups"] for rule in group["rules"]}


def _file_rules() -> dict[str, dict[str, Any]]:
    return {rule["alert"]: rule for rule in _rules()}


def test_the_default_prometheus_rule_is_the_file_as_is() -> None:
    spec = one(render_objects({"monitoring": {"prometheusRule": RULE_ON}}), "PrometheusRule")
    assert spec["spec"] == yaml.safe_load(ALERTS.read_text())


@pytest.mark.parametrize(
    ("prometheus_rule", "alert", "expected"),
    [
        pytest.param(
            {"overrides": {"GPUClassWebhookSlow": {"for": "30m"}}},
            "GPUClassWebhookSlow",
            {"for": "30m"},
            id="for",
        ),
        pytest.param(
            {"overrides": {"GPUClassNoFreeUnits": {"severity": "warning"}}},
            "GPUClassNoFreeUnits",
            {"labels": {"severity": "warning"}},
            id="severity",
        ),
        pytest.param(
            {
                "overrides": {
                    "GPUClassNotReady": {"labels": {"team": "catalog"}, "severity": "info"}
                }
            },
            "GPUClassNotReady",
            {"labels": {"severity": "info", "team": "catalog"}},
            id="labels-and-severity",
        ),
        pytest.param(
            {"runbookBaseURL": "https://wiki.example.net/runbooks/"},
            "GPUClassWebhookDown",
            {
                "annotations": {
                    "runbook_url": "https://wiki.example.net/runbooks/gpuclasswebhookdown"
                }
            },
            id="runbook-base",
        ),
    ],
)
def test_overrides_change_exactly_what_they_name(
    prometheus_rule: dict[str, Any], alert: str, expected: dict[str, Any]
) -> None:
    rendered, original = _rendered_rules(**prometheus_rule), _file_rules()
    assert set(rendered) == set(original)
    for name, rule in original.items():
        want = dict(rule)
        if name == alert or "runbookBaseURL" in prometheus_rule:
            for key, value in expected.items():
                if name != alert and key == "annotations":
                    value = {"runbook_url": prometheus_rule["runbookBaseURL"] + name.lower()}
                want[key] = {**rule[key], **value} if isinstance(value, dict) else value
        assert rendered[name] == want, name


def test_disabled_alerts_are_left_out_and_empty_groups_dropped() -> None:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    catalog = next(g for g in groups if g["name"] == "gpuclass-catalog")
    disabled = [rule["alert"] for rule in catalog["rules"]] + ["GPUClassWebhookSlow"]
    values = {"monitoring": {"prometheusRule": {**RULE_ON, "disabled": disabled}}}
    spec = one(render_objects(values), "PrometheusRule")["spec"]
    assert "gpuclass-catalog" not in {g["name"] for g in spec["groups"]}
    kept = {rule["alert"] for group in spec["groups"] for rule in group["rules"]}
    assert kept == set(_file_rules()) - set(disabled)


@pytest.mark.parametrize(
    "prometheus_rule",
    [
        pytest.param({"disabled": ["GPUClassWebhookDwn"]}, id="disabled-typo"),
        pytest.param({"overrides": {"GPUClassWebhookSlo": {"for": "1h"}}}, id="override-typo"),
    ],
)
def test_unknown_alert_names_fail_the_render(prometheus_rule: dict[str, Any]) -> None:
    with pytest.raises(Exception, match=r"is not an alert of files/alerts\.yaml"):
        render({"monitoring": {"prometheusRule": {**RULE_ON, **prometheus_rule}}})


@pytest.mark.parametrize(
    "prometheus_rule",
    [
        pytest.param({"disabled": ["KubePodCrashLooping"]}, id="disabled-not-ours"),
        pytest.param({"disabled": "GPUClassWebhookDown"}, id="disabled-not-a-list"),
        pytest.param({"overrides": {"GPUClassWebhookSlow": {"for": "ten minutes"}}}, id="for-bad"),
        pytest.param({"overrides": {"GPUClassWebhookSlow": {"severity": "page"}}}, id="severity"),
        pytest.param({"overrides": {"GPUClassWebhookSlow": {"expr": "vector(1)"}}}, id="expr"),
        pytest.param({"overrides": {"GPUClassWebhookSlow": {}}}, id="empty-override"),
        pytest.param(
            {"overrides": {"GPUClassWebhookSlow": {"labels": {"severity": "info"}}}},
            id="severity-as-label",
        ),
        pytest.param({"runbookBaseURL": "docs/operations.md#"}, id="runbook-base-not-a-url"),
    ],
)
def test_schema_refuses_bad_alert_values(prometheus_rule: dict[str, Any]) -> None:
    import helm_python as helm

    with pytest.raises(helm.HelmValuesError):
        render({"monitoring": {"prometheusRule": {**RULE_ON, **prometheus_rule}}})


def test_promtool_accepts_the_rendered_rules_with_overrides(tmp_path: Path) -> None:
    promtool = _promtool()
    values = {
        "monitoring": {
            "prometheusRule": {
                **RULE_ON,
                "disabled": ["GPUClassNoFreeUnits"],
                "overrides": {"GPUClassWebhookSlow": {"for": "1h30m", "labels": {"team": "a"}}},
            }
        }
    }
    spec = one(render_objects(values), "PrometheusRule")["spec"]
    path = tmp_path / "rendered.yaml"
    path.write_text(yaml.safe_dump(spec))
    result = _run(promtool, "check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(_rules()) - 1} rules found" in result.stdout
