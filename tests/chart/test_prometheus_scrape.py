"""Dashboards and alerts against real series: Debian's Prometheus scrapes both binaries.

`gpuclass-webhook --objects examples` (HTTPS, self-signed CA) and the
reconciler's offline twin `gpuclass-reconciler --objects examples` (HTTP) run on
loopback; a real Prometheus scrapes them every second with the chart's alert
rules loaded. After some admission traffic, every dashboard panel must have at
least one query that returns data, and the rules must load and evaluate.
Skipped when `prometheus` is not installed (`make system-deps`), failed instead
under GPUCLASS_REQUIRE_PROMTOOL=1.
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gpuclass.webhook import paths
from tests.conftest import ROOT, golden_cases
from tests.controlplane.cluster import free_port
from tests.webhook_process import WebhookProcess

PROMETHEUS = shutil.which("prometheus")
DASHBOARD = ROOT / "charts" / "gpuclass" / "files" / "dashboard.json"
ALERTS = ROOT / "charts" / "gpuclass" / "files" / "alerts.yaml"

if PROMETHEUS is None:
    if os.environ.get("GPUCLASS_REQUIRE_PROMTOOL") == "1":
        pytest.fail("prometheus is not installed (GPUCLASS_REQUIRE_PROMTOOL=1)", pytrace=False)
    pytest.skip("prometheus is not installed (make system-deps)", allow_module_level=True)


def wait_http(url: str, *, verify: Any = True, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, verify=verify, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(url)


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("prometheus")
    webhook = WebhookProcess(["--objects", "examples", "--vgpu-entitled"], tls_dir=work / "tls")
    reconciler_port, prometheus_port = free_port(), free_port()
    reconciler = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("gpuclass-reconciler")),
            "--objects",
            "examples",
            "--objects",  # admitted VMIs, so the usage panels have series
            "tests/fixtures/usage",
            "--bind-address",
            "127.0.0.1",
            "--port",
            str(reconciler_port),
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_http(f"http://127.0.0.1:{reconciler_port}/readyz")
    ca = ssl.create_default_context(cafile=webhook.ca)
    for case in golden_cases():  # traffic: allowed, patched and denied answers
        kind = case.request["request"]["kind"]["kind"]
        path = {
            "VirtualMachineInstance": paths.MUTATE_VMIS,
            "Pod": paths.MUTATE_PODS,
            "VirtualMachine": paths.VALIDATE_VMS,
        }.get(kind, paths.VALIDATE_GPUCLASSES)
        httpx.post(
            webhook.url + path,
            content=json.dumps(case.request),
            verify=ca,
            headers={"content-type": "application/json"},
        )
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(ALERTS)],
        "scrape_configs": [
            {
                "job_name": "gpuclass-webhook",
                "scheme": "https",
                "tls_config": {"ca_file": webhook.ca},
                "static_configs": [{"targets": [f"127.0.0.1:{webhook.port}"]}],
            },
            {
                "job_name": "gpuclass-reconciler",
                "static_configs": [{"targets": [f"127.0.0.1:{reconciler_port}"]}],
            },
        ],
    }
    (work / "prometheus.yml").write_text(yaml.safe_dump(config))
    server = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={work / 'prometheus.yml'}",
            f"--storage.tsdb.path={work / 'data'}",
            f"--web.listen-address=127.0.0.1:{prometheus_port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{prometheus_port}"
    try:
        wait_http(url + "/-/ready")
        # rate() needs two scrapes that saw the counters move. On a loaded machine a
        # fixed number of seconds is not enough, so traffic goes on, a second apart,
        # until every panel answers or a minute has passed (the tests then say which
        # panel stayed empty).
        deadline = time.monotonic() + 60
        for round_ in range(1000):
            time.sleep(1)
            for case in list(golden_cases())[:5]:
                httpx.post(
                    webhook.url + paths.VALIDATE_GPUCLASSES,
                    content=json.dumps(case.request),
                    verify=ca,
                    headers={"content-type": "application/json"},
                )
            if round_ >= 5 and (time.monotonic() > deadline or every_panel_answers(url)):
                break
        yield url
    finally:
        server.terminate()
        server.wait(15)
        reconciler.terminate()
        reconciler.wait(15)
        webhook.stop()


def query(url: str, expr: str) -> list[Any]:
    response = httpx.get(url + "/api/v1/query", params={"query": expr}, timeout=10).json()
    assert response["status"] == "success", (expr, response)
    return list(response["data"]["result"])


def every_panel_answers(url: str) -> bool:
    return all(any(query(url, grafana_to_promql(expr)) for expr in exprs) for _, exprs in panels())


def panels() -> list[tuple[str, list[str]]]:
    dashboard = json.loads(DASHBOARD.read_text())
    out = []
    for panel in dashboard["panels"]:
        exprs = [t["expr"] for t in panel.get("targets", []) if t.get("expr")]
        if exprs:
            out.append((panel["title"], exprs))
    return out


def grafana_to_promql(expr: str) -> str:
    return (
        expr.replace("$__rate_interval", "30s").replace('"$class"', '".*"').replace("$class", ".*")
    )


def test_both_targets_are_up(prometheus: str) -> None:
    results = {r["metric"]["job"]: r["value"][1] for r in query(prometheus, "up")}
    assert results == {"gpuclass-webhook": "1", "gpuclass-reconciler": "1"}


@pytest.mark.parametrize(("title", "exprs"), panels(), ids=[t for t, _ in panels()])
def test_every_dashboard_panel_shows_data(prometheus: str, title: str, exprs: list[str]) -> None:
    answered = {expr: query(prometheus, grafana_to_promql(expr)) for expr in exprs}
    assert any(answered.values()), f"panel {title!r}: no query returned data: {list(answered)}"


def test_alert_rules_load_and_evaluate(prometheus: str) -> None:
    groups = httpx.get(prometheus + "/api/v1/rules", timeout=10).json()["data"]["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    names = {rule["name"] for rule in rules}
    expected = {
        rule["alert"]
        for group in yaml.safe_load(ALERTS.read_text())["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }
    assert expected <= names
    assert all(rule["health"] == "ok" for rule in rules), [r for r in rules if r["health"] != "ok"]
