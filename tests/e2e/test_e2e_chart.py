"""The chart against a real kube-apiserver: it applies, and its Secret policy holds.

Every object the chart renders with default values passes a server-side dry run;
the CRD, RBAC and the license-copy ValidatingAdmissionPolicy are applied for
real, and requests made *as the reconciler's service account* show that the
policy lets through only our labelled `gpuclass-license-*` copies, in `tenant-*` namespaces,
without ownerReferences, finalizers or `immutable`, whether created, replaced or server-side
applied (docs/contract.md section 6: RBAC cannot express that, the policy can). The license-mount
policy (`templates/license-mount-policy.yaml`, rule 4.8 for Pods) is applied for real too: only
KubeVirt's controller may create a Pod that names a copy.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator

import httpx
import pytest

from tests.builders import api_secret
from tests.chart_helpers import of_kind, render_objects
from tests.controlplane.api import Api, ApiError, RawObject
from tests.controlplane.cluster import ControlPlane, eventually, unique_name
from tests.e2e_reconciler_helpers import MERGE

NAMESPACE = "cozy-system"
CONTROLLER = "system:serviceaccount:cozy-kubevirt:kubevirt-controller"
COPY = "gpuclass-license-example-licensed-vgpu"
RECONCILER = f"system:serviceaccount:{NAMESPACE}:gpuclass-reconciler"
MANAGED = {"app.kubernetes.io/managed-by": "gpuclass"}
WORKLOAD_KINDS = {"Deployment", "Job", "Pod"}


@pytest.fixture(scope="module")
def chart(control_plane: ControlPlane) -> list[RawObject]:
    objects = render_objects()
    # Both namespaces exist in a Cozystack cluster before gpuclass is installed.
    control_plane.admin.apply(
        [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}}
            for n in (NAMESPACE, "cozy-kubevirt")
        ]
    )
    return objects


@pytest.fixture(scope="module")
def reconciler(control_plane: ControlPlane, chart: list[RawObject]) -> Iterator[Api]:
    """The chart's RBAC and policy applied for real; a client acting as the reconciler's SA."""
    admin = control_plane.admin
    kinds = {
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
    admin.apply([o for o in chart if o["kind"] in kinds])
    user = control_plane.user(
        RECONCILER, ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}"]
    )
    api = user.api()
    # The policy reaches the API server's admission chain asynchronously.
    probe = secret(unique_name("not-ours"), "tenant-policy-probe", labels=MANAGED)
    admin.apply(
        [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "tenant-policy-probe"}}]
    )
    eventually(lambda: _refused(api, probe), timeout=30, what="license-copy policy in effect")
    yield api
    api.close()


def secret(name: str, namespace: str, *, labels: dict[str, str] | None = None) -> RawObject:
    """A license copy as the reconciler writes it: type Opaque, the token and gridd.conf."""
    data = {
        "client_configuration_token.tok": "example-not-a-token",
        "gridd.conf": "FeatureType=1\n",
    }
    return api_secret(name, namespace, data, labels)


# Cilium's CiliumNetworkPolicy kind, served without its schema: the dry run shows the object is
# accepted by name and kind; tests/chart/test_networkpolicy.py checks its fields.
CILIUM_NETWORK_POLICY_CRD: RawObject = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "ciliumnetworkpolicies.cilium.io"},
    "spec": {
        "group": "cilium.io",
        "scope": "Namespaced",
        "names": {
            "kind": "CiliumNetworkPolicy",
            "plural": "ciliumnetworkpolicies",
            "singular": "ciliumnetworkpolicy",
            "listKind": "CiliumNetworkPolicyList",
        },
        "versions": [
            {
                "name": "v2",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}


def _refused(api: Api, obj: RawObject, policy: str = "gpuclass-licence-copies") -> bool:
    """A server-side dry-run create of `obj` is refused by the policy named `policy`."""
    try:
        api.create(obj, dryRun="All")
    except ApiError as exc:
        return exc.status_code == 403 and policy in exc.body.get("message", "")
    return False


def test_every_rendered_object_passes_a_server_side_dry_run(
    control_plane: ControlPlane, chart: list[RawObject]
) -> None:
    admin = control_plane.admin
    admin.apply([o for o in chart if o["kind"] == "CustomResourceDefinition"])
    control_plane.install_crds([[CILIUM_NETWORK_POLICY_CRD]])
    failures = []
    for obj in chart:
        try:
            admin.create(obj, dryRun="All")
        except ApiError as exc:
            if exc.status_code != 409:  # already exists (the CRD) is fine
                failures.append(f"{obj['kind']}/{obj['metadata']['name']}: {exc}")
    assert not failures, "\n".join(failures)
    assert {o["kind"] for o in chart} >= {
        "Deployment",
        "Service",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
        "ValidatingAdmissionPolicy",
    }


def test_crd_from_the_chart_shows_printer_columns(
    control_plane: ControlPlane, chart: list[RawObject]
) -> None:
    admin = control_plane.admin
    crd = of_kind(chart, "CustomResourceDefinition")[0]
    columns = [c["name"] for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]]
    table = "application/json;as=Table;v=v1;g=meta.k8s.io"
    # Re-applying the CRD re-initialises its storage for a moment (429 until it is served again).
    response = eventually(
        lambda: (
            (
                r := admin.request("GET", "/apis/cozystack.io/v1alpha1/gpuclasses", accept=table)
            ).status_code
            == 200
            and r
        ),
        timeout=30,
        what="gpuclasses served",
    )
    shown = [c["name"] for c in response.json()["columnDefinitions"]]
    assert shown[0] == "Name" and shown[1:] == columns


@pytest.mark.parametrize(
    ("name", "labels", "allowed"),
    [
        pytest.param("gpuclass-license-ours", MANAGED, True, id="our-labelled-copy-created"),
        pytest.param(
            "gpuclass-license-unlabelled", None, False, id="our-name-without-label-refused"
        ),
        pytest.param("someone-elses-secret", MANAGED, False, id="other-name-with-label-refused"),
        pytest.param(
            "gpuclass-license-wrong-value",
            {"app.kubernetes.io/managed-by": "helm"},
            False,
            id="label-other-value-refused",
        ),
    ],
)
def test_reconciler_may_create_only_labelled_copies(
    control_plane: ControlPlane,
    reconciler: Api,
    name: str,
    labels: dict[str, str] | None,
    allowed: bool,
) -> None:
    namespace = unique_name("tenant-vap")
    control_plane.admin.apply(
        [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}]
    )
    obj = secret(name, namespace, labels=labels)
    if allowed:
        stored = reconciler.create(obj)
        assert stored["metadata"]["labels"] == MANAGED
    else:
        with pytest.raises(ApiError) as info:
            reconciler.create(obj)
        assert info.value.status_code == 403
        assert control_plane.admin.get("v1", "Secret", name, namespace=namespace) is None


def _server_side_apply(api: Api, obj: RawObject) -> RawObject:
    """A patch the reconciler's RBAC allows (create, patch and delete on Secrets: no update):
    server-side apply, forced, as its field manager. It creates or updates in one request,
    so the policy sees both operations through it."""
    return api.call(
        "PATCH",
        api.object_path(obj),
        body=obj,
        params={"fieldManager": "gpuclass-reconciler", "force": "true"},
        content_type="application/apply-patch+yaml",
    )


def _refused_by_policy(info: pytest.ExceptionInfo[ApiError]) -> bool:
    """A 403 from the license-copy policy, not from RBAC."""
    return info.value.status_code == 403 and "gpuclass-licence-copies" in info.value.body.get(
        "message", ""
    )


def test_reconciler_cannot_take_over_or_delete_a_foreign_secret(
    control_plane: ControlPlane, reconciler: Api
) -> None:
    namespace = unique_name("tenant-vap")
    admin = control_plane.admin
    admin.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}])
    foreign = admin.create(secret("gpuclass-license-foreign", namespace))  # our name, not our label
    takeover = secret("gpuclass-license-foreign", namespace, labels=MANAGED)
    with pytest.raises(ApiError) as info:
        _server_side_apply(reconciler, takeover)
    assert _refused_by_policy(info)
    with pytest.raises(ApiError) as info:
        reconciler.delete(foreign)
    assert _refused_by_policy(info)
    assert admin.get("v1", "Secret", "gpuclass-license-foreign", namespace=namespace) is not None


def test_reconciler_updates_and_deletes_its_own_copies(
    control_plane: ControlPlane, reconciler: Api
) -> None:
    namespace = unique_name("tenant-vap")
    control_plane.admin.apply(
        [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}]
    )
    ours = reconciler.create(secret("gpuclass-license-mine", namespace, labels=MANAGED))
    changed = secret("gpuclass-license-mine", namespace, labels=MANAGED)
    changed["data"]["gridd.conf"] = "RmVhdHVyZVR5cGU9NAo="
    updated = _server_side_apply(reconciler, changed)
    assert updated["data"]["gridd.conf"] == "RmVhdHVyZVR5cGU9NAo="
    with pytest.raises(ApiError) as info:  # a copy may not shed its label
        reconciler.call(
            "PATCH",
            reconciler.object_path(ours),
            body={"metadata": {"labels": None}},
            content_type=MERGE,
        )
    assert _refused_by_policy(info)
    with pytest.raises(ApiError) as info:  # nor be updated but by apply (RBAC: no update)
        reconciler.call("PUT", reconciler.object_path(updated), body=updated)
    assert info.value.status_code == 403
    assert reconciler.delete(updated) is True


def test_policy_leaves_other_users_alone(control_plane: ControlPlane, reconciler: Api) -> None:
    namespace = unique_name("tenant-vap")
    admin = control_plane.admin
    admin.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}])
    assert admin.create(secret("anything-else", namespace))["metadata"]["name"] == "anything-else"


def _token_secret(obj: RawObject) -> RawObject:
    minted = copy.deepcopy(obj)
    minted["type"] = "kubernetes.io/service-account-token"
    minted["metadata"]["annotations"] = {"kubernetes.io/service-account.name": "default"}
    minted["data"] = {}
    return minted


def _pull_secret(obj: RawObject) -> RawObject:
    changed = copy.deepcopy(obj)
    changed["type"] = "kubernetes.io/dockerconfigjson"
    changed["data"] = {".dockerconfigjson": "eyJhdXRocyI6IHt9fQ=="}  # {"auths": {}}
    return changed


def _with(key: str, value: object) -> Callable[[RawObject], RawObject]:
    def change(obj: RawObject) -> RawObject:
        changed = copy.deepcopy(obj)
        if key == "annotations":
            changed["metadata"]["annotations"] = value
        else:
            changed[key] = value
        return changed

    return change


@pytest.mark.parametrize(
    "shape",
    [
        pytest.param(_token_secret, id="service-account-token"),
        pytest.param(_pull_secret, id="image-pull-secret"),
        pytest.param(_with("data", {"gridd.conf": "eA==", "extra": "eA=="}), id="other-keys"),
        pytest.param(
            _with("annotations", {"kubernetes.io/service-account.name": "default"}),
            id="foreign-annotation",
        ),
    ],
)
def test_reconciler_cannot_write_a_secret_of_another_shape(
    control_plane: ControlPlane, reconciler: Api, shape: Callable[[RawObject], RawObject]
) -> None:
    """Its name and label right, but not a license copy: the policy refuses the create and the update."""
    namespace = unique_name("tenant-vap")
    control_plane.admin.apply(
        [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}]
    )
    good = secret("gpuclass-license-shape", namespace, labels=MANAGED)
    with pytest.raises(ApiError) as info:
        reconciler.create(shape(good))
    assert info.value.status_code == 403
    assert "gpuclass-licence-copies" in info.value.body.get("message", "")
    stored = reconciler.create(good)
    changed = shape(good)
    if changed.get("type") != stored.get("type"):
        return  # type is immutable anyway: the API server refuses that update on its own
    with pytest.raises(ApiError) as info:
        _server_side_apply(reconciler, changed)
    assert _refused_by_policy(info)
    assert reconciler.delete(stored) is True


# -- the license-mount policy: only KubeVirt's controller may mount a license copy in a Pod --------


def _pod(namespace: str, secret_name: str, route: str) -> RawObject:
    """A tenant's Pod that names `secret_name` by `route`."""
    container: RawObject = {"name": "app", "image": "example.org/app:1"}
    spec: RawObject = {"containers": [container]}
    if route == "secret-volume":
        spec["volumes"] = [{"name": "lic", "secret": {"secretName": secret_name}}]
    elif route == "projected-volume":
        spec["volumes"] = [
            {"name": "lic", "projected": {"sources": [{"secret": {"name": secret_name}}]}}
        ]
    elif route == "env":
        ref = {"name": secret_name, "key": "client_configuration_token.tok"}
        container["env"] = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": ref}}]
    elif route == "init-env-from":
        spec["initContainers"] = [
            {
                "name": "init",
                "image": "example.org/app:1",
                "envFrom": [{"secretRef": {"name": secret_name}}],
            }
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": unique_name("mount"), "namespace": namespace},
        "spec": spec,
    }


@pytest.fixture(scope="module")
def license_mounts(control_plane: ControlPlane, chart: list[RawObject]) -> Iterator[str]:
    """The chart's license-mount policy applied for real; yields a tenant namespace."""
    admin = control_plane.admin
    # Whatever the chart renders for it (without the policy, the attack tests fail, not error).
    policy = [o for o in chart if o["metadata"]["name"].endswith("-licence-mounts")]
    new = [o for o in policy if admin.request("GET", admin.object_path(o)).status_code == 404]
    admin.apply(policy)
    namespace = unique_name("tenant-mount")
    admin.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}])
    if policy:
        probe = _pod(namespace, COPY, "secret-volume")
        eventually(
            lambda: _refused(admin, probe, "licence-mounts"),
            timeout=30,
            what="license-mount policy",
        )
    yield namespace
    for obj in new:
        admin.delete(obj)


ROUTES = ["secret-volume", "projected-volume", "env", "init-env-from"]


@pytest.mark.parametrize("route", ROUTES)
def test_a_tenant_pod_cannot_mount_a_license_copy(
    control_plane: ControlPlane, license_mounts: str, route: str
) -> None:
    """Attack (docs/contract.md 4.8, for Pods): the copy in the tenant's own namespace, named by
    a Pod the tenant creates. Refused by the API server, whoever the creator is but KubeVirt."""
    with pytest.raises(ApiError) as info:
        control_plane.admin.create(_pod(license_mounts, COPY, route))
    assert info.value.status_code == 403
    message = info.value.body["message"]
    assert "gpuclass-licence-mounts" in message and "gpuclass-license-" in message


@pytest.mark.parametrize("route", ROUTES)
def test_kubevirts_controller_and_other_secrets_pass(
    control_plane: ControlPlane, license_mounts: str, route: str
) -> None:
    """The positive controls: the controller's launcher Pods mount copies; tenants mount any
    Secret that is not a copy. Both are created (201), by the same route the attack uses."""
    controller = control_plane.user(CONTROLLER, ["system:masters"]).api()
    try:
        launcher = _dry_run_create(controller, _pod(license_mounts, COPY, route))
    finally:
        controller.close()
    plain = _dry_run_create(control_plane.admin, _pod(license_mounts, "my-own-secret", route))
    assert launcher.status_code == 201, launcher.text
    assert plain.status_code == 201, plain.text


def _dry_run_create(api: Api, obj: RawObject) -> httpx.Response:
    """A server-side dry-run create of `obj`: every admission policy runs, nothing is stored."""
    path = api.object_path(obj, collection=True)
    return api.request("POST", path, body=obj, params={"dryRun": "All"})


def _debug(api: Api, pod: RawObject) -> int:
    """`kubectl debug`: add an ephemeral container, which may mount any volume of the Pod."""
    path = api.object_path(pod) + "/ephemeralcontainers"
    body = {"spec": {"ephemeralContainers": [{"name": "debug", "image": "example.org/sh:1"}]}}
    return api.request("PATCH", path, body=body, content_type=MERGE).status_code


def test_an_ephemeral_container_cannot_join_a_pod_holding_a_copy(
    control_plane: ControlPlane, license_mounts: str
) -> None:
    admin = control_plane.admin
    controller = control_plane.user(CONTROLLER, ["system:masters"]).api()
    try:
        launcher = controller.create(_pod(license_mounts, COPY, "secret-volume"))
    finally:
        controller.close()
    plain = admin.create(_pod(license_mounts, "my-own-secret", "secret-volume"))
    try:
        assert _debug(admin, launcher) == 403
        assert _debug(admin, plain) == 200
    finally:
        admin.delete(launcher)
        admin.delete(plain)


# -- where copies may be written, and what they may not carry (docs/operations.md, Threat model) --


@pytest.mark.parametrize(
    ("namespace", "allowed"),
    [
        pytest.param("kube-system", False, id="kube-system"),
        pytest.param(NAMESPACE, False, id="cozy-system"),
        pytest.param("default", False, id="default"),
        pytest.param("tenant-root", True, id="tenant-root"),
        pytest.param(None, True, id="tenant-x"),
    ],
)
@pytest.mark.parametrize("write", ["create", "apply"])
def test_reconciler_writes_copies_in_tenant_namespaces_only(
    control_plane: ControlPlane,
    reconciler: Api,
    namespace: str | None,
    allowed: bool,
    write: str,
) -> None:
    admin = control_plane.admin
    namespace = namespace or unique_name("tenant-x")
    admin.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}])
    obj = secret(unique_name("gpuclass-license-where"), namespace, labels=MANAGED)
    name = obj["metadata"]["name"]

    def attempt() -> RawObject:
        return reconciler.create(obj) if write == "create" else _server_side_apply(reconciler, obj)

    if allowed:
        stored = attempt()
        obj["data"]["gridd.conf"] = "RmVhdHVyZVR5cGU9NAo="
        assert (
            _server_side_apply(reconciler, obj)["data"]["gridd.conf"] == obj["data"]["gridd.conf"]
        )
        assert reconciler.delete(stored) is True
        return
    with pytest.raises(ApiError) as info:
        attempt()
    assert info.value.status_code == 403
    assert "tenant namespaces" in info.value.body["message"]
    assert admin.get("v1", "Secret", name, namespace=namespace) is None
    planted = admin.create(
        obj
    )  # a labelled copy outside the tenants: not the reconciler's to delete
    with pytest.raises(ApiError) as info:
        reconciler.delete(planted)
    assert info.value.status_code == 403
    admin.delete(planted)


def _metadata(key: str, value: object) -> Callable[[RawObject], RawObject]:
    def change(obj: RawObject) -> RawObject:
        changed = copy.deepcopy(obj)
        changed["metadata"][key] = value
        return changed

    return change


@pytest.mark.parametrize(
    "shape",
    [
        pytest.param(
            _metadata(
                "ownerReferences",
                [
                    {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "name": "gone",
                        "uid": "00000000-0000-0000-0000-000000000001",
                    }
                ],
            ),
            id="owner-reference",
        ),
        pytest.param(_metadata("finalizers", ["example.com/hold"]), id="finalizer"),
        pytest.param(_with("immutable", True), id="immutable"),
    ],
)
def test_reconciler_cannot_make_a_copy_outlive_or_resist_it(
    control_plane: ControlPlane, reconciler: Api, shape: Callable[[RawObject], RawObject]
) -> None:
    """No ownerReferences (the garbage collector acts on them), no finalizers (the tenant's
    namespace could never finish deleting), no immutable (the copy could never follow its
    source): refused on create, on update and through server-side apply."""
    namespace = unique_name("tenant-vap")
    control_plane.admin.apply(
        [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}]
    )
    good = secret(unique_name("gpuclass-license-shape"), namespace, labels=MANAGED)
    for write in (reconciler.create, lambda o: _server_side_apply(reconciler, o)):
        with pytest.raises(ApiError) as info:
            write(shape(good))
        assert info.value.status_code == 403
        assert "ownerReferences, finalizers or immutable" in info.value.body["message"]
    stored = reconciler.create(good)
    changed = shape(stored)
    with pytest.raises(ApiError) as info:
        reconciler.call("PUT", reconciler.object_path(changed), body=changed)
    assert info.value.status_code == 403
    assert reconciler.delete(stored) is True
