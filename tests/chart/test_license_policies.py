"""templates/license-copy-policy.yaml and license-mount-policy.yaml (docs/contract.md section 6).

The license-copy policy binds the reconciler's account only and its CEL, evaluated with cel-python,
lets through exactly the copies the reconciler writes; the license-mount policy spares only
KubeVirt's controller. tests/e2e/test_e2e_chart.py shows the same on a real kube-apiserver.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.chart.common import cel, license_policy
from tests.chart_helpers import (
    NAMESPACE,
    RawObject,
    documents,
    of_kind,
    one,
    render,
    render_objects,
)


def test_license_mount_policy_spares_only_kubevirts_controller() -> None:
    user = "system:serviceaccount:kubevirt:kubevirt-controller"
    objects = render_objects({"settings": {"kubevirtControllerUser": user}}, release="gpu")
    [policy] = [
        o
        for o in of_kind(objects, "ValidatingAdmissionPolicy")
        if o["metadata"]["name"] == "gpu-gpuclass-licence-mounts"
    ]
    [binding] = [
        o
        for o in of_kind(objects, "ValidatingAdmissionPolicyBinding")
        if o["spec"]["policyName"] == policy["metadata"]["name"]
    ]
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert "paramRef" not in binding["spec"]
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]},
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["pods/ephemeralcontainers"],
            "operations": ["UPDATE"],
        },
    ]
    assert spec["matchConditions"] == [
        {"name": "not-kubevirt-controller", "expression": f"request.userInfo.username != '{user}'"}
    ]
    expressions = " ".join(v["expression"] for v in spec["validations"])
    for part in ("secretName", "projected", "secretKeyRef", "envFrom", "gpuclass-license-"):
        assert part in expressions


def test_license_copy_policy_renders_on_its_own_with_defaults() -> None:
    manifests = render(namespace="cozy-system")
    objects = documents(manifests, template="license-copy-policy.yaml")
    assert sorted(o["kind"] for o in objects) == [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ]
    policy = one(objects, "ValidatingAdmissionPolicy")
    binding = one(objects, "ValidatingAdmissionPolicyBinding")
    assert policy["apiVersion"] == binding["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert policy["spec"]["failurePolicy"] == "Fail"
    [rule] = policy["spec"]["matchConstraints"]["resourceRules"]
    assert (rule["apiGroups"], rule["resources"]) == ([""], ["secrets"])
    assert set(rule["operations"]) == {"CREATE", "UPDATE", "DELETE"}


@pytest.mark.parametrize(
    ("values", "account"),
    [
        pytest.param({}, "gpuclass-reconciler", id="default-account"),
        pytest.param(
            {"reconciler": {"serviceAccount": {"name": "copier"}}}, "copier", id="renamed-account"
        ),
    ],
)
def test_license_copy_policy_applies_to_the_reconciler_account_only(
    values: dict[str, Any], account: str
) -> None:
    objects = render_objects(values)
    assert one(objects, "ServiceAccount", account)
    policy = license_policy(objects)
    assert policy["spec"]["matchConditions"] == [
        {
            "name": "reconciler-service-account",
            "expression": f"request.userInfo.username == 'system:serviceaccount:{NAMESPACE}:{account}'",
        }
    ]
    binding = one(objects, "ClusterRoleBinding", "gpuclass-reconciler")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}
    ]


MANAGED = {"app.kubernetes.io/managed-by": "gpuclass"}
POLICY_CASES = [
    pytest.param("CREATE", "gpuclass-license-a100", MANAGED, None, True, id="create-labelled-copy"),
    pytest.param("CREATE", "gpuclass-license-a100", {}, None, False, id="create-unlabelled"),
    pytest.param("CREATE", "tenant-db-password", MANAGED, None, False, id="create-other-name"),
    pytest.param("CREATE", "", MANAGED, None, False, id="create-generate-name"),
    pytest.param("UPDATE", "gpuclass-license-a100", MANAGED, MANAGED, True, id="update-own-copy"),
    pytest.param("UPDATE", "gpuclass-license-a100", MANAGED, {}, False, id="adopt-foreign-secret"),
    pytest.param("UPDATE", "gpuclass-license-a100", {}, MANAGED, False, id="drop-the-label"),
    pytest.param("UPDATE", "tenant-tls", MANAGED, MANAGED, False, id="update-other-name"),
    pytest.param("DELETE", "gpuclass-license-a100", None, MANAGED, True, id="delete-own-copy"),
    pytest.param("DELETE", "gpuclass-license-a100", None, {}, False, id="delete-foreign-secret"),
    pytest.param("DELETE", "tenant-tls", None, MANAGED, False, id="delete-other-name"),
]
COPY_DATA = {"client_configuration_token.tok": "dG9r", "gridd.conf": "RmVhdHVyZVR5cGU9MQo="}


def _policy_activation(
    operation: str,
    name: str,
    labels: dict[str, str] | None,
    old_labels: dict[str, str] | None,
    **shape: Any,
) -> dict[str, Any]:
    """A Secret write by the reconciler's account; `shape` overrides type/data/annotations."""

    def secret(secret_labels: dict[str, str] | None) -> RawObject | None:
        if secret_labels is None:
            return None
        metadata: RawObject = {"name": name, "namespace": "tenant-a"}
        if secret_labels:
            metadata["labels"] = secret_labels
        if "annotations" in shape:
            metadata["annotations"] = shape["annotations"]
        obj: RawObject = {"apiVersion": "v1", "kind": "Secret", "metadata": metadata}
        obj["type"] = shape.get("type", "Opaque")
        obj["data"] = shape.get("data", COPY_DATA)
        if "stringData" in shape:
            obj["stringData"] = shape["stringData"]
        return obj

    return {
        "request": {
            "operation": operation,
            "name": name,
            "namespace": "tenant-a",
            "userInfo": {"username": "system:serviceaccount:cozy-system:gpuclass-reconciler"},
        },
        "object": secret(labels),
        "oldObject": secret(old_labels),
    }


def _policy_verdicts(activation: dict[str, Any]) -> list[bool]:
    celpy = pytest.importorskip("celpy")
    policy = license_policy(render_objects())
    for condition in policy["spec"]["matchConditions"]:
        assert cel(celpy, condition["expression"], activation)
    return [cel(celpy, v["expression"], activation) for v in policy["spec"]["validations"]]


@pytest.mark.parametrize(("operation", "name", "labels", "old_labels", "allowed"), POLICY_CASES)
def test_license_copy_policy_decisions(
    operation: str,
    name: str,
    labels: dict[str, str] | None,
    old_labels: dict[str, str] | None,
    allowed: bool,
) -> None:
    verdicts = _policy_verdicts(_policy_activation(operation, name, labels, old_labels))
    assert all(verdicts) is allowed, verdicts


TOKEN_SECRET = {
    "type": "kubernetes.io/service-account-token",
    "annotations": {"kubernetes.io/service-account.name": "default"},
    "data": {},
}


@pytest.mark.parametrize(
    ("shape", "allowed"),
    [
        pytest.param({}, True, id="the-copy-as-the-reconciler-writes-it"),
        pytest.param(TOKEN_SECRET, False, id="service-account-token-minted"),
        pytest.param({"type": "kubernetes.io/service-account-token"}, False, id="token-type"),
        pytest.param({"type": "kubernetes.io/dockerconfigjson"}, False, id="pull-secret-type"),
        pytest.param({"data": {**COPY_DATA, "extra": "eA=="}}, False, id="extra-key"),
        pytest.param({"data": {"gridd.conf": "eA=="}}, False, id="token-key-missing"),
        pytest.param({"data": {}}, False, id="no-data"),
        pytest.param({"stringData": {"x": "y"}}, False, id="string-data"),
        pytest.param(
            {"annotations": {"kubernetes.io/service-account.name": "default"}},
            False,
            id="service-account-annotation",
        ),
        pytest.param(
            {"annotations": {"gpuclass.cozystack.io/source": "x"}}, True, id="our-annotation"
        ),
    ],
)
@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_license_copy_policy_pins_what_the_reconciler_writes(
    operation: str, shape: dict[str, Any], allowed: bool
) -> None:
    old = MANAGED if operation == "UPDATE" else None
    verdicts = _policy_verdicts(
        _policy_activation(operation, "gpuclass-license-a100", MANAGED, old, **shape)
    )
    assert all(verdicts) is allowed, verdicts


def test_license_copy_policy_ignores_other_users() -> None:
    celpy = pytest.importorskip("celpy")
    policy = license_policy(render_objects())
    activation = {"request": {"userInfo": {"username": "system:serviceaccount:tenant-a:default"}}}
    assert not any(
        cel(celpy, c["expression"], activation) for c in policy["spec"]["matchConditions"]
    )
