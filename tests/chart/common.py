"""What several chart test modules share: the value sets a render is checked under, and readers.

Not a test module (tests never import one another): the variants every whole-chart check renders,
the CEL evaluator for matchConditions and policies, and small readers of rendered objects that
assert the shape they read. Rendering itself is tests/chart_helpers.py.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
from cryptography import x509

from tests.chart_helpers import RawObject, of_kind, pod_spec

MONITORING_ON = {
    "monitoring": {
        "serviceMonitor": {"enabled": True},
        "prometheusRule": {"enabled": True},
        "dashboard": {"enabled": True},
    }
}
CERT_MANAGER = {"tls": {"certManager": {"enabled": True}}}
HELM_TLS = {"tls": {"mode": "helm"}}  # certificates made by the chart (the mode before "webhook")

# Every switch of the chart: the whole-chart checks render each variant.
VARIANTS = [
    pytest.param({}, id="defaults"),
    pytest.param(HELM_TLS, id="helm-certificates"),
    pytest.param(CERT_MANAGER, id="cert-manager"),
    pytest.param(
        {
            "tls": {
                "certManager": {
                    "enabled": True,
                    "issuerRef": {"name": "platform-ca", "kind": "ClusterIssuer"},
                }
            }
        },
        id="cert-manager-with-issuer",
    ),
    pytest.param(MONITORING_ON, id="monitoring"),
    pytest.param({**CERT_MANAGER, **MONITORING_ON}, id="cert-manager-and-monitoring"),
    pytest.param(
        {
            "networkPolicy": {"enabled": False},
            "priorityClass": {"create": False, "name": ""},
            "cleanupHook": {"enabled": False},
            "webhook": {"pdb": {"enabled": False}, "topologySpread": False},
            "reconciler": {"pdb": {"enabled": False}, "topologySpread": False},
        },
        id="optional-parts-off",
    ),
    pytest.param(
        {
            "settings": {"vgpuEntitled": True},
            "rbac": {"kubevirtScope": "cluster"},
            "webhook": {"podAntiAffinity": "hard", "replicas": 3},
            "networkPolicy": {
                "metricsFrom": [
                    {
                        "namespaceSelector": {
                            "matchLabels": {"kubernetes.io/metadata.name": "monitoring"}
                        }
                    }
                ],
                "egress": {"enabled": True, "apiServerCIDRs": ["10.96.0.1/32"]},
            },
            "imagePullSecrets": [{"name": "registry"}],
            "commonLabels": {"team": "platform"},
        },
        id="hardened",
    ),
]


def cel(celpy: Any, expression: str, activation: dict[str, Any]) -> bool:
    """The verdict of a matchCondition or validation on `activation`; it must be a bool."""
    env = celpy.Environment()
    result = env.program(env.compile(expression)).evaluate(celpy.json_to_cel(activation))
    if not isinstance(result, celpy.celtypes.BoolType):
        raise AssertionError(f"CEL did not give a bool: {result!r}")
    return bool(result)


def pem_certificate(b64: str) -> x509.Certificate:
    """The certificate of a Secret's base64 PEM value (`tls.crt`, `ca.crt`)."""
    return x509.load_pem_x509_certificate(base64.b64decode(b64))


def mounted_secret(obj: RawObject) -> str:
    """The Secret a workload mounts as `tls`; its container must pass that pair as flags."""
    [tls] = [v for v in pod_spec(obj)["volumes"] if v["name"] == "tls"]
    [container] = pod_spec(obj)["containers"]
    [mount] = [m for m in container["volumeMounts"] if m["name"] == "tls"]
    assert f"--tls-cert-file={mount['mountPath']}/tls.crt" in container["args"]
    assert f"--tls-key-file={mount['mountPath']}/tls.key" in container["args"]
    name: str = tls["secret"]["secretName"]
    return name


def license_policy(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """The license-copy ValidatingAdmissionPolicy of a render."""
    [policy] = [
        o
        for o in of_kind(objects, "ValidatingAdmissionPolicy")
        if o["metadata"]["name"].endswith("-licence-copies")
    ]
    return policy
