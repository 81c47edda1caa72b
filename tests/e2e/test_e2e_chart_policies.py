"""The chart's admission policies against a real kube-apiserver, with the chart's own RBAC.

Hostile tenants and compromised components (docs/operations.md, Threat model): each rule is
shown refusing the attack AND letting the legitimate write through, always as the identity
concerned, with the rights the chart (or a typical tenant set-up) gives it, never as admin:

- a tenant admin with `patch` on its own Namespace cannot entitle itself to vGPU; the
  platform's identities can (templates/entitlement-label-policy.yaml);
- the webhook's account may rewrite the caBundle of its configurations, but not add an
  ownerReference or a finalizer; with the garbage collector running, the ownerReference is
  what would delete the fail-closed configuration (templates/webhook-cabundle-policy.yaml);
- the reconciler's account may add and remove the in-use finalizer of a GPUClass and write
  its status, nothing else (templates/in-use-finalizer-policy.yaml).

The license-copy policy has its own module, tests/e2e/test_e2e_chart.py.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from tests.builders import api_gpuclass, api_namespace
from tests.chart_helpers import NAMESPACE, documents, render, webhook_identity
from tests.controlplane.api import Api, ApiError, RawObject
from tests.controlplane.cluster import ControlPlane, User, eventually, unique_name
from tests.controlplane.components import Component
from tests.e2e_reconciler_helpers import (
    FINALIZER,
    MERGE,
    SERVICE_ACCOUNT,
    SERVICE_ACCOUNT_GROUPS,
    apply_chart_rbac,
    delete_all,
)

pytestmark = pytest.mark.controlplane

LABEL = "gpu.cozystack.io/vgpu"
ADMISSION = "admissionregistration.k8s.io/v1"
RBAC = "rbac.authorization.k8s.io"
HELM_CONTROLLER = "system:serviceaccount:cozy-fluxcd:helm-controller"
GPUCLASSES = "/apis/cozystack.io/v1alpha1/gpuclasses"


@dataclass
class Chart:
    """The chart's RBAC and policies in force, and clients acting as its two accounts."""

    plane: ControlPlane
    webhook: Api
    reconciler: Api
    configurations: list[RawObject]

    @property
    def admin(self) -> Api:
        return self.plane.admin


def _decoy_configurations() -> list[RawObject]:
    """The chart's two webhook configurations by kind and name (what the webhook's RBAC
    names), each with one webhook that matches nothing real: the policy judges the change,
    not the content, and no other request of the session goes through them."""
    found = []
    for rendered in documents(render(), template="webhook-configurations.yaml"):
        hook = {
            "name": "decoy.gpuclass.cozystack.io",
            "clientConfig": {"url": "https://127.0.0.1:1/decoy"},
            "rules": [
                {
                    "apiGroups": ["decoy.gpuclass.example.com"],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE"],
                    "resources": ["nothings"],
                }
            ],
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        }
        found.append(
            {
                "apiVersion": rendered["apiVersion"],
                "kind": rendered["kind"],
                "metadata": {"name": rendered["metadata"]["name"]},
                "webhooks": [hook],
            }
        )
    return found


@pytest.fixture(scope="module")
def chart(control_plane: ControlPlane) -> Iterator[Chart]:
    admin = control_plane.admin
    admin.apply([api_namespace(NAMESPACE), api_namespace("cozy-kubevirt")])
    added = apply_chart_rbac(admin)
    configurations = [admin.create(c) for c in _decoy_configurations()]
    name, groups = webhook_identity()
    webhook = control_plane.user(name, groups).api()
    reconciler = control_plane.user(SERVICE_ACCOUNT, list(SERVICE_ACCOUNT_GROUPS)).api()
    try:
        yield Chart(control_plane, webhook, reconciler, configurations)
    finally:
        webhook.close()
        reconciler.close()
        delete_all(admin, configurations)
        delete_all(admin, reversed(added))


def _error(call: Callable[[], object]) -> ApiError:
    with pytest.raises(ApiError) as info:
        call()
    return info.value


def _merge(api: Api, path: str, body: RawObject) -> RawObject:
    return api.call("PATCH", path, body=body, content_type=MERGE)


# -- the vGPU entitlement label ----------------------------------------------------------------------


def _bind(api: Api, name: str, role: str, user: str, *, ns: str | None = None) -> RawObject:
    kind = "RoleBinding" if ns else "ClusterRoleBinding"
    meta: RawObject = {"name": name, **({"namespace": ns} if ns else {})}
    return api.create(
        {
            "apiVersion": f"{RBAC}/v1",
            "kind": kind,
            "metadata": meta,
            "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": RBAC, "kind": "User", "name": user}],
        }
    )


def _role(api: Api, name: str, rules: list[RawObject]) -> RawObject:
    return api.create(
        {
            "apiVersion": f"{RBAC}/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": rules,
        }
    )


@dataclass
class Tenancy:
    ns: str
    tenant: Api
    platform: Api
    maker: Api


@pytest.fixture
def tenancy(chart: Chart) -> Iterator[Tenancy]:
    """A tenant namespace whose admin (`admin` there) may also patch the Namespace itself,
    as a platform that lets tenants label their namespace does; Flux's helm-controller
    (cluster-admin, a platform identity by default); and a user who may create Namespaces."""
    admin, plane = chart.admin, chart.plane
    ns = unique_name("tenant-pol")
    tenant_name, maker_name = unique_name("alice"), unique_name("namespace-maker")
    made = [admin.create(api_namespace(ns))]
    made.append(_bind(admin, "tenant-admin", "admin", tenant_name, ns=ns))
    own = [{"apiGroups": [""], "resources": ["namespaces"], "resourceNames": [ns],
            "verbs": ["get", "patch", "update"]}]  # fmt: skip
    made.append(_role(admin, f"{ns}-own", own))
    made.append(_bind(admin, f"{ns}-own", f"{ns}-own", tenant_name))
    create = [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["create"]}]
    made.append(_role(admin, f"{ns}-create", create))
    made.append(_bind(admin, f"{ns}-create", f"{ns}-create", maker_name))
    made.append(_bind(admin, f"{ns}-flux", "cluster-admin", HELM_CONTROLLER))
    users: list[User] = [
        plane.user(tenant_name, ["tenants"]),
        plane.user(
            HELM_CONTROLLER, ["system:serviceaccounts", "system:serviceaccounts:cozy-fluxcd"]
        ),
        plane.user(maker_name),
    ]
    tenant, platform, maker = (u.api() for u in users)
    try:
        yield Tenancy(ns, tenant, platform, maker)
    finally:
        for client in (tenant, platform, maker):
            client.close()
        delete_all(admin, reversed(made))


def _label(api: Api, ns: str, value: str | None, key: str = LABEL) -> RawObject:
    return _merge(api, f"/api/v1/namespaces/{ns}", {"metadata": {"labels": {key: value}}})


def test_a_tenant_cannot_entitle_itself_the_platform_can(chart: Chart, tenancy: Tenancy) -> None:
    ns, tenant, platform = tenancy.ns, tenancy.tenant, tenancy.platform
    eventually(
        lambda: (
            "entitlement-label"
            in tenant.request(
                "PATCH",
                f"/api/v1/namespaces/{ns}",
                body={"metadata": {"labels": {LABEL: "true"}}},
                params={"dryRun": "All"},
                content_type=MERGE,
            ).text
        ),
        timeout=30,
        what="the entitlement-label policy in effect",
    )
    # RBAC lets the tenant label its namespace: any other label goes through.
    assert _label(tenant, ns, "ml", key="team")["metadata"]["labels"]["team"] == "ml"
    refused = _error(lambda: _label(tenant, ns, "true"))
    assert refused.status_code == 403
    assert "entitlement-label" in refused.body["message"]
    assert LABEL not in chart.admin.call("GET", f"/api/v1/namespaces/{ns}")["metadata"]["labels"]

    assert _label(platform, ns, "true")["metadata"]["labels"][LABEL] == "true"
    # Entitled now: the tenant still edits its other labels, but cannot change or remove this one.
    assert _label(tenant, ns, "data", key="team")["metadata"]["labels"][LABEL] == "true"
    for value in ("false", None):
        with pytest.raises(ApiError) as info:
            _label(tenant, ns, value)
        assert info.value.status_code == 403
    assert _label(chart.admin, ns, None)["metadata"]["labels"].get(LABEL) is None  # system:masters


def test_a_namespace_is_created_with_the_label_by_the_platform_only(
    chart: Chart, tenancy: Tenancy
) -> None:
    entitled = api_namespace(unique_name("tenant-made"), {LABEL: "true"})
    refused = _error(lambda: tenancy.maker.create(entitled))
    assert refused.status_code == 403 and "entitlement-label" in refused.body["message"]
    plain = tenancy.maker.create(api_namespace(unique_name("tenant-made")))
    made = tenancy.platform.create(entitled)
    assert made["metadata"]["labels"][LABEL] == "true"
    delete_all(chart.admin, [plain, made])


# -- the webhook's account and its webhook configurations ------------------------------------------


def _configuration_path(chart: Chart, kind: str) -> str:
    [found] = [c for c in chart.configurations if c["kind"] == kind]
    return chart.admin.object_path(found)


def _put(api: Api, path: str, change: Callable[[RawObject], None], **params: str) -> int:
    """The status of an update of `path` changed by `change`; 403 only if the caBundle
    policy refused it (an RBAC refusal fails the test)."""
    body = api.call("GET", path)
    change(body)
    answer = api.request("PUT", path, body=body, params=params or None)
    assert answer.status_code != 403 or "webhook-cabundle" in answer.text, answer.text
    return answer.status_code


def _dangling_owner(body: RawObject) -> None:
    """An owner that does not exist: the garbage collector deletes such a dependent."""
    body["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Namespace", "name": unique_name("gone"),
         "uid": str(uuid.uuid4())}
    ]  # fmt: skip


def _finalizer(body: RawObject) -> None:
    body["metadata"]["finalizers"] = ["example.com/hold"]


def _ca_bundle(body: RawObject) -> None:
    pem = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    for hook in body["webhooks"]:
        hook["clientConfig"]["caBundle"] = base64.b64encode(pem + uuid.uuid4().bytes).decode()


@pytest.mark.parametrize("kind", ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"])
def test_the_webhook_account_may_change_only_the_ca_bundle(chart: Chart, kind: str) -> None:
    path = _configuration_path(chart, kind)
    eventually(
        lambda: _put(chart.webhook, path, _dangling_owner, dryRun="All") == 403,
        timeout=30,
        what="the caBundle policy in effect",
    )
    for change in (_dangling_owner, _finalizer):
        body = chart.webhook.call("GET", path)
        change(body)
        answer = chart.webhook.request("PUT", path, body=body)
        assert answer.status_code == 403, (change.__name__, answer.text)
        assert "webhook-cabundle" in answer.text
    stored = chart.admin.call("GET", path)["metadata"]
    assert "ownerReferences" not in stored and "finalizers" not in stored
    assert _put(chart.webhook, path, _ca_bundle) == 200


def test_the_ownerreference_trick_with_the_garbage_collector(
    chart: Chart, garbage_collector: Component
) -> None:
    """With the policy, the webhook's account cannot hand its configuration to the garbage
    collector. Without it (the binding removed, as in the chart before this rule), the same
    write by the same account is accepted and the collector deletes the fail-closed
    configuration: the attack is real, and the policy is what stops it."""
    admin = chart.admin
    kind = "ValidatingWebhookConfiguration"
    path = _configuration_path(chart, kind)
    [fresh] = [c for c in _decoy_configurations() if c["kind"] == kind]
    binding = next(
        o
        for o in documents(render(), template="webhook-cabundle-policy.yaml")
        if o["kind"] == "ValidatingAdmissionPolicyBinding"
    )
    eventually(
        lambda: _put(chart.webhook, path, _dangling_owner, dryRun="All") == 403,
        timeout=30,
        what="the caBundle policy in effect",
    )
    assert _put(chart.webhook, path, _dangling_owner) == 403
    admin.delete(binding)
    try:
        eventually(
            lambda: _put(chart.webhook, path, _dangling_owner, dryRun="All") == 200,
            timeout=30,
            what="the caBundle policy lifted",
        )
        assert _put(chart.webhook, path, _dangling_owner) == 200
        eventually(
            lambda: admin.request("GET", path).status_code == 404,
            timeout=60,
            what="the garbage collector to delete the configuration",
        )
    finally:
        admin.apply([binding])
        if admin.request("GET", path).status_code == 404:
            admin.create(fresh)
    eventually(
        lambda: _put(chart.webhook, path, _dangling_owner, dryRun="All") == 403,
        timeout=30,
        what="the caBundle policy back in effect",
    )


# -- the reconciler's account and GPUClasses ---------------------------------------------------------


@pytest.fixture
def held_class(chart: Chart) -> Iterator[str]:
    """A class as the hoster stores it, with a finalizer of someone else's."""
    name = unique_name("pol-class")
    obj = api_gpuclass(name, f"{name}.example.com/gpu")
    obj["metadata"].update(labels={"tier": "gold"}, finalizers=["example.com/keep"])
    chart.admin.create(obj)
    yield name
    _merge(chart.admin, f"{GPUCLASSES}/{name}", {"metadata": {"finalizers": None}})
    chart.admin.request("DELETE", f"{GPUCLASSES}/{name}")


def _finalizers(api: Api, name: str, finalizers: list[str]) -> RawObject:
    """The reconciler's own write: a merge patch of the whole list at a resourceVersion."""
    current = api.call("GET", f"{GPUCLASSES}/{name}")
    body = {"metadata": {"finalizers": finalizers,
                         "resourceVersion": current["metadata"]["resourceVersion"]}}  # fmt: skip
    return _merge(api, f"{GPUCLASSES}/{name}", body)


def test_the_reconciler_adds_and_removes_the_in_use_finalizer(
    chart: Chart, held_class: str
) -> None:
    api = chart.reconciler
    eventually(
        lambda: (
            "in-use-finalizer"
            in api.request(
                "PATCH",
                f"{GPUCLASSES}/{held_class}",
                body={"spec": {"displayName": "probe"}},
                params={"dryRun": "All"},
                content_type=MERGE,
            ).text
        ),
        timeout=30,
        what="the GPUClass finalizer policy in effect",
    )
    added = _finalizers(api, held_class, ["example.com/keep", FINALIZER])
    assert added["metadata"]["finalizers"] == ["example.com/keep", FINALIZER]
    removed = _finalizers(api, held_class, ["example.com/keep"])
    assert removed["metadata"]["finalizers"] == ["example.com/keep"]
    status = {"status": {"free": 0, "maxFreePerNode": 0, "maxUnitsPerNode": 0}}
    path = f"{GPUCLASSES}/{held_class}/status"
    assert _merge(api, path, status)["status"]["free"] == 0


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"spec": {"displayName": "Hacked"}}, id="spec"),
        pytest.param({"spec": {"maxCount": 64}}, id="spec-limit"),
        pytest.param({"metadata": {"labels": {"tier": "free"}}}, id="label"),
        pytest.param({"metadata": {"annotations": {"example.com/x": "y"}}}, id="annotation"),
        pytest.param(
            {
                "metadata": {
                    "ownerReferences": [
                        {
                            "apiVersion": "v1",
                            "kind": "Namespace",
                            "name": "gone",
                            "uid": "00000000-0000-0000-0000-000000000001",
                        }
                    ]
                }
            },
            id="owner-reference",
        ),
        pytest.param(
            {"metadata": {"finalizers": ["example.com/keep", "example.com/other"]}},
            id="foreign-finalizer-added",
        ),
        pytest.param({"metadata": {"finalizers": [FINALIZER]}}, id="foreign-finalizer-removed"),
    ],
)
def test_the_reconciler_changes_nothing_else_of_a_gpuclass(
    chart: Chart, held_class: str, change: RawObject
) -> None:
    path = f"{GPUCLASSES}/{held_class}"
    before = chart.admin.call("GET", path)
    refused = _error(lambda: _merge(chart.reconciler, path, change))
    assert refused.status_code == 403
    assert "in-use-finalizer" in refused.body["message"]
    after = chart.admin.call("GET", path)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


def test_the_reconciler_neither_creates_nor_deletes_gpuclasses(
    chart: Chart, held_class: str
) -> None:
    name = unique_name("pol-new")
    created = _error(lambda: chart.reconciler.create(api_gpuclass(name, f"{name}.example.com/gpu")))
    deleted = _error(lambda: chart.reconciler.call("DELETE", f"{GPUCLASSES}/{held_class}"))
    assert created.status_code == deleted.status_code == 403
    assert chart.admin.get("cozystack.io/v1alpha1", "GPUClass", held_class) is not None
