"""The gpuclass Helm chart, rendered by the real Helm engine (docs/conventions.md rule 19).

Every switch is rendered (certificates by cert-manager or by the chart, monitoring on and off, the
optional hardening), every object is validated against the Kubernetes OpenAPI schemas, and the
admission contract (docs/contract.md section 3), RBAC, the licence-copy policy (section 6) and the
security settings are asserted on the rendered objects, not on template text.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import os
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from gpuclass.webhook import paths
from tests.chart_helpers import (
    CHART,
    NAMESPACE,
    ROOT,
    RawObject,
    chart_with_existing_tls_secret,
    containers,
    copy_chart,
    deployment,
    documents,
    flatten_keys,
    load_yaml,
    of_kind,
    one,
    pod_spec,
    render,
    render_objects,
    selector_matches,
    webhook_for,
    webhooks,
    workloads,
)

MONITORING_ON = {
    "monitoring": {
        "serviceMonitor": {"enabled": True},
        "prometheusRule": {"enabled": True},
        "dashboard": {"enabled": True},
    }
}
CERT_MANAGER = {"tls": {"certManager": {"enabled": True}}}
HELM_TLS = {"tls": {"mode": "helm"}}  # certificates made by the chart (the mode before "webhook")

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

# Kinds whose schemas kubernetes-validate does not ship (CRD-typed); anything else must validate.
CRD_TYPED_GROUPS = {"cert-manager.io", "monitoring.coreos.com", "cilium.io"}
KUBERNETES_VERSIONS = ["1.30.0", "1.36.0"]
MUTATING_VERBS = {"create", "update", "patch", "delete", "deletecollection", "*"}


def _group(api_version: str) -> str:
    return api_version.split("/")[0] if "/" in api_version else ""


# ---------------------------------------------------------------------------------------------
# rendering, lint, schemas


@pytest.mark.parametrize("values", VARIANTS)
def test_every_object_validates_against_the_kubernetes_schemas(values: dict[str, Any]) -> None:
    objects = render_objects(values)
    checked = 0
    for obj in objects:
        if _group(obj["apiVersion"]) in CRD_TYPED_GROUPS:
            continue
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as error:
                pytest.fail(
                    f"{obj['kind']}/{obj['metadata']['name']} on {version}: {error.message}"
                )
        checked += 1
    assert checked >= 20


@pytest.mark.parametrize("values", VARIANTS)
def test_names_are_unique_and_namespaced_objects_are_in_the_release_namespace(
    values: dict[str, Any],
) -> None:
    objects = render_objects(values)
    keys = [(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objects]
    assert len(keys) == len(set(keys))
    cluster_scoped = {
        "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "PriorityClass",
        "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
        "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
    }  # fmt: skip
    kubevirt_rbac = {("Role", "cozy-kubevirt"), ("RoleBinding", "cozy-kubevirt")}
    for obj in objects:
        namespace = obj["metadata"].get("namespace")
        if obj["kind"] in cluster_scoped:
            assert namespace is None, obj["metadata"]["name"]
        elif (obj["kind"], namespace) not in kubevirt_rbac:
            assert namespace == NAMESPACE, f"{obj['kind']}/{obj['metadata']['name']}"
        assert len(obj["metadata"]["name"]) <= 63


def test_default_render_has_the_expected_objects() -> None:
    objects = render_objects()
    counts: dict[str, int] = {}
    for obj in objects:
        counts[obj["kind"]] = counts.get(obj["kind"], 0) + 1
    assert counts["Deployment"] == 2
    assert counts["Service"] == 2
    assert counts["ServiceAccount"] == 3  # webhook, reconciler, cleanup hook
    assert counts["PodDisruptionBudget"] == 2
    assert counts["NetworkPolicy"] == 2
    assert counts["PriorityClass"] == 1
    assert counts["MutatingWebhookConfiguration"] == 1
    assert counts["ValidatingWebhookConfiguration"] == 1
    # licence copies, caBundle only, licence mounts, GPUClass finalizer only, entitlement label
    assert counts["ValidatingAdmissionPolicy"] == 5
    assert counts["ValidatingAdmissionPolicyBinding"] == 5
    assert counts["CiliumNetworkPolicy"] == 1  # the API server to the webhook
    assert counts["CustomResourceDefinition"] == 1
    assert counts["Job"] == 1
    assert counts["Secret"] == 1  # the empty Secret the webhook keeps its certificates in
    for absent in ("ServiceMonitor", "PrometheusRule", "ConfigMap", "Certificate", "Issuer"):
        assert absent not in counts


def test_the_crd_is_included_as_is() -> None:
    rendered = one(render_objects(), "CustomResourceDefinition")
    assert rendered == load_yaml(CHART / "templates" / "crd-gpuclass.yaml")


def test_helm_lint_reports_no_error_or_warning() -> None:
    for values in ({}, {**CERT_MANAGER, **MONITORING_ON}):
        report = helm.lint(str(CHART), values, strict=True, namespace=NAMESPACE)
        problems = [m for m in report["messages"] if m["severity"] >= 2]
        assert not problems, problems
        assert not report["errors"]


@pytest.mark.parametrize(
    "values",
    [
        pytest.param({"webhook": {"replicas": 1}}, id="webhook-single-replica"),
        pytest.param({"webhook": {"timeoutSeconds": 31}}, id="timeout-over-30"),
        pytest.param({"webhook": {"timeoutSeconds": 0}}, id="timeout-zero"),
        pytest.param({"webhook": {"podAntiAffinity": "sometimes"}}, id="anti-affinity-unknown"),
        pytest.param({"webhook": {"image": {"digest": "latest"}}}, id="digest-not-sha256"),
        pytest.param({"webhook": {"resources": {"limits": None}}}, id="limits-removed"),
        pytest.param({"webhook": {"port": 70000}}, id="port-out-of-range"),
        pytest.param({"webhook": {"extraArgs": ["vgpu-entitled"]}}, id="extra-arg-not-a-flag"),
        pytest.param({"reconciler": {"replicas": "2"}}, id="replicas-string"),
        pytest.param({"settings": {"logLevel": "verbose"}}, id="log-level-unknown"),
        pytest.param({"settings": {"vgpuEntitled": "yes"}}, id="entitlement-not-bool"),
        pytest.param({"settings": {"licenseNamespace": "Cozy_System"}}, id="namespace-not-dns"),
        pytest.param(
            {"settings": {"kubevirtControllerUser": "x' || true || '"}}, id="user-breaks-cel-quote"
        ),
        pytest.param(
            {"tls": {"certManager": {"issuerRef": {"kind": "Issuer"}}}}, id="issuer-nameless"
        ),
        pytest.param({"tls": {"certManager": {"duration": "90 days"}}}, id="duration-not-go"),
        pytest.param({"tls": {"selfManaged": {"certValidityDays": 1}}}, id="cert-too-short"),
        pytest.param({"rbac": {"kubevirtScope": "everything"}}, id="rbac-scope-unknown"),
        pytest.param(
            {"networkPolicy": {"egress": {"apiServerCIDRs": ["kubernetes"]}}}, id="cidr-invalid"
        ),
        pytest.param({"networkPolicy": {"apiServer": {"mode": "open"}}}, id="api-server-mode"),
        pytest.param(
            {"networkPolicy": {"apiServer": {"mode": "peers"}}}, id="api-server-peers-missing"
        ),
        pytest.param({"networkPolicy": {"metricsFrom": [{}]}}, id="empty-metrics-peer"),
        pytest.param({"entitlementLabel": {"users": [""]}}, id="entitlement-user-empty"),
        pytest.param({"entitlementLabel": {"groups": "system:masters"}}, id="entitlement-groups"),
        pytest.param({"monitoring": {"serviceMonitor": {"enable": True}}}, id="typo-in-key"),
        pytest.param({"replicas": 2}, id="unknown-top-level-key"),
    ],
)
def test_schema_refuses_wrong_values(values: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmValuesError):
        render(values)


def test_every_value_is_documented() -> None:
    documented = (ROOT / "docs" / "chart-values.md").read_text()
    values = load_yaml(CHART / "values.yaml")
    missing = [key for key in flatten_keys(values) if f"`{key}`" not in documented]
    assert not missing, f"docs/chart-values.md does not mention: {missing}"


def test_the_chart_readme_lists_the_same_values_as_the_docs() -> None:
    def table(path: Any) -> list[str]:
        return [line for line in path.read_text().splitlines() if line.startswith("| `")]

    assert table(CHART / "README.md") == table(ROOT / "docs" / "chart-values.md")


def test_schema_describes_every_default_value() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())

    def walk(node: dict[str, Any], values: Any, path: str) -> None:
        if "$ref" in node:
            node = schema["$defs"][node["$ref"].rsplit("/", 1)[1]]
        if isinstance(values, dict) and "properties" in node:
            for key, value in values.items():
                assert key in node["properties"], f"{path}.{key} has no schema"
                walk(node["properties"][key], value, f"{path}.{key}")

    walk(schema, load_yaml(CHART / "values.yaml"), "")


# ---------------------------------------------------------------------------------------------
# admission registration (docs/contract.md section 3)


@pytest.mark.parametrize(
    "values", [{}, HELM_TLS, CERT_MANAGER], ids=["webhook-managed", "helm", "cert-manager"]
)
def test_webhook_paths_are_the_webhook_route_constants(values: dict[str, Any]) -> None:
    objects = render_objects(values)
    assert webhook_for(objects, "gpuclasses")["clientConfig"]["service"]["path"] == (
        paths.VALIDATE_GPUCLASSES
    )
    assert webhook_for(objects, "virtualmachineinstances")["clientConfig"]["service"]["path"] == (
        paths.MUTATE_VMIS
    )
    assert webhook_for(objects, "pods", paths.MUTATE_PODS)["_kind"] == (
        "MutatingWebhookConfiguration"
    )
    assert webhook_for(objects, "pods", paths.VALIDATE_PODS)["_kind"] == (
        "ValidatingWebhookConfiguration"
    )
    assert webhook_for(objects, "virtualmachines")["clientConfig"]["service"]["path"] == (
        paths.VALIDATE_VMS
    )
    assert {h["clientConfig"]["service"]["path"] for h in webhooks(objects).values()} == {
        paths.VALIDATE_GPUCLASSES,
        paths.MUTATE_VMIS,
        paths.MUTATE_PODS,
        paths.VALIDATE_VMS,
        paths.VALIDATE_PODS,
    }


def test_every_webhook_uses_the_safe_common_settings() -> None:
    objects = render_objects()
    service = one(of_kind(objects, "Service"), "Service", "gpuclass-webhook")
    hooks = webhooks(objects)
    assert len(hooks) == 5
    for name, hook in hooks.items():
        assert hook["sideEffects"] == "None", name
        assert hook["admissionReviewVersions"] == ["v1"], name
        assert hook["matchPolicy"] == "Equivalent", name
        assert 1 <= hook["timeoutSeconds"] <= 10, name
        ref = hook["clientConfig"]["service"]
        assert ref["name"] == service["metadata"]["name"]
        assert ref["namespace"] == NAMESPACE
        assert ref["port"] in {p["port"] for p in service["spec"]["ports"]}


def test_timeout_follows_the_value() -> None:
    hooks = webhooks(render_objects({"webhook": {"timeoutSeconds": 3}}))
    assert {h["timeoutSeconds"] for h in hooks.values()} == {3}


def test_vmi_webhook_sees_every_create_and_update_outside_kube_system_and_fails_closed() -> None:
    hook = webhook_for(render_objects(), "virtualmachineinstances")
    assert hook["_kind"] == "MutatingWebhookConfiguration"
    assert hook["failurePolicy"] == "Fail"
    assert hook["rules"] == [
        {
            "apiGroups": ["kubevirt.io"],
            "apiVersions": ["*"],
            "resources": ["virtualmachineinstances"],
            "operations": ["CREATE", "UPDATE"],
            "scope": "Namespaced",
        }
    ]
    assert hook["namespaceSelector"] == {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}
        ]
    }
    assert "objectSelector" not in hook
    assert [c["name"] for c in hook["matchConditions"]] == ["create-or-selection-or-spec-changed"]
    assert hook["matchConditions"][0]["expression"].startswith("request.operation != 'UPDATE' ||")


def test_vm_webhook_validates_creates_and_template_changes_and_never_blocks() -> None:
    """docs/contract.md 4.10 and the section 3 table: validating, Ignore, outside kube-system."""
    hook = webhook_for(render_objects(), "virtualmachines")
    assert hook["_kind"] == "ValidatingWebhookConfiguration"
    assert hook["failurePolicy"] == "Ignore"
    assert hook["rules"] == [
        {
            "apiGroups": ["kubevirt.io"],
            "apiVersions": ["*"],
            "resources": ["virtualmachines"],
            "operations": ["CREATE", "UPDATE"],
            "scope": "Namespaced",
        }
    ]
    assert hook["namespaceSelector"] == {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}
        ]
    }
    assert [c["name"] for c in hook["matchConditions"]] == ["create-or-template-changed"]


POD_CREATE_RULE = {
    "apiGroups": [""],
    "apiVersions": ["v1"],
    "resources": ["pods"],
    "operations": ["CREATE"],
    "scope": "Namespaced",
}
"""The one rule of both Pod webhooks: Pod CREATE, namespaced."""


def test_launcher_pod_webhook_only_sees_kubevirt_launchers_and_never_blocks() -> None:
    user = "system:serviceaccount:kubevirt:kubevirt-controller"
    hook = webhook_for(
        render_objects({"settings": {"kubevirtControllerUser": user}}), "pods", paths.MUTATE_PODS
    )
    assert hook["_kind"] == "MutatingWebhookConfiguration"
    assert hook["failurePolicy"] == "Ignore"
    assert hook["rules"] == [POD_CREATE_RULE]
    assert hook["objectSelector"] == {"matchLabels": {"kubevirt.io": "virt-launcher"}}
    assert hook["matchConditions"] == [
        {
            "name": "created-by-kubevirt-controller",
            "expression": f"request.userInfo.username == '{user}'",
        }
    ]


def test_vgpu_pod_webhook_sees_only_pods_asking_for_extended_resources_and_fails_closed() -> None:
    """docs/contract.md section 3, `/validate/pods`: Pod CREATE outside kube-system, KubeVirt's
    controller and Pods without an extended resource kept away by matchConditions; Fail."""
    user = "system:serviceaccount:kubevirt:kubevirt-controller"
    hook = webhook_for(
        render_objects({"settings": {"kubevirtControllerUser": user}}), "pods", paths.VALIDATE_PODS
    )
    assert hook["_kind"] == "ValidatingWebhookConfiguration"
    assert hook["name"] == "vgpu-pods.gpuclass.cozystack.io"
    assert hook["failurePolicy"] == "Fail"
    assert hook["sideEffects"] == "None"
    assert hook["rules"] == [POD_CREATE_RULE]
    assert "objectSelector" not in hook  # a tenant chooses its own labels
    assert hook["namespaceSelector"] == {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}
        ]
    }
    conditions = {c["name"]: c["expression"] for c in hook["matchConditions"]}
    assert conditions["not-kubevirt-controller"] == f"request.userInfo.username != '{user}'"
    extended = conditions["requests-an-extended-resource"]
    for part in ("containers", "initContainers", "requests", "limits", "contains('/')"):
        assert part in extended


def test_licence_mount_policy_spares_only_kubevirts_controller() -> None:
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


def test_gpuclass_webhook_validates_create_and_update_of_the_crd_and_fails_closed() -> None:
    objects = render_objects()
    crd = one(objects, "CustomResourceDefinition")
    hook = webhook_for(objects, "gpuclasses")
    assert hook["_kind"] == "ValidatingWebhookConfiguration"
    assert hook["failurePolicy"] == "Fail"
    [rule] = hook["rules"]
    assert rule["apiGroups"] == [crd["spec"]["group"]]
    assert rule["resources"] == [crd["spec"]["names"]["plural"]]
    assert rule["operations"] == ["CREATE", "UPDATE"]
    assert rule["scope"] == "Cluster" == crd["spec"]["scope"]


# The VMI matchCondition, evaluated by a CEL interpreter on the shapes the API server passes.
VMI_UPDATES = [
    pytest.param("CREATE", {}, None, True, id="create-always-admitted"),
    pytest.param("UPDATE", {"labels": {"a": "b"}}, {}, False, id="unrelated-metadata-skipped"),
    pytest.param(
        "UPDATE",
        {"annotations": {"gpu.cozystack.io/classes": "[]"}},
        {"annotations": {"gpu.cozystack.io/classes": "[]"}},
        False,
        id="same-selection-skipped",
    ),
    pytest.param(
        "UPDATE",
        {"annotations": {"gpu.cozystack.io/classes": "[]"}},
        {},
        True,
        id="selection-added",
    ),
    pytest.param(
        "UPDATE",
        {},
        {"annotations": {"gpu.cozystack.io/classes": "[]"}},
        True,
        id="selection-removed",
    ),
    pytest.param(
        "UPDATE",
        {"annotations": {"gpu.cozystack.io/classes": ""}},
        {},
        True,
        id="empty-selection-added",
    ),
    pytest.param(
        "UPDATE",
        {"annotations": {"gpu.cozystack.io/classes": '[{"className":"b"}]'}},
        {"annotations": {"gpu.cozystack.io/classes": '[{"className":"a"}]'}},
        True,
        id="selection-changed",
    ),
]


@pytest.mark.parametrize(("operation", "new_meta", "old_meta", "admitted"), VMI_UPDATES)
def test_vmi_match_condition_skips_only_irrelevant_updates(
    operation: str,
    new_meta: dict[str, Any],
    old_meta: dict[str, Any] | None,
    admitted: bool,
) -> None:
    celpy = pytest.importorskip("celpy")
    hook = webhook_for(render_objects(), "virtualmachineinstances")
    expression = hook["matchConditions"][0]["expression"]
    volumes = [{"name": "root", "containerDisk": {"image": "x"}}]
    activation = {
        "request": {"operation": operation},
        "object": {"metadata": new_meta, "spec": {"volumes": volumes}},
        "oldObject": None
        if old_meta is None
        else {"metadata": old_meta, "spec": {"volumes": volumes}},
    }
    assert _cel(celpy, expression, activation) is admitted


@pytest.mark.parametrize(
    ("new_spec", "old_spec", "admitted"),
    [
        pytest.param(None, None, False, id="no-spec"),
        pytest.param({"volumes": [{"name": "a"}]}, {"volumes": [{"name": "a"}]}, False, id="same"),
        pytest.param(
            {
                "volumes": [
                    {"name": "a"},
                    {"name": "l", "secret": {"secretName": "gpuclass-license-x"}},
                ]
            },
            {"volumes": [{"name": "a"}]},
            True,
            id="volume-added",
        ),
        pytest.param({"volumes": [{"name": "a"}]}, {}, True, id="volumes-appear"),
        pytest.param({}, None, True, id="spec-appears"),
        pytest.param(
            {
                "accessCredentials": [
                    {"sshPublicKey": {"source": {"secret": {"secretName": "gpuclass-license-x"}}}}
                ]
            },
            {},
            True,
            id="ssh-key-added",
        ),
        pytest.param(
            {
                "accessCredentials": [
                    {"userPassword": {"source": {"secret": {"secretName": "gpuclass-license-x"}}}}
                ]
            },
            {
                "accessCredentials": [
                    {"userPassword": {"source": {"secret": {"secretName": "mine"}}}}
                ]
            },
            True,
            id="user-password-repointed",
        ),
        pytest.param(
            {
                "volumes": [
                    {
                        "name": "r",
                        "containerDisk": {"image": "i", "imagePullSecret": "gpuclass-license-x"},
                    }
                ]
            },
            {"volumes": [{"name": "r", "containerDisk": {"image": "i"}}]},
            True,
            id="pull-secret-added",
        ),
        pytest.param(
            {
                "domain": {
                    "firmware": {
                        "kernelBoot": {"container": {"imagePullSecret": "gpuclass-license-x"}}
                    }
                }
            },
            {"domain": {}},
            True,
            id="kernel-boot-pull-secret-added",
        ),
    ],
)
def test_vmi_match_condition_sees_every_spec_change(
    new_spec: RawObject | None, old_spec: RawObject | None, admitted: bool
) -> None:
    """Every field KubeVirt resolves a Secret from lives under spec; a change there reaches us."""
    celpy = pytest.importorskip("celpy")
    hook = webhook_for(render_objects(), "virtualmachineinstances")
    expression = hook["matchConditions"][0]["expression"]

    def vmi(spec: RawObject | None) -> RawObject:
        return {"metadata": {}} if spec is None else {"metadata": {}, "spec": spec}

    activation = {
        "request": {"operation": "UPDATE"},
        "object": vmi(new_spec),
        "oldObject": vmi(old_spec),
    }
    assert _cel(celpy, expression, activation) is admitted


def _cel(celpy: Any, expression: str, activation: dict[str, Any]) -> bool:
    env = celpy.Environment()
    result = env.program(env.compile(expression)).evaluate(celpy.json_to_cel(activation))
    if not isinstance(result, celpy.celtypes.BoolType):
        raise AssertionError(f"CEL did not give a bool: {result!r}")
    return bool(result)


# ---------------------------------------------------------------------------------------------
# certificates


def _pem(b64: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate(base64.b64decode(b64))


def _tls_secret(objects: list[RawObject]) -> RawObject:
    return one(objects, "Secret", "gpuclass-webhook-tls")


def _ca_secret(objects: list[RawObject]) -> RawObject:
    return one(objects, "Secret", "gpuclass-webhook-tls-ca")


def test_self_managed_certificate_is_consistent_across_every_object() -> None:
    objects = render_objects(HELM_TLS)
    secret = _tls_secret(objects)
    assert secret["type"] == "kubernetes.io/tls"
    ca = _pem(secret["data"]["ca.crt"])
    cert = _pem(secret["data"]["tls.crt"])
    cert.verify_directly_issued_by(ca)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "gpuclass-webhook.cozy-system.svc" in sans.get_values_for_type(x509.DNSName)
    for name, hook in webhooks(objects).items():
        assert hook["clientConfig"]["caBundle"] == secret["data"]["ca.crt"], name
    webhook_pods = deployment(objects, "webhook")["spec"]["template"]
    pem = base64.b64decode(secret["data"]["tls.crt"]).decode()
    assert (
        webhook_pods["metadata"]["annotations"]["checksum/tls"]
        == hashlib.sha256(pem.encode()).hexdigest()
    )
    assert _mounted_secret(deployment(objects, "webhook")) == secret["metadata"]["name"]


def test_self_managed_secret_records_its_expiry_dates() -> None:
    secret = _tls_secret(
        render_objects({"tls": {"mode": "helm", "selfManaged": {"certValidityDays": 100}}})
    )
    annotations = secret["metadata"]["annotations"]
    cert = _pem(secret["data"]["tls.crt"])
    recorded = datetime.datetime.fromisoformat(annotations["gpuclass.cozystack.io/cert-not-after"])
    assert abs(recorded - cert.not_valid_after_utc) < datetime.timedelta(minutes=5)
    assert cert.not_valid_after_utc - datetime.datetime.now(datetime.UTC) > datetime.timedelta(
        days=99
    )
    ca = _pem(secret["data"]["ca.crt"])
    recorded_ca = datetime.datetime.fromisoformat(annotations["gpuclass.cozystack.io/ca-not-after"])
    assert abs(recorded_ca - ca.not_valid_after_utc) < datetime.timedelta(minutes=5)


def test_webhook_pods_never_mount_the_ca_key() -> None:
    spec = pod_spec(deployment(render_objects(HELM_TLS), "webhook"))
    [tls] = [v for v in spec["volumes"] if v["name"] == "tls"]
    assert {item["key"] for item in tls["secret"]["items"]} == {"tls.crt", "tls.key", "ca.crt"}


def test_the_serving_secret_does_not_hold_the_ca_private_key() -> None:
    """Whoever reads the webhook's Secret cannot sign certificates: the CA key lives apart."""
    objects = render_objects(HELM_TLS)
    serving, ca = _tls_secret(objects), _ca_secret(objects)
    assert set(serving["data"]) == {"ca.crt", "tls.crt", "tls.key"}
    assert not any(
        "PRIVATE KEY" in base64.b64decode(v).decode() and k != "tls.key"
        for k, v in serving["data"].items()
    )
    assert (
        set(ca["data"]) == {"ca.crt", "ca.key"}
        and ca["data"]["ca.crt"] == serving["data"]["ca.crt"]
    )
    ca_key = serialization.load_pem_private_key(base64.b64decode(ca["data"]["ca.key"]), None)
    assert ca_key.public_key() == _pem(ca["data"]["ca.crt"]).public_key()
    assert (
        serialization.load_pem_private_key(
            base64.b64decode(serving["data"]["tls.key"]), None
        ).public_key()
        != ca_key.public_key()
    )
    for workload in workloads(objects):
        for volume in pod_spec(workload).get("volumes", []):
            assert volume.get("secret", {}).get("secretName") != ca["metadata"]["name"]


def _render_with_existing(tmp_path: Any, *secrets: RawObject | None) -> list[RawObject]:
    chart = chart_with_existing_tls_secret(tmp_path, *secrets)
    return documents(render(HELM_TLS, chart=chart))


def _previous(objects: list[RawObject]) -> tuple[RawObject, RawObject]:
    return _tls_secret(objects), _ca_secret(objects)


def _expire_in(secret: RawObject, key: str, days: int) -> RawObject:
    changed = json.loads(json.dumps(secret))
    when = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=days)
    changed["metadata"]["annotations"][key] = when.strftime("%Y-%m-%dT%H:%M:%SZ")
    return changed


def test_upgrade_reuses_a_valid_secret_so_the_ca_bundle_stays_in_sync(tmp_path: Any) -> None:
    first, first_ca = _previous(render_objects(HELM_TLS))
    objects = _render_with_existing(tmp_path, first, first_ca)
    second = _tls_secret(objects)
    assert second["data"] == first["data"]
    assert _ca_secret(objects)["data"] == first_ca["data"]
    assert {h["clientConfig"]["caBundle"] for h in webhooks(objects).values()} == {
        first["data"]["ca.crt"]
    }


def test_upgrade_reissues_a_certificate_near_expiry_with_the_same_ca(tmp_path: Any) -> None:
    first, first_ca = _previous(render_objects(HELM_TLS))
    ageing = _expire_in(first, "gpuclass.cozystack.io/cert-not-after", 10)  # renewBeforeDays 30
    objects = _render_with_existing(tmp_path, ageing, first_ca)
    second = _tls_secret(objects)
    assert second["data"]["ca.crt"] == first["data"]["ca.crt"]
    assert second["data"]["tls.crt"] != first["data"]["tls.crt"]
    _pem(second["data"]["tls.crt"]).verify_directly_issued_by(_pem(first["data"]["ca.crt"]))
    assert {h["clientConfig"]["caBundle"] for h in webhooks(objects).values()} == {
        first["data"]["ca.crt"]
    }


def test_upgrade_reissues_when_the_service_name_changed(tmp_path: Any) -> None:
    first, first_ca = _previous(render_objects(HELM_TLS))
    moved = json.loads(json.dumps(first))
    moved["metadata"]["annotations"]["gpuclass.cozystack.io/service-host"] = "old.cozy-system.svc"
    second = _tls_secret(_render_with_existing(tmp_path, moved, first_ca))
    assert second["data"]["ca.crt"] == first["data"]["ca.crt"]
    assert second["data"]["tls.crt"] != first["data"]["tls.crt"]


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda s, c: (s, _expire_in(c, "gpuclass.cozystack.io/ca-not-after", 5)), id="ca-near-expiry"),
        pytest.param(lambda s, c: (s, {**c, "data": {"ca.crt": c["data"]["ca.crt"]}}), id="ca-key-lost"),
        pytest.param(lambda s, c: (s, None), id="ca-secret-deleted"),
        pytest.param(lambda s, c: (None, None), id="both-deleted"),
    ],
)  # fmt: skip
def test_upgrade_makes_a_new_ca_when_the_old_one_cannot_sign(tmp_path: Any, damage: Any) -> None:
    first, first_ca = _previous(render_objects(HELM_TLS))
    objects = _render_with_existing(tmp_path, *damage(first, first_ca))
    second = _tls_secret(objects)
    assert second["data"]["ca.crt"] != first["data"]["ca.crt"]
    _pem(second["data"]["tls.crt"]).verify_directly_issued_by(_pem(second["data"]["ca.crt"]))
    assert {h["clientConfig"]["caBundle"] for h in webhooks(objects).values()} == {
        second["data"]["ca.crt"]
    }
    assert _ca_secret(objects)["data"]["ca.crt"] == second["data"]["ca.crt"]


def test_upgrade_from_the_single_secret_layout_keeps_the_ca_and_moves_its_key(
    tmp_path: Any,
) -> None:
    """Releases before the split kept ca.key in the serving Secret; upgrading keeps the caBundle."""
    first, first_ca = _previous(render_objects(HELM_TLS))
    old_layout = json.loads(json.dumps(first))
    old_layout["data"]["ca.key"] = first_ca["data"]["ca.key"]
    objects = _render_with_existing(tmp_path, old_layout)
    second, second_ca = _previous(objects)
    assert second["data"] == first["data"]  # same CA and certificate, ca.key gone
    assert second_ca["data"] == first_ca["data"]
    assert {h["clientConfig"]["caBundle"] for h in webhooks(objects).values()} == {
        first["data"]["ca.crt"]
    }


def test_cert_manager_mode_injects_the_ca_and_renders_no_secret() -> None:
    objects = render_objects(CERT_MANAGER)
    assert not of_kind(objects, "Secret")
    certificate = one(objects, "Certificate", "gpuclass-webhook")
    assert "gpuclass-webhook.cozy-system.svc" in certificate["spec"]["dnsNames"]
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        configuration = one(objects, kind)
        assert configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
            f"{NAMESPACE}/{certificate['metadata']['name']}"
        )
        for hook in configuration["webhooks"]:
            assert "caBundle" not in hook["clientConfig"]
    assert _mounted_secret(deployment(objects, "webhook")) == certificate["spec"]["secretName"]
    # the chart's own CA chain: self-signed Issuer -> CA Certificate -> CA Issuer -> serving cert
    issuer = one(objects, "Issuer", certificate["spec"]["issuerRef"]["name"])
    ca_certificate = one(objects, "Certificate", "gpuclass-webhook-ca")
    assert issuer["spec"]["ca"]["secretName"] == ca_certificate["spec"]["secretName"]
    assert ca_certificate["spec"]["isCA"] is True
    assert (
        "selfSigned" in one(objects, "Issuer", ca_certificate["spec"]["issuerRef"]["name"])["spec"]
    )
    assert "checksum/tls" not in (
        deployment(objects, "webhook")["spec"]["template"]["metadata"].get("annotations") or {}
    )


def test_cert_manager_mode_uses_a_given_issuer() -> None:
    ref = {"name": "platform-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}
    objects = render_objects({"tls": {"certManager": {"enabled": True, "issuerRef": ref}}})
    assert not of_kind(objects, "Issuer")
    assert one(objects, "Certificate")["spec"]["issuerRef"] == ref


def _trust_secret(objects: list[RawObject]) -> str:
    """The Secret whose ca.crt trusts the webhook: mounted by it, or (mode "webhook") its own."""
    workload = deployment(objects, "webhook")
    if "tls" in {v["name"] for v in pod_spec(workload)["volumes"]}:
        return _mounted_secret(workload)
    name: str = one(objects, "Secret")["metadata"]["name"]
    return name


def _mounted_secret(obj: RawObject) -> str:
    [tls] = [v for v in pod_spec(obj)["volumes"] if v["name"] == "tls"]
    [container] = pod_spec(obj)["containers"]
    [mount] = [m for m in container["volumeMounts"] if m["name"] == "tls"]
    assert f"--tls-cert-file={mount['mountPath']}/tls.crt" in container["args"]
    assert f"--tls-key-file={mount['mountPath']}/tls.key" in container["args"]
    name: str = tls["secret"]["secretName"]
    return name


# ---------------------------------------------------------------------------------------------
# workloads and their security settings


@pytest.mark.parametrize("values", VARIANTS)
def test_every_container_is_locked_down_and_bounded(values: dict[str, Any]) -> None:
    objects = render_objects(values)
    assert len(workloads(objects)) >= 2
    for obj in workloads(objects):
        spec = pod_spec(obj)
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for key in ("hostNetwork", "hostPID", "hostIPC"):
            assert not spec.get(key), key
        for container in containers(obj):
            where = f"{obj['metadata']['name']}/{container['name']}"
            context = container["securityContext"]
            assert context["runAsNonRoot"] is True, where
            assert context["readOnlyRootFilesystem"] is True, where
            assert context["allowPrivilegeEscalation"] is False, where
            assert context["capabilities"] == {"drop": ["ALL"]}, where
            assert context["seccompProfile"] == {"type": "RuntimeDefault"}, where
            assert context.get("privileged", False) is False, where
            assert context["runAsUser"] > 0, where
            for bound in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(container["resources"][bound]), where
            # a read-only root still needs a writable /tmp
            assert "/tmp" in {m["mountPath"] for m in container["volumeMounts"]}, where


@pytest.mark.parametrize(
    ("component", "scheme", "port_name"),
    [("webhook", "HTTPS", "https"), ("reconciler", "HTTP", "metrics")],
)
def test_probes_use_healthz_and_readyz(component: str, scheme: str, port_name: str) -> None:
    [container] = pod_spec(deployment(render_objects(), component))["containers"]
    assert port_name in {p["name"] for p in container["ports"]}
    liveness = container["livenessProbe"]["httpGet"]
    readiness = container["readinessProbe"]["httpGet"]
    assert (liveness["path"], liveness["scheme"], liveness["port"]) == (
        paths.HEALTHZ,
        scheme,
        port_name,
    )
    assert (readiness["path"], readiness["scheme"], readiness["port"]) == (
        paths.READYZ,
        scheme,
        port_name,
    )


def test_webhook_runs_two_spread_replicas_with_a_budget_and_a_priority() -> None:
    objects = render_objects()
    webhook = deployment(objects, "webhook")
    spec = pod_spec(webhook)
    labels = webhook["spec"]["template"]["metadata"]["labels"]
    assert webhook["spec"]["replicas"] == 2
    assert webhook["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    [term] = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert selector_matches(term["podAffinityTerm"]["labelSelector"]["matchLabels"], labels)
    keys = {c["topologyKey"] for c in spec["topologySpreadConstraints"]}
    assert keys == {"topology.kubernetes.io/zone", "kubernetes.io/hostname"}
    for constraint in spec["topologySpreadConstraints"]:
        assert selector_matches(constraint["labelSelector"]["matchLabels"], labels)
    priority = one(objects, "PriorityClass")
    assert spec["priorityClassName"] == priority["metadata"]["name"]
    [budget] = [
        b
        for b in of_kind(objects, "PodDisruptionBudget")
        if selector_matches(b["spec"]["selector"]["matchLabels"], labels)
    ]
    assert budget["spec"]["minAvailable"] == 1


def test_hard_anti_affinity_is_required_scheduling() -> None:
    spec = pod_spec(deployment(render_objects({"webhook": {"podAntiAffinity": "hard"}}), "webhook"))
    anti = spec["affinity"]["podAntiAffinity"]
    assert "preferredDuringSchedulingIgnoredDuringExecution" not in anti
    [term] = anti["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"


def test_an_existing_priority_class_is_used_not_created() -> None:
    objects = render_objects(
        {"priorityClass": {"create": False, "name": "system-cluster-critical"}}
    )
    assert not of_kind(objects, "PriorityClass")
    for component in ("webhook", "reconciler"):
        assert (
            pod_spec(deployment(objects, component))["priorityClassName"]
            == "system-cluster-critical"
        )


def test_reconciler_runs_two_replicas_with_leader_election_in_the_release_namespace() -> None:
    reconciler = deployment(render_objects(), "reconciler")
    assert reconciler["spec"]["replicas"] == 2
    [container] = pod_spec(reconciler)["containers"]
    assert f"--leader-election-namespace={NAMESPACE}" in container["args"]


@pytest.mark.parametrize("entitled", [True, False])
def test_settings_reach_both_binaries_as_flags(entitled: bool) -> None:
    settings = {
        "vgpuEntitled": entitled,
        "licenseNamespace": "licences",
        "kubevirtNamespace": "kubevirt",
        "kubevirtControllerUser": "system:serviceaccount:kubevirt:kubevirt-controller",
        "logLevel": "debug",
        "logFormat": "text",
    }
    objects = render_objects({"settings": settings})
    [webhook] = pod_spec(deployment(objects, "webhook"))["containers"]
    [reconciler] = pod_spec(deployment(objects, "reconciler"))["containers"]
    for container in (webhook, reconciler):
        assert ("--vgpu-entitled" in container["args"]) is entitled
        assert "--license-namespace=licences" in container["args"]
        assert "--kubevirt-namespace=kubevirt" in container["args"]
        assert "--log-level=debug" in container["args"]
    assert (
        "--kubevirt-controller-user=system:serviceaccount:kubevirt:kubevirt-controller"
        in webhook["args"]
    )
    assert "--log-format=text" in webhook["args"]
    assert "--port=8443" in webhook["args"]
    assert "--port=8080" in reconciler["args"]
    # KubeVirt CR read rights follow the namespace
    assert {
        r["metadata"]["namespace"]
        for r in of_kind(objects, "Role")
        if "kubevirt" in r["metadata"]["name"]
    } == {"kubevirt"}


@pytest.mark.parametrize("values", VARIANTS)
def test_the_binaries_accept_the_rendered_flags(
    values: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuclass.reconciler.settings import ReconcilerSettings
    from gpuclass.shared.kube.settings import parse_settings
    from gpuclass.webhook.settings import WebhookSettings

    for variable in [v for v in os.environ if v.startswith("GPUCLASS_")]:
        monkeypatch.delenv(variable)
    with helm.Chart.load(str(CHART)) as chart:
        merged = chart.merge_values(values)
    objects = render_objects(values)
    [webhook] = pod_spec(deployment(objects, "webhook"))["containers"]
    [reconciler] = pod_spec(deployment(objects, "reconciler"))["containers"]
    hook = parse_settings(WebhookSettings, webhook["args"], "gpuclass-webhook")
    loop = parse_settings(ReconcilerSettings, reconciler["args"], "gpuclass-reconciler")
    settings = merged["settings"]
    for parsed in (hook, loop):
        assert parsed.vgpu_entitled is settings["vgpuEntitled"]
        assert parsed.license_namespace == settings["licenseNamespace"]
        assert parsed.kubevirt_namespace == settings["kubevirtNamespace"]
        assert (parsed.log_level, parsed.log_format) == (
            settings["logLevel"],
            settings["logFormat"],
        )
        assert parsed.kubeconfig is None and parsed.objects == []  # in-cluster, watching the API
    assert hook.kubevirt_controller_user == settings["kubevirtControllerUser"]
    assert hook.port == merged["webhook"]["port"] == webhook["ports"][0]["containerPort"]
    if merged["tls"]["mode"] == "webhook" and not merged["tls"]["certManager"]["enabled"]:
        assert hook.cert_secret == one(objects, "Secret")["metadata"]["name"]
        assert hook.cert_secret_namespace() == NAMESPACE
        assert (
            hook.cert_mutating_webhook_configuration
            == (one(objects, "MutatingWebhookConfiguration")["metadata"]["name"])
        )
        assert (
            hook.cert_validating_webhook_configuration
            == (one(objects, "ValidatingWebhookConfiguration")["metadata"]["name"])
        )
        assert "gpuclass-webhook.cozy-system.svc" in hook.tls_hosts
        assert hook.cert_policy().problems() == []
        assert hook.tls_cert_file is None and hook.tls_key_file is None
    else:
        assert hook.tls_cert_file is not None and hook.tls_key_file is not None
    assert loop.port == merged["reconciler"]["port"] == reconciler["ports"][0]["containerPort"]
    assert loop.leader_elect is True
    assert loop.lease_namespace() == NAMESPACE
    lease_rule = one(objects, "Role", "gpuclass-reconciler-leader-election")["rules"][1]
    assert lease_rule["resourceNames"] == [loop.leader_election_name]
    pod_name = {e["name"]: e for e in reconciler["env"]}["GPUCLASS_POD_NAME"]
    assert pod_name["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}


def test_images_default_to_the_app_version_and_prefer_a_digest() -> None:
    chart = load_yaml(CHART / "Chart.yaml")
    objects = render_objects()
    [container] = pod_spec(deployment(objects, "webhook"))["containers"]
    assert container["image"] == f"ghcr.io/cozystack/gpuclass-webhook:{chart['appVersion']}"
    digest = "sha256:" + "a" * 64
    objects = render_objects({"reconciler": {"image": {"digest": digest}}})
    [container] = pod_spec(deployment(objects, "reconciler"))["containers"]
    assert container["image"] == f"ghcr.io/cozystack/gpuclass-reconciler@{digest}"


@pytest.mark.parametrize("component", ["webhook", "reconciler"])
def test_services_select_their_pods_and_target_declared_ports(component: str) -> None:
    objects = render_objects()
    workload = deployment(objects, component)
    labels = workload["spec"]["template"]["metadata"]["labels"]
    [service] = [
        s
        for s in of_kind(objects, "Service")
        if s["metadata"]["labels"]["app.kubernetes.io/component"] == component
    ]
    assert selector_matches(service["spec"]["selector"], labels)
    assert selector_matches(workload["spec"]["selector"]["matchLabels"], labels)
    [container] = pod_spec(workload)["containers"]
    declared = {p["name"] for p in container["ports"]}
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= declared


# ---------------------------------------------------------------------------------------------
# RBAC and the licence-copy policy (docs/contract.md section 6)


def _rules(objects: list[RawObject], kind: str, name: str) -> set[tuple[str, str, str]]:
    role = one(objects, kind, name)
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def _grants(group: str, resources: list[str], verbs: list[str]) -> set[tuple[str, str, str]]:
    return {(group, r, v) for r in resources for v in verbs}


READ = ["get", "list", "watch"]


def test_reconciler_cluster_role_is_exactly_what_it_needs() -> None:
    rules = _rules(render_objects(), "ClusterRole", "gpuclass-reconciler")
    expected = (
        _grants("cozystack.io", ["gpuclasses"], [*READ, "update", "patch"])
        | _grants("cozystack.io", ["gpuclasses/status"], ["update", "patch"])
        | _grants("", ["nodes", "pods", "namespaces"], READ)
        | _grants("kubevirt.io", ["virtualmachineinstances"], READ)
        # licence copies: create, a label-tested JSON patch, delete; no Secret is readable cluster-wide
        | _grants("", ["secrets"], ["create", "patch", "delete"])
        | _grants("", ["events"], ["create", "patch"])
        | _grants("events.k8s.io", ["events"], ["create", "patch"])
    )
    assert rules == expected


def test_reconciler_namespaced_rights_are_its_lease_and_the_kubevirt_cr() -> None:
    objects = render_objects()
    leases = one(objects, "Role", "gpuclass-reconciler-leader-election")
    assert leases["metadata"]["namespace"] == NAMESPACE
    [container] = pod_spec(deployment(objects, "reconciler"))["containers"]
    [lease_name] = [
        a.split("=", 1)[1] for a in container["args"] if a.startswith("--leader-election-name=")
    ]
    assert leases["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [lease_name],
            "verbs": ["get", "update"],
        },
        # the record of licence copies, one ConfigMap read and updated by name
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["gpuclass-license-copies"],
            "verbs": ["get", "list", "watch", "update"],
        },
    ]
    kubevirt = one(objects, "Role", "gpuclass-reconciler-kubevirt")
    assert kubevirt["metadata"]["namespace"] == "cozy-kubevirt"
    assert _rules(objects, "Role", "gpuclass-reconciler-kubevirt") == _grants(
        "kubevirt.io", ["kubevirts"], READ
    )


def test_reconciler_reads_only_the_licence_sources_the_values_name() -> None:
    """No licence source listed: no Secret is readable at all; listed: exactly those names."""
    objects = render_objects()
    assert not [o for o in objects if o["metadata"]["name"].endswith("-licence-sources")]
    [container] = pod_spec(deployment(objects, "reconciler"))["containers"]
    assert "--license-secret-names=" in container["args"]
    objects = render_objects({"settings": {"licenseSecretNames": ["vgpu-a", "vgpu-b"]}})
    role = one(objects, "Role", "gpuclass-reconciler-licence-sources")
    assert role["metadata"]["namespace"] == "cozy-system"
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": ["vgpu-a", "vgpu-b"],
            "verbs": ["get", "list", "watch"],
        }
    ]
    binding = one(objects, "RoleBinding", "gpuclass-reconciler-licence-sources")
    assert binding["subjects"][0]["name"] == "gpuclass-reconciler"
    [container] = pod_spec(deployment(objects, "reconciler"))["containers"]
    assert "--license-secret-names=vgpu-a,vgpu-b" in container["args"]


def test_webhook_only_reads_when_it_keeps_no_certificates() -> None:
    for values in (HELM_TLS, CERT_MANAGER):
        objects = render_objects(values)
        assert _rules(objects, "ClusterRole", "gpuclass-webhook") == (
            _grants("cozystack.io", ["gpuclasses"], READ) | _grants("", ["namespaces"], READ)
        )
        assert _rules(objects, "Role", "gpuclass-webhook-kubevirt") == _grants(
            "kubevirt.io", ["kubevirts"], READ
        )
        assert not [r for r in of_kind(objects, "Role") if r["metadata"]["name"].endswith("-certs")]


def test_webhook_writes_exactly_its_certificate_secret_and_its_two_configurations() -> None:
    """Mode "webhook": get and update, each limited by name; no create, list or watch, which
    resourceNames cannot limit (docs/operations.md, Certificates)."""
    objects = render_objects()
    mutating = one(objects, "MutatingWebhookConfiguration")["metadata"]["name"]
    validating = one(objects, "ValidatingWebhookConfiguration")["metadata"]["name"]
    secret = one(objects, "Secret")
    assert secret["metadata"]["namespace"] == NAMESPACE and "data" not in secret
    named = {
        (tuple(r["resources"]), tuple(r.get("resourceNames", ())), tuple(sorted(r["verbs"])))
        for r in one(objects, "ClusterRole", "gpuclass-webhook")["rules"]
        if r["apiGroups"] == ["admissionregistration.k8s.io"]
    }
    assert named == {
        (("mutatingwebhookconfigurations",), (mutating,), ("get", "update")),
        (("validatingwebhookconfigurations",), (validating,), ("get", "update")),
    }
    role = one(objects, "Role", "gpuclass-webhook-certs")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": [secret["metadata"]["name"]],
            "verbs": ["get", "update"],
        }
    ]
    binding = one(objects, "RoleBinding", "gpuclass-webhook-certs")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert (
        binding["subjects"][0]["name"]
        == pod_spec(deployment(objects, "webhook"))["serviceAccountName"]
    )


def test_webhook_managed_mode_mounts_no_certificate_and_renders_no_ca_bundle() -> None:
    """`helm template` (and Argo CD) renders no caBundle: the webhook writes it; nothing to roll."""
    objects = render_objects()
    for name, hook in webhooks(objects).items():
        assert "caBundle" not in hook["clientConfig"], name
    pods = deployment(objects, "webhook")["spec"]["template"]
    assert "tls" not in {v["name"] for v in pods["spec"]["volumes"]}
    assert "checksum/tls" not in (pods["metadata"].get("annotations") or {})


def test_webhook_managed_mode_keeps_the_live_ca_bundle_on_upgrade(tmp_path: Any) -> None:
    """An upgrade renders the caBundle the live configurations carry (lookup), so that the
    upgrade from mode "helm" does not take the trusted CA away before the webhook replaced it."""
    chart = copy_chart(tmp_path)
    helpers = chart / "templates" / "_tls.tpl"
    lookup = (
        '{{- $live := lookup "admissionregistration.k8s.io/v1" .kind "" .configuration'
        " | default dict -}}"
    )
    text = helpers.read_text()
    assert text.count(lookup) == 1
    names = sorted(webhooks(render_objects()))
    assert len(names) == 5
    live = {
        "webhooks": [{"name": n, "clientConfig": {"caBundle": f"bundle-of-{n}"}} for n in names]
    }
    helpers.write_text(text.replace(lookup, "{{- $live := " + _go_literal(live) + " -}}"))
    objects = documents(render(chart=chart))
    for name, hook in webhooks(objects).items():
        assert hook["clientConfig"]["caBundle"] == f"bundle-of-{name}"


def _go_literal(value: Any) -> str:
    """`value` as a template expression (JSON through fromJson)."""
    return "(" + json.dumps(json.dumps(value)) + " | fromJson)"


@pytest.mark.parametrize(
    ("tls", "message"),
    [
        ({"certValidityDays": 30, "certRenewBeforeDays": 30}, "certRenewBeforeDays"),
        ({"caValidityDays": 365, "caRenewBeforeDays": 400}, "caRenewBeforeDays"),
        ({"caRenewBeforeDays": 1, "overlapMinutes": 720}, "overlapMinutes"),
        ({"overlapMinutes": 1, "pollSeconds": 3600}, "pollSeconds"),
        ({"overlapMinutes": 1, "pollSeconds": 21}, "pollSeconds"),
    ],
)
def test_webhook_managed_lifetimes_that_cannot_rotate_fail_the_render(
    tls: dict[str, int], message: str
) -> None:
    with pytest.raises(Exception, match=message):
        render({"tls": {"webhookManaged": tls}})


@pytest.mark.parametrize("tls", [{}, {"overlapMinutes": 1, "pollSeconds": 20}])
def test_webhook_managed_overlap_of_three_polls_renders(tls: dict[str, int]) -> None:
    render({"tls": {"webhookManaged": tls}})


def test_cluster_wide_kubevirt_scope_moves_the_kubevirt_rights_to_the_cluster_roles() -> None:
    objects = render_objects({"rbac": {"kubevirtScope": "cluster"}})
    assert not [r for r in of_kind(objects, "Role") if r["metadata"]["name"].endswith("-kubevirt")]
    for name in ("gpuclass-webhook", "gpuclass-reconciler"):
        assert _grants("kubevirt.io", ["kubevirts"], READ) <= _rules(objects, "ClusterRole", name)


@pytest.mark.parametrize("values", VARIANTS)
def test_rbac_has_no_wildcards_and_bindings_point_at_rendered_subjects(
    values: dict[str, Any],
) -> None:
    objects = render_objects(values)
    accounts = {
        (sa["metadata"]["namespace"], sa["metadata"]["name"])
        for sa in of_kind(objects, "ServiceAccount")
    }
    roles = {
        (r["kind"], r["metadata"].get("namespace"), r["metadata"]["name"])
        for r in objects
        if r["kind"] in {"Role", "ClusterRole"}
    }
    for role in (o for o in objects if o["kind"] in {"Role", "ClusterRole"}):
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[field], role["metadata"]["name"]
    for binding in (o for o in objects if o["kind"] in {"RoleBinding", "ClusterRoleBinding"}):
        ref = binding["roleRef"]
        namespace = binding["metadata"].get("namespace") if ref["kind"] == "Role" else None
        assert (ref["kind"], namespace, ref["name"]) in roles
        for subject in binding["subjects"]:
            assert (subject["namespace"], subject["name"]) in accounts
    for obj in workloads(objects):
        assert (obj["metadata"]["namespace"], pod_spec(obj)["serviceAccountName"]) in accounts


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
    policy = licence_policy(objects)
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
    policy = licence_policy(render_objects())
    for condition in policy["spec"]["matchConditions"]:
        assert _cel(celpy, condition["expression"], activation)
    return [_cel(celpy, v["expression"], activation) for v in policy["spec"]["validations"]]


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
    policy = licence_policy(render_objects())
    activation = {"request": {"userInfo": {"username": "system:serviceaccount:tenant-a:default"}}}
    assert not any(
        _cel(celpy, c["expression"], activation) for c in policy["spec"]["matchConditions"]
    )


# ---------------------------------------------------------------------------------------------
# network policy, monitoring, teardown


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


def test_cleanup_hook_deletes_exactly_the_webhook_configurations_before_uninstall() -> None:
    objects = render_objects()
    job = one(objects, "Job")
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "pre-delete"
    [container] = pod_spec(job)["containers"]
    mutating = one(objects, "MutatingWebhookConfiguration")["metadata"]["name"]
    validating = one(objects, "ValidatingWebhookConfiguration")["metadata"]["name"]
    assert container["command"] == ["kubectl"]
    assert container["args"][0] == "delete"
    targets = [a for a in container["args"] if not a.startswith("-")][1:]
    assert targets == [
        f"mutatingwebhookconfiguration/{mutating}",
        f"validatingwebhookconfiguration/{validating}",
    ]
    role = one(objects, "ClusterRole", "gpuclass-cleanup")
    assert {(r["resources"][0], tuple(r["resourceNames"])) for r in role["rules"]} == {
        ("mutatingwebhookconfigurations", (mutating,)),
        ("validatingwebhookconfigurations", (validating,)),
    }
    assert all(set(r["verbs"]) <= {"get", "delete"} for r in role["rules"])
    # its account and rights exist before the Job runs (lower hook weight) and are hooks too
    for kind in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding"):
        hook = one(objects, kind, "gpuclass-cleanup")["metadata"]["annotations"]
        assert hook["helm.sh/hook"] == "pre-delete"
        assert int(hook["helm.sh/hook-weight"]) < int(annotations["helm.sh/hook-weight"])
    assert not of_kind(render_objects({"cleanupHook": {"enabled": False}}), "Job")


def licence_policy(objects: list[dict[str, Any]]) -> dict[str, Any]:
    [policy] = [
        o
        for o in of_kind(objects, "ValidatingAdmissionPolicy")
        if o["metadata"]["name"].endswith("-licence-copies")
    ]
    return policy


def test_release_name_flows_into_every_cross_reference() -> None:
    objects = render_objects(release="gpu", namespace="platform")
    hook = webhook_for(objects, "virtualmachineinstances")
    assert hook["clientConfig"]["service"] == {
        "name": "gpu-gpuclass-webhook",
        "namespace": "platform",
        "port": 443,
        "path": paths.MUTATE_VMIS,
    }
    policy = licence_policy(objects)
    assert (
        "system:serviceaccount:platform:gpu-gpuclass-reconciler"
        in policy["spec"]["matchConditions"][0]["expression"]
    )
    assert one(objects, "Secret")["metadata"]["name"] == "gpu-gpuclass-webhook-certs"
    [container] = pod_spec(deployment(objects, "webhook"))["containers"]
    hosts = (
        "--tls-hosts=gpu-gpuclass-webhook,gpu-gpuclass-webhook.platform,"
        "gpu-gpuclass-webhook.platform.svc,gpu-gpuclass-webhook.platform.svc.cluster.local"
    )
    assert hosts in container["args"]
    objects = render_objects(HELM_TLS, release="gpu", namespace="platform")
    secret = one(objects, "Secret", "gpu-gpuclass-webhook-tls")
    assert one(objects, "Secret", "gpu-gpuclass-webhook-tls-ca")
    assert (
        _pem(secret["data"]["tls.crt"]).subject.rfc4514_string()
        == "CN=gpu-gpuclass-webhook.platform.svc"
    )


def test_notes_name_the_uninstall_order() -> None:
    notes = render()["gpuclass/templates/NOTES.txt"]
    assert "pre-delete hook" in notes
    notes = render({"cleanupHook": {"enabled": False}})["gpuclass/templates/NOTES.txt"]
    assert "DISABLED" in notes


def test_notes_say_which_licence_sources_the_reconciler_may_read() -> None:
    notes = render()["gpuclass/templates/NOTES.txt"]
    assert "may read no Secret (settings.licenseSecretNames is empty)" in notes
    notes = render({"settings": {"licenseSecretNames": ["vgpu-a", "vgpu-b"]}})[
        "gpuclass/templates/NOTES.txt"
    ]
    assert "may read the Secrets vgpu-a, vgpu-b in\ncozy-system" in notes


def test_values_yaml_is_plain_yaml() -> None:
    # values.yaml must parse without Helm (docs tooling reads it)
    assert isinstance(yaml.safe_load((CHART / "values.yaml").read_text()), dict)


def test_webhook_limits_and_shutdown_reach_the_binary_and_the_pod() -> None:
    """The limits are the binary's flags; the grace period covers preStop, drain and in-flight."""
    from gpuclass.shared.kube.settings import parse_settings
    from gpuclass.webhook.settings import WebhookSettings

    values = {
        "webhook": {
            "limits": {"maxConnections": 300, "headerTimeoutSeconds": 3},
            "shutdown": {"preStopSeconds": 7, "drainSeconds": 4, "graceSeconds": 12},
        }
    }
    spec = pod_spec(deployment(render_objects(values), "webhook"))
    [container] = spec["containers"]
    hook = parse_settings(WebhookSettings, container["args"], "gpuclass-webhook")
    assert (hook.max_connections, hook.header_timeout_seconds) == (300, 3)
    assert (hook.drain_seconds, hook.shutdown_grace_seconds) == (4, 12)
    assert container["lifecycle"]["preStop"] == {"sleep": {"seconds": 7}}
    assert spec["terminationGracePeriodSeconds"] == 7 + 4 + 12 + 5
    default = pod_spec(deployment(render_objects({}), "webhook"))
    [plain] = default["containers"]
    settings = parse_settings(WebhookSettings, plain["args"], "gpuclass-webhook")
    assert settings.max_body_buffer_bytes == WebhookSettings().max_body_buffer_bytes
    assert default["terminationGracePeriodSeconds"] >= (
        plain["lifecycle"]["preStop"]["sleep"]["seconds"]
        + settings.drain_seconds
        + settings.shutdown_grace_seconds
    )
    no_hook = pod_spec(
        deployment(render_objects({"webhook": {"shutdown": {"preStopSeconds": 0}}}), "webhook")
    )
    assert "lifecycle" not in no_hook["containers"][0]


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
    (tests/test_e2e_cert_rotation.py) shows the decisions."""
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
