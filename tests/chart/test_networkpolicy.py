"""templates/networkpolicy.yaml: ingress to the serving ports only, egress to DNS and the API server."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chart_helpers import deployment, of_kind, one, pod_spec, render_objects, selector_matches


def _policy_for(objects: list[dict[str, Any]], component: str) -> dict[str, Any]:
    labels = deployment(objects, component)["spec"]["template"]["metadata"]["labels"]
    [policy] = [
        p
        for p in of_kind(objects, "NetworkPolicy")
        if selector_matches(p["spec"]["podSelector"]["matchLabels"], labels)
    ]
    return policy


MONITORING = [
    {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "cozy-monitoring"}}}
]


def test_network_policies_open_only_the_serving_ports() -> None:
    """Defaults: the webhook's port admits the API server (Cilium's kube-apiserver entity)
    and the monitoring namespace, the reconciler's metrics port the monitoring namespace."""
    objects = render_objects()
    for component, port in (("webhook", "https"), ("reconciler", "metrics")):
        workload = deployment(objects, component)
        policy = _policy_for(objects, component)
        assert policy["spec"]["policyTypes"] == ["Ingress"]
        [rule] = policy["spec"]["ingress"]
        assert rule["ports"] == [{"port": port, "protocol": "TCP"}]
        assert rule["from"] == MONITORING
        [container] = pod_spec(workload)["containers"]
        assert port in {p["name"] for p in container["ports"]}
    [cilium] = of_kind(objects, "CiliumNetworkPolicy")
    webhook = deployment(objects, "webhook")
    assert selector_matches(
        cilium["spec"]["endpointSelector"]["matchLabels"],
        webhook["spec"]["template"]["metadata"]["labels"],
    )
    [container] = pod_spec(webhook)["containers"]
    [https] = [p for p in container["ports"] if p["name"] == "https"]
    assert cilium["spec"]["ingress"] == [
        {
            "fromEntities": ["kube-apiserver"],
            "toPorts": [{"ports": [{"port": str(https["containerPort"]), "protocol": "TCP"}]}],
        }
    ]


@pytest.mark.parametrize(
    ("api_server", "metrics_from", "expected"),
    [
        pytest.param(
            {"mode": "peers", "peers": [{"ipBlock": {"cidr": "192.168.100.0/24"}}]},
            MONITORING,
            [{"ipBlock": {"cidr": "192.168.100.0/24"}}, *MONITORING],
            id="peers-and-scrapers",
        ),
        pytest.param({"mode": "cilium", "peers": []}, [], None, id="cilium-no-scrapers"),
        pytest.param({"mode": "any", "peers": []}, MONITORING, "any", id="open-on-purpose"),
    ],
)
def test_the_webhook_port_admits_the_api_server_as_the_cni_sees_it(
    api_server: dict[str, Any], metrics_from: list[dict[str, Any]], expected: Any
) -> None:
    """An empty `metricsFrom` never opens the webhook's port; only mode `any` does."""
    objects = render_objects(
        {"networkPolicy": {"apiServer": api_server, "metricsFrom": metrics_from}}
    )
    ingress = _policy_for(objects, "webhook")["spec"]["ingress"]
    if expected is None:
        assert ingress == []  # deny all but what the CiliumNetworkPolicy admits
    elif expected == "any":
        assert ingress == [{"ports": [{"port": "https", "protocol": "TCP"}]}]
    else:
        assert ingress == [{"ports": [{"port": "https", "protocol": "TCP"}], "from": expected}]
    assert bool(of_kind(objects, "CiliumNetworkPolicy")) == (api_server["mode"] == "cilium")
    reconciler = _policy_for(objects, "reconciler")["spec"]["ingress"]
    assert reconciler[0].get("from") == (metrics_from or None)


def test_network_policy_egress_allows_dns_and_the_api_server_only() -> None:
    peers = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    objects = render_objects(
        {
            "networkPolicy": {
                "metricsFrom": peers,
                "egress": {"enabled": True, "apiServerCIDRs": ["10.96.0.1/32"]},
            }
        }
    )
    for policy in of_kind(objects, "NetworkPolicy"):
        assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
        dns, api = policy["spec"]["egress"]
        assert {p["port"] for p in dns["ports"]} == {53}
        assert api["to"] == [{"ipBlock": {"cidr": "10.96.0.1/32"}}]
        assert {p["port"] for p in api["ports"]} == {443, 6443}
    reconciler = one(objects, "NetworkPolicy", "gpuclass-reconciler")
    assert reconciler["spec"]["ingress"][0]["from"] == peers
