"""RBAC: templates/rbac-reconciler.yaml and rbac-webhook.yaml (docs/contract.md section 6).

Each account gets exactly the rights it needs, names limit what can be limited, no wildcard in any
variant, and every binding points at a rendered role and account.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.chart.common import CERT_MANAGER, HELM_TLS, VARIANTS
from tests.chart_helpers import (
    NAMESPACE,
    RawObject,
    deployment,
    of_kind,
    one,
    pod_spec,
    render_objects,
    workloads,
)


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
        # license copies: create, a label-tested JSON patch, delete; no Secret is readable cluster-wide
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
        # the record of license copies, one ConfigMap read and updated by name
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


def test_reconciler_reads_only_the_license_sources_the_values_name() -> None:
    """No license source listed: no Secret is readable at all; listed: exactly those names."""
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
            _grants("cozystack.io", ["gpuclasses"], READ)
            | _grants("", ["namespaces", "resourcequotas"], READ)
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
