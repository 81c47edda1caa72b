"""Monitoring: templates/servicemonitors.yaml, prometheusrule.yaml and dashboard-configmap.yaml.

They follow their switches, carry files/alerts.yaml and files/dashboard.json as they are, and scrape
the metrics ports under the job names the alerts read. tests/chart/test_alerts.py checks the files.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpuclass.webhook import paths
from tests.chart.common import CERT_MANAGER, HELM_TLS, MONITORING_ON, mounted_secret
from tests.chart_helpers import (
    CHART,
    RawObject,
    deployment,
    load_yaml,
    of_kind,
    one,
    pod_spec,
    render_objects,
    selector_matches,
)


def _trust_secret(objects: list[RawObject]) -> str:
    """The Secret whose ca.crt trusts the webhook: mounted by it, or (mode "webhook") its own."""
    workload = deployment(objects, "webhook")
    if "tls" in {v["name"] for v in pod_spec(workload)["volumes"]}:
        return mounted_secret(workload)
    name: str = one(objects, "Secret")["metadata"]["name"]
    return name


def test_monitoring_objects_follow_the_switches() -> None:
    assert not [
        o
        for o in render_objects()
        if o["kind"] in {"ServiceMonitor", "PrometheusRule", "ConfigMap"}
    ]
    objects = render_objects(MONITORING_ON)
    assert len(of_kind(objects, "ServiceMonitor")) == 2
    rule = one(objects, "PrometheusRule")
    assert rule["spec"] == load_yaml(CHART / "files" / "alerts.yaml")
    dashboard = one(objects, "ConfigMap", "gpuclass-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["gpuclass.json"]) == json.loads(
        (CHART / "files" / "dashboard.json").read_text()
    )


def test_dashboard_can_live_in_grafanas_namespace() -> None:
    objects = render_objects(
        {"monitoring": {"dashboard": {"enabled": True, "namespace": "monitoring"}}}
    )
    assert one(objects, "ConfigMap")["metadata"]["namespace"] == "monitoring"


@pytest.mark.parametrize(
    "values",
    [MONITORING_ON, {**HELM_TLS, **MONITORING_ON}, {**CERT_MANAGER, **MONITORING_ON}],
    ids=["webhook-managed", "helm", "cert-manager"],
)
def test_service_monitors_scrape_the_metrics_ports_under_the_alerts_job_names(
    values: dict[str, Any],
) -> None:
    objects = render_objects(values)
    alerts = (CHART / "files" / "alerts.yaml").read_text()
    for component, job, scheme in (
        ("webhook", "gpuclass-webhook", "https"),
        ("reconciler", "gpuclass-reconciler", "http"),
    ):
        [service] = [
            s
            for s in of_kind(objects, "Service")
            if s["metadata"]["labels"]["app.kubernetes.io/component"] == component
        ]
        [monitor] = [
            m
            for m in of_kind(objects, "ServiceMonitor")
            if selector_matches(m["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
        ]
        assert service["metadata"]["labels"][monitor["spec"]["jobLabel"]] == job
        assert f'job="{job}"' in alerts
        [endpoint] = monitor["spec"]["endpoints"]
        assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
        assert (endpoint["scheme"], endpoint["path"]) == (scheme, paths.METRICS)
        if component == "webhook":
            tls = endpoint["tlsConfig"]
            assert tls["ca"]["secret"] == {"name": _trust_secret(objects), "key": "ca.crt"}
            assert tls["serverName"] == "gpuclass-webhook.cozy-system.svc"
