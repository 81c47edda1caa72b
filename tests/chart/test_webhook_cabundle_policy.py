"""templates/webhook-cabundle-policy.yaml: the webhook's identity may rewrite caBundle and nothing else.

tests/chart/test_policies.py evaluates its CEL; tests/e2e/test_e2e_cert_rotation.py runs it on a
real kube-apiserver.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.chart_helpers import documents, one, render, render_objects

# Every field of a MutatingWebhook / ValidatingWebhook (admissionregistration.k8s.io/v1).
WEBHOOK_FIELDS = {
    "name", "clientConfig", "rules", "failurePolicy", "matchPolicy", "namespaceSelector",
    "objectSelector", "sideEffects", "timeoutSeconds", "admissionReviewVersions",
    "reinvocationPolicy", "matchConditions",
}  # fmt: skip


def _ca_bundle_policy(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["metadata"]["name"].endswith("-webhook-cabundle")]


def test_ca_bundle_policy_lets_the_webhook_change_nothing_but_the_ca_bundle() -> None:
    """docs/operations.md, RBAC: the webhook's identity may only rewrite caBundle. Every webhook
    field (and clientConfig's url and service) must be compared; the real-API-server test
    (tests/e2e/test_e2e_cert_rotation.py) shows the decisions."""
    objects = render_objects(release="gpu", namespace="platform")
    policy, binding = _ca_bundle_policy(objects)
    assert (policy["kind"], binding["kind"]) == (
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    )
    assert binding["spec"] == {
        "policyName": policy["metadata"]["name"],
        "validationActions": ["Deny"],
    }
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    [rule] = spec["matchConstraints"]["resourceRules"]
    assert set(rule["resources"]) == {
        "mutatingwebhookconfigurations",
        "validatingwebhookconfigurations",
    }
    assert {"UPDATE", "CREATE", "DELETE"} <= set(rule["operations"])
    account = one(objects, "ClusterRoleBinding", "gpu-gpuclass-webhook")["subjects"][0]
    assert spec["matchConditions"] == [
        {
            "name": "webhook-service-account",
            "expression": "request.userInfo.username == "
            f"'system:serviceaccount:platform:{account['name']}'",
        }
    ]
    text = " ".join(v["expression"] for v in spec["validations"])
    rendered = {k for o in documents(render(), template="webhook-configurations.yaml")
                for w in o["webhooks"] for k in w}  # fmt: skip
    assert rendered <= WEBHOOK_FIELDS
    for field in WEBHOOK_FIELDS - {"name", "clientConfig"}:
        assert f"o.?{field} == w.?{field}" in text, field
    for field in ("url", "service"):
        assert f"o.clientConfig.?{field} == w.clientConfig.?{field}" in text, field
    assert "caBundle" not in text
    assert "request.operation == 'UPDATE'" in text


@pytest.mark.parametrize("mode", ["helm", "certManager"])
def test_ca_bundle_policy_only_where_the_webhook_writes_the_bundles(mode: str) -> None:
    assert _ca_bundle_policy(render_objects({"tls": {"mode": mode}})) == []
