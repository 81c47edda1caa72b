"""The gpuclass Helm chart as a whole, rendered by the real Helm engine (docs/conventions.md rule 19).

Every switch is rendered (certificates by cert-manager or by the chart, monitoring on and off, the
optional hardening) and every object is validated against the Kubernetes OpenAPI schemas; names,
namespaces and the release name's cross-references hold; `helm lint` is clean; values.yaml,
values.schema.json and docs/chart-values.md agree. One module per template or group of templates
sits beside this one (tests/chart/); everything is asserted on rendered objects, not on template text.
"""

from __future__ import annotations

import json
import re
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from gpuclass.webhook import paths
from tests.chart.common import (
    CERT_MANAGER,
    HELM_TLS,
    MONITORING_ON,
    VARIANTS,
    license_policy,
    pem_certificate,
)
from tests.chart_helpers import (
    CHART,
    NAMESPACE,
    ROOT,
    deployment,
    flatten_keys,
    load_yaml,
    one,
    pod_spec,
    render,
    render_objects,
    webhook_for,
)

# Kinds whose schemas kubernetes-validate does not ship (CRD-typed); anything else must validate.
CRD_TYPED_GROUPS = {"cert-manager.io", "monitoring.coreos.com", "cilium.io"}
KUBERNETES_VERSIONS = ["1.30.0", "1.36.0"]


def _group(api_version: str) -> str:
    return api_version.split("/")[0] if "/" in api_version else ""


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
    # license copies, caBundle only, license mounts, GPUClass finalizer only, entitlement label
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


def test_release_name_flows_into_every_cross_reference() -> None:
    objects = render_objects(release="gpu", namespace="platform")
    hook = webhook_for(objects, "virtualmachineinstances", paths.MUTATE_VMIS)
    assert hook["clientConfig"]["service"] == {
        "name": "gpu-gpuclass-webhook",
        "namespace": "platform",
        "port": 443,
        "path": paths.MUTATE_VMIS,
    }
    policy = license_policy(objects)
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
        pem_certificate(secret["data"]["tls.crt"]).subject.rfc4514_string()
        == "CN=gpu-gpuclass-webhook.platform.svc"
    )


# A template comment, `{{/* ... */}}` with optional trim markers: its text is never executed.
TEMPLATE_COMMENT = re.compile(r"\{\{-?\s*/\*.*?\*/\s*-?\}\}", re.S)
VALUES_KEY = re.compile(r"\.Values\.([A-Za-z_][A-Za-z0-9_]*)")
VALUES_INDEXED = re.compile(r"index \$?\.Values \$(\w+)")
STR = "tag:yaml.org,2002:str"


def _values_the_templates_read() -> set[str]:
    """The top-level values keys the chart's templates read: `.Values.<key>` (also `$.` and
    `.root.`), and `index $.Values $var` where `$var` ranges over a literal list."""
    keys: set[str] = set()
    for path in sorted((CHART / "templates").iterdir()):
        text = TEMPLATE_COMMENT.sub("", path.read_text())
        keys |= set(VALUES_KEY.findall(text))
        for var in VALUES_INDEXED.findall(text):
            ranged = re.search(rf"range \${var} := list((?:\s+\"[^\"]+\")+)", text)
            assert ranged, f"{path.name}: .Values indexed by ${var}, which ranges over no list"
            keys |= set(re.findall(r'"([^"]+)"', ranged.group(1)))
        unread = VALUES_INDEXED.sub("", VALUES_KEY.sub("", text))
        assert ".Values" not in unread, f"{path.name} reads .Values in a way this test cannot"
    return keys


def _mapping_problems(node: yaml.Node | None, path: str = "") -> list[str]:
    """Keys that are not plain strings (ints, booleans, `<<` merges) or that repeat."""
    problems: list[str] = []
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key, value in node.value:
            where = f"{path}.{key.value}"
            if key.tag != STR:
                problems.append(f"{where}: key resolves to {key.tag}")
            if key.value in seen:
                problems.append(f"{where}: duplicate key")
            seen.add(key.value)
            problems += _mapping_problems(value, where)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            problems += _mapping_problems(item, f"{path}[{index}]")
    return problems


def test_values_yaml_is_plain_yaml() -> None:
    """values.yaml must read the same without Helm (docs tooling reads it): one document a safe
    loader reads, no anchors, aliases or explicit tags, string keys each given once, and at the
    top exactly the keys the templates read (none unread, none read that has no default)."""
    text = (CHART / "values.yaml").read_text()
    events = list(yaml.parse(text, Loader=yaml.SafeLoader))
    assert sum(isinstance(e, yaml.DocumentStartEvent) for e in events) == 1
    assert [e for e in events if isinstance(e, yaml.AliasEvent)] == []
    assert [e.anchor for e in events if isinstance(e, yaml.NodeEvent) and e.anchor] == []
    tagged = (yaml.ScalarEvent, yaml.MappingStartEvent, yaml.SequenceStartEvent)
    assert [e.tag for e in events if isinstance(e, tagged) and e.tag] == []
    assert _mapping_problems(yaml.compose(text, Loader=yaml.SafeLoader)) == []
    values = yaml.safe_load(text)
    assert isinstance(values, dict)
    assert set(values) == _values_the_templates_read()
