"""The chart's ValidatingAdmissionPolicies, rendered by Helm and judged offline.

Each policy's CEL is evaluated with cel-python on the requests the threat model names
(docs/operations.md, Threat model): what the policy must refuse and what it must let through.
tests/e2e/test_e2e_chart_policies.py and tests/e2e/test_e2e_chart.py show the same decisions on a real
kube-apiserver; these cases run everywhere and cover the values that change the policies.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.chart_helpers import NAMESPACE, of_kind, one, render_objects

RawObject = dict[str, Any]
LABEL = "gpu.cozystack.io/vgpu"
FINALIZER = "gpu.cozystack.io/in-use"
RECONCILER = f"system:serviceaccount:{NAMESPACE}:gpuclass-reconciler"
HELM_CONTROLLER = "system:serviceaccount:cozy-fluxcd:helm-controller"
COPY_DATA = {"client_configuration_token.tok": "dG9r", "gridd.conf": "RmVhdHVyZVR5cGU9MQo="}
MANAGED = {"app.kubernetes.io/managed-by": "gpuclass"}


def _policy(objects: list[RawObject], suffix: str) -> RawObject:
    [policy] = [
        o
        for o in of_kind(objects, "ValidatingAdmissionPolicy")
        if o["metadata"]["name"].endswith(suffix)
    ]
    return policy


def _cel(expression: str, activation: RawObject) -> Any:
    celpy = pytest.importorskip("celpy")
    env = celpy.Environment()
    return env.program(env.compile(expression)).evaluate(celpy.json_to_cel(activation))


def _admitted(policy: RawObject, activation: RawObject) -> bool | None:
    """None when the policy does not apply (a match condition is false), else its verdict."""
    spec = policy["spec"]
    if not all(bool(_cel(c["expression"], activation)) for c in spec.get("matchConditions", [])):
        return None
    variables: RawObject = {}
    for variable in spec.get("variables", []):
        variables[variable["name"]] = _cel(
            variable["expression"], {**activation, "variables": variables}
        )
    scope = {**activation, "variables": variables}
    return all(bool(_cel(v["expression"], scope)) for v in spec["validations"])


# -- the entitlement label -----------------------------------------------------------------------


def _namespace(labels: dict[str, str] | None) -> RawObject | None:
    if labels is None:
        return None
    meta: RawObject = {"name": "tenant-a"}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def _namespace_write(
    user: str, groups: list[str], new: dict[str, str], old: dict[str, str] | None
) -> RawObject:
    return {
        "request": {
            "operation": "CREATE" if old is None else "UPDATE",
            "name": "tenant-a",
            "userInfo": {"username": user, "groups": groups},
        },
        "object": _namespace(new),
        "oldObject": _namespace(old),
    }


ON = {LABEL: "true"}
TENANT = ("tenant-a-admin", ["tenants", "system:authenticated"])
ADMIN = ("kubernetes-admin", ["system:masters", "system:authenticated"])
FLUX = (HELM_CONTROLLER, ["system:serviceaccounts", "system:serviceaccounts:cozy-fluxcd"])


@pytest.mark.parametrize(
    ("who", "new", "old", "verdict"),
    [
        pytest.param(TENANT, ON, {}, False, id="tenant-sets-the-label"),
        pytest.param(TENANT, {}, ON, False, id="tenant-removes-the-label"),
        pytest.param(TENANT, {LABEL: "false"}, ON, False, id="tenant-changes-the-label"),
        pytest.param(TENANT, ON, None, False, id="tenant-creates-an-entitled-namespace"),
        pytest.param(TENANT, {"team": "ml"}, {}, None, id="tenant-sets-another-label"),
        pytest.param(TENANT, {**ON, "team": "ml"}, ON, None, id="tenant-keeps-the-label"),
        pytest.param(TENANT, {}, None, None, id="tenant-creates-a-plain-namespace"),
        pytest.param(FLUX, ON, {}, True, id="helm-controller-entitles"),
        pytest.param(FLUX, ON, None, True, id="helm-controller-creates-entitled"),
        pytest.param(ADMIN, {}, ON, True, id="cluster-admin-withdraws"),
    ],
)
def test_entitlement_label_policy_decisions(
    who: tuple[str, list[str]],
    new: dict[str, str],
    old: dict[str, str] | None,
    verdict: bool | None,
) -> None:
    policy = _policy(render_objects(), "-entitlement-label")
    assert _admitted(policy, _namespace_write(*who, new, old)) is verdict


def test_entitlement_label_identities_are_values() -> None:
    values = {"entitlementLabel": {"users": ["ops@example.com"], "groups": ["platform-ops"]}}
    policy = _policy(render_objects(values), "-entitlement-label")
    assert _admitted(policy, _namespace_write("ops@example.com", [], ON, {})) is True
    assert _admitted(policy, _namespace_write("x", ["platform-ops"], ON, {})) is True
    assert _admitted(policy, _namespace_write(*FLUX, ON, {})) is False  # no longer listed
    assert _admitted(policy, _namespace_write(*ADMIN, ON, {})) is False
    binding = one(
        render_objects(values), "ValidatingAdmissionPolicyBinding", policy["metadata"]["name"]
    )
    assert binding["spec"] == {
        "policyName": policy["metadata"]["name"],
        "validationActions": ["Deny"],
    }
    off = render_objects({"entitlementLabel": {"guard": False}})
    assert not [o for o in off if o["metadata"]["name"].endswith("-entitlement-label")]


def test_entitlement_label_policy_matches_namespace_writes_only() -> None:
    policy = _policy(render_objects(), "-entitlement-label")
    [rule] = policy["spec"]["matchConstraints"]["resourceRules"]
    assert (rule["apiGroups"], rule["resources"]) == ([""], ["namespaces"])
    assert sorted(rule["operations"]) == ["CREATE", "UPDATE"]
    assert policy["spec"]["failurePolicy"] == "Fail"


# -- the reconciler and GPUClasses ---------------------------------------------------------------


def _gpuclass(
    *,
    finalizers: list[str] | None = None,
    labels: dict[str, str] | None = None,
    spec: RawObject | None = None,
    owners: list[RawObject] | None = None,
) -> RawObject:
    meta: RawObject = {"name": "a100"}
    for key, value in (("finalizers", finalizers), ("labels", labels), ("ownerReferences", owners)):
        if value:
            meta[key] = value
    return {
        "apiVersion": "cozystack.io/v1alpha1",
        "kind": "GPUClass",
        "metadata": meta,
        "spec": spec or {"vendor": "nvidia", "model": "a100", "mode": "passthrough"},
    }


def _class_write(
    operation: str, new: RawObject | None, old: RawObject | None, user: str = RECONCILER
) -> RawObject:
    return {
        "request": {"operation": operation, "name": "a100", "userInfo": {"username": user}},
        "object": new,
        "oldObject": old,
    }


OWNER = {"apiVersion": "v1", "kind": "Namespace", "name": "gone", "uid": "1"}
KEEP = "example.com/keep"


@pytest.mark.parametrize(
    ("operation", "new", "old", "verdict"),
    [
        pytest.param("UPDATE", _gpuclass(finalizers=[FINALIZER]), _gpuclass(), True, id="add-in-use"),
        pytest.param("UPDATE", _gpuclass(), _gpuclass(finalizers=[FINALIZER]), True, id="remove-in-use"),
        pytest.param(
            "UPDATE", _gpuclass(finalizers=[KEEP, FINALIZER]), _gpuclass(finalizers=[KEEP]), True,
            id="add-in-use-beside-another",
        ),
        pytest.param("UPDATE", _gpuclass(finalizers=[KEEP]), _gpuclass(), False, id="add-a-foreign-finalizer"),
        pytest.param(
            "UPDATE", _gpuclass(finalizers=[FINALIZER]), _gpuclass(finalizers=[KEEP]), False,
            id="swap-a-foreign-finalizer",
        ),
        pytest.param("UPDATE", _gpuclass(labels={"tier": "free"}), _gpuclass(), False, id="label"),
        pytest.param(
            "UPDATE", _gpuclass(spec={"vendor": "x", "model": "y", "mode": "vgpu"}), _gpuclass(),
            False, id="spec",
        ),
        pytest.param("UPDATE", _gpuclass(owners=[OWNER]), _gpuclass(), False, id="owner-reference"),
        pytest.param("CREATE", _gpuclass(), None, False, id="create"),
        pytest.param("DELETE", None, _gpuclass(), False, id="delete"),
    ],
)  # fmt: skip
def test_gpuclass_finalizer_policy_decisions(
    operation: str, new: RawObject | None, old: RawObject | None, verdict: bool
) -> None:
    policy = _policy(render_objects(), "-in-use-finalizer")
    assert _admitted(policy, _class_write(operation, new, old)) is verdict


def test_gpuclass_finalizer_policy_leaves_the_hoster_alone() -> None:
    policy = _policy(render_objects(), "-in-use-finalizer")
    hoster = _class_write("UPDATE", _gpuclass(labels={"tier": "x"}), _gpuclass(), "hoster")
    assert _admitted(policy, hoster) is None


def test_the_reconciler_has_no_verb_that_creates_or_deletes_gpuclasses() -> None:
    role = one(render_objects(), "ClusterRole", "gpuclass-reconciler")
    verbs = {
        verb
        for rule in role["rules"]
        if "cozystack.io" in rule["apiGroups"] and "gpuclasses" in rule["resources"]
        for verb in rule["verbs"]
    }
    assert verbs & {"create", "delete", "deletecollection", "*"} == set()


# -- license copies: where and what ----------------------------------------------------------------


def _copy_write(
    operation: str,
    namespace: str,
    *,
    new_extra: RawObject | None = None,
    meta: RawObject | None = None,
) -> RawObject:
    def secret() -> RawObject:
        metadata: RawObject = {"name": "gpuclass-license-a100", "namespace": namespace,
                               "labels": dict(MANAGED), **(meta or {})}  # fmt: skip
        return {"apiVersion": "v1", "kind": "Secret", "metadata": metadata, "type": "Opaque",
                "data": dict(COPY_DATA), **(new_extra or {})}  # fmt: skip

    return {
        "request": {
            "operation": operation,
            "name": "gpuclass-license-a100",
            "namespace": namespace,
            "userInfo": {"username": RECONCILER},
        },
        "object": None if operation == "DELETE" else secret(),
        "oldObject": None if operation == "CREATE" else secret(),
    }


@pytest.mark.parametrize(
    ("activation", "verdict"),
    [
        pytest.param(_copy_write("CREATE", "tenant-a"), True, id="create-in-a-tenant"),
        pytest.param(_copy_write("CREATE", "tenant-root"), True, id="create-in-tenant-root"),
        pytest.param(_copy_write("UPDATE", "tenant-a-b"), True, id="update-in-a-child-tenant"),
        pytest.param(_copy_write("DELETE", "tenant-a"), True, id="delete-in-a-tenant"),
        pytest.param(_copy_write("CREATE", "kube-system"), False, id="create-in-kube-system"),
        pytest.param(_copy_write("CREATE", "cozy-system"), False, id="create-in-cozy-system"),
        pytest.param(_copy_write("UPDATE", "cozy-system"), False, id="update-in-cozy-system"),
        pytest.param(_copy_write("DELETE", "default"), False, id="delete-in-default"),
        pytest.param(_copy_write("CREATE", "tenants"), False, id="tenants-is-not-a-tenant"),
        pytest.param(
            _copy_write("CREATE", "tenant-a", meta={"ownerReferences": [OWNER]}), False,
            id="owner-reference",
        ),
        pytest.param(
            _copy_write("UPDATE", "tenant-a", meta={"finalizers": ["example.com/x"]}), False,
            id="finalizer",
        ),
        pytest.param(
            _copy_write("CREATE", "tenant-a", new_extra={"immutable": True}), False, id="immutable"
        ),
        pytest.param(
            _copy_write("CREATE", "tenant-a", new_extra={"immutable": False}), True,
            id="immutable-false",
        ),
    ],
)  # fmt: skip
def test_license_copy_policy_places_and_shapes(activation: RawObject, verdict: bool) -> None:
    policy = _policy(render_objects(), "-licence-copies")
    assert _admitted(policy, activation) is verdict


# -- the webhook's configurations -------------------------------------------------------------------


def test_ca_bundle_policy_pins_owner_references_and_finalizers() -> None:
    """Offline CEL cannot read the optional syntax this policy uses; the real-API-server test
    (tests/e2e/test_e2e_chart_policies.py) shows both refusals. Here: both fields are compared."""
    policy = _policy(render_objects(), "-webhook-cabundle")
    text = " ".join(v["expression"] for v in policy["spec"]["validations"])
    for field in ("labels", "annotations", "ownerReferences", "finalizers"):
        assert f"object.metadata.?{field}" in text and f"oldObject.metadata.?{field}" in text
