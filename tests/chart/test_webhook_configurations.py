"""templates/webhook-configurations.yaml: the admission registration (docs/contract.md section 3).

Paths are the webhook's route constants, every webhook uses the safe common settings, each one sees
exactly the requests the contract names and fails closed or open as the section 3 table says; the
VMI matchCondition is evaluated with cel-python on the shapes the API server passes.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuclass.webhook import paths
from tests.chart.common import CERT_MANAGER, HELM_TLS, cel
from tests.chart_helpers import (
    NAMESPACE,
    RawObject,
    of_kind,
    one,
    render_objects,
    webhook_for,
    webhooks,
)


@pytest.mark.parametrize(
    "values", [{}, HELM_TLS, CERT_MANAGER], ids=["webhook-managed", "helm", "cert-manager"]
)
def test_webhook_paths_are_the_webhook_route_constants(values: dict[str, Any]) -> None:
    objects = render_objects(values)
    assert webhook_for(objects, "gpuclasses")["clientConfig"]["service"]["path"] == (
        paths.VALIDATE_GPUCLASSES
    )
    assert webhook_for(objects, "virtualmachineinstances", paths.MUTATE_VMIS)["clientConfig"][
        "service"
    ]["path"] == (paths.MUTATE_VMIS)
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
        paths.VALIDATE_VMIS,
    }


def test_every_webhook_uses_the_safe_common_settings() -> None:
    objects = render_objects()
    service = one(of_kind(objects, "Service"), "Service", "gpuclass-webhook")
    hooks = webhooks(objects)
    assert len(hooks) == 6
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
    hook = webhook_for(render_objects(), "virtualmachineinstances", paths.MUTATE_VMIS)
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
    hook = webhook_for(render_objects(), "virtualmachineinstances", paths.MUTATE_VMIS)
    expression = hook["matchConditions"][0]["expression"]
    volumes = [{"name": "root", "containerDisk": {"image": "x"}}]
    activation = {
        "request": {"operation": operation},
        "object": {"metadata": new_meta, "spec": {"volumes": volumes}},
        "oldObject": None
        if old_meta is None
        else {"metadata": old_meta, "spec": {"volumes": volumes}},
    }
    assert cel(celpy, expression, activation) is admitted


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
    hook = webhook_for(render_objects(), "virtualmachineinstances", paths.MUTATE_VMIS)
    expression = hook["matchConditions"][0]["expression"]

    def vmi(spec: RawObject | None) -> RawObject:
        return {"metadata": {}} if spec is None else {"metadata": {}, "spec": spec}

    activation = {
        "request": {"operation": "UPDATE"},
        "object": vmi(new_spec),
        "oldObject": vmi(old_spec),
    }
    assert cel(celpy, expression, activation) is admitted
