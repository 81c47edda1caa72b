"""Webhook configurations for a webhook under test, reached by URL (https://127.0.0.1:PORT).

`webhook_configuration` builds one Mutating/ValidatingWebhookConfiguration as a raw
dict; `gpuclass_webhooks` builds the contract's VMI, launcher-Pod and GPUClass endpoints
(docs/contract.md section 3), the check after every mutation (rule 4.11) included, in that
shape; `register_webhooks` and `remove_webhooks` apply and
delete them through the admin client. The API server picks a change up
asynchronously (about a second): tests wait for its effect with `eventually`.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from gpuclass.webhook import paths
from tests.controlplane.api import Api, RawObject

Kind = Literal["Mutating", "Validating"]
TEST_LABEL = {"app.kubernetes.io/part-of": "gpuclass-tests"}


@dataclass(frozen=True, slots=True)
class Hook:
    """One webhook entry: where it is served and what it intercepts."""

    name: str
    path: str
    rules: Sequence[Mapping[str, Any]]
    failure_policy: Literal["Fail", "Ignore"] = "Fail"
    namespace_selector: Mapping[str, Any] = field(default_factory=dict)
    object_selector: Mapping[str, Any] = field(default_factory=dict)
    timeout_seconds: int = 10
    reinvocation_policy: Literal["Never", "IfNeeded"] = "IfNeeded"


def rule(
    group: str, version: str, resource: str, operations: Sequence[str], scope: str = "*"
) -> RawObject:
    """A RuleWithOperations for one resource."""
    return {
        "apiGroups": [group],
        "apiVersions": [version],
        "resources": [resource],
        "operations": list(operations),
        "scope": scope,
    }


def webhook_configuration(
    kind: Kind, name: str, *, base_url: str, ca_bundle: bytes, hooks: Iterable[Hook]
) -> RawObject:
    """A {Mutating,Validating}WebhookConfiguration whose hooks call `base_url` + path."""
    entries = []
    for hook in hooks:
        entry: RawObject = {
            "name": hook.name,
            "clientConfig": {
                "url": base_url.rstrip("/") + hook.path,
                "caBundle": base64.b64encode(ca_bundle).decode(),
            },
            "rules": [dict(r) for r in hook.rules],
            "failurePolicy": hook.failure_policy,
            "sideEffects": "None",
            "admissionReviewVersions": ["v1", "v1beta1"],
            "timeoutSeconds": hook.timeout_seconds,
            "matchPolicy": "Equivalent",
            "namespaceSelector": dict(hook.namespace_selector),
            "objectSelector": dict(hook.object_selector),
        }
        if kind == "Mutating":
            entry["reinvocationPolicy"] = hook.reinvocation_policy
        entries.append(entry)
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": f"{kind}WebhookConfiguration",
        "metadata": {"name": name, "labels": dict(TEST_LABEL)},
        "webhooks": entries,
    }


def gpuclass_webhooks(
    base_url: str, ca_bundle: bytes, *, prefix: str = "gpuclass-test"
) -> list[RawObject]:
    """The contract's webhooks (section 3) pointing at a gpuclass-webhook under test."""
    validating = Hook(
        name="gpuclasses.gpu.cozystack.io",
        path=paths.VALIDATE_GPUCLASSES,
        rules=[rule("cozystack.io", "v1alpha1", "gpuclasses", ["CREATE", "UPDATE"], "Cluster")],
    )
    vmis = Hook(
        name="virtualmachineinstances.gpu.cozystack.io",
        path=paths.MUTATE_VMIS,
        rules=[
            rule("kubevirt.io", "v1", "virtualmachineinstances", ["CREATE", "UPDATE"], "Namespaced")
        ],
        namespace_selector={
            "matchExpressions": [
                {
                    "key": "kubernetes.io/metadata.name",
                    "operator": "NotIn",
                    "values": ["kube-system"],
                }
            ]
        },
    )
    final = Hook(
        name="final-virtualmachineinstances.gpu.cozystack.io",
        path=paths.VALIDATE_VMIS,
        rules=[rule("kubevirt.io", "v1", "virtualmachineinstances", ["CREATE"], "Namespaced")],
        namespace_selector=vmis.namespace_selector,
    )
    pods = Hook(
        name="launcher-pods.gpu.cozystack.io",
        path=paths.MUTATE_PODS,
        rules=[rule("", "v1", "pods", ["CREATE"], "Namespaced")],
        failure_policy="Ignore",
        object_selector={"matchLabels": {"kubevirt.io": "virt-launcher"}},
    )
    return [
        webhook_configuration(
            "Validating",
            f"{prefix}-validating",
            base_url=base_url,
            ca_bundle=ca_bundle,
            hooks=[validating, final],
        ),
        webhook_configuration(
            "Mutating",
            f"{prefix}-mutating",
            base_url=base_url,
            ca_bundle=ca_bundle,
            hooks=[vmis, pods],
        ),
    ]


def register_webhooks(api: Api, configurations: Iterable[Mapping[str, Any]]) -> list[RawObject]:
    """Create or update the configurations (server-side apply)."""
    return api.apply(configurations)


def remove_webhooks(api: Api, configurations: Iterable[Mapping[str, Any]]) -> None:
    """Delete the configurations; those already gone are fine."""
    for configuration in configurations:
        api.delete(configuration)
