"""Admission decisions rendered as AdmissionReview responses (docs/contract.md section 3), and the review envelope."""

from __future__ import annotations

import base64
import json
from typing import Any

import orjson
import pytest

from gpuclass.shared.cli.reviewcmd import offline_catalog
from gpuclass.shared.core.admission.decisions import (
    Allowed,
    Denied,
    denial_message,
    encode_response,
    render_response,
)
from gpuclass.shared.core.admission.review import POD, VMI, MalformedReview, review
from gpuclass.shared.core.base.causes import Cause, CauseCode, clip_warning, forbidden, invalid
from gpuclass.shared.core.base.fieldpath import FieldPath
from gpuclass.shared.core.status.catalog import Catalog, Policy
from tests.conftest import OBJECTS

V1 = "admission.k8s.io/v1"
V1BETA1 = "admission.k8s.io/v1beta1"
OPS = ({"op": "add", "path": "/spec/tolerations", "value": [{"key": "a", "operator": "Exists"}]},)


def render(decision: Allowed | Denied, api_version: str = V1, uid: str = "uid-1") -> dict[str, Any]:
    return render_response(decision, uid=uid, api_version=api_version)


@pytest.mark.parametrize("api_version", [V1, V1BETA1])
def test_envelope_echoes_api_version_and_copies_uid(api_version: str) -> None:
    rendered = render(Allowed(), api_version, uid="7d1f-uid")
    assert rendered == {
        "apiVersion": api_version,
        "kind": "AdmissionReview",
        "response": {"uid": "7d1f-uid", "allowed": True},
    }


def test_no_patch_type_without_operations() -> None:
    response = render(Allowed((), ("w",)))["response"]
    assert "patchType" not in response and "patch" not in response
    assert response["warnings"] == ["w"]


def test_patch_is_base64_json_of_the_operations() -> None:
    response = render(Allowed(OPS))["response"]
    assert response["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(response["patch"])) == list(OPS)
    assert "warnings" not in response


@pytest.mark.parametrize(
    ("causes", "code", "reason"),
    [
        pytest.param((invalid(FieldPath.of("a"), "x"),), 422, "Invalid", id="one-invalid"),
        pytest.param((forbidden(FieldPath.of("a"), "x"),), 403, "Forbidden", id="one-forbidden"),
        pytest.param(
            (forbidden(FieldPath.of("a"), "x"), forbidden(FieldPath.of("b"), "y")),
            403,
            "Forbidden",
            id="all-forbidden",
        ),
        pytest.param(
            (forbidden(FieldPath.of("a"), "x"), invalid(FieldPath.of("b"), "y")),
            422,
            "Invalid",
            id="any-invalid-wins",
        ),
        pytest.param(
            (invalid(FieldPath.of("a"), "x"), forbidden(FieldPath.of("b"), "y")),
            422,
            "Invalid",
            id="order-does-not-matter",
        ),
    ],
)
def test_denial_code(causes: tuple[Cause, ...], code: int, reason: str) -> None:
    decision = Denied(causes)
    assert decision.code == code
    response = render(decision)["response"]
    assert response["allowed"] is False
    assert (response["status"]["code"], response["status"]["reason"]) == (code, reason)
    assert "patchType" not in response and "patch" not in response


def test_denial_message_and_details_name_every_cause_with_its_path() -> None:
    causes = (
        invalid(FieldPath.of("spec", "a"), "must be x", code=CauseCode.FIELD_VALUE_INVALID),
        forbidden(FieldPath.of("spec", "b"), "is not allowed", code=CauseCode.NOT_ENTITLED),
        invalid(FieldPath(), "whole object is wrong"),
    )
    status = render(Denied(causes))["response"]["status"]
    assert status["message"] == "spec.a: must be x; spec.b: is not allowed; whole object is wrong"
    assert status["details"]["causes"] == [
        {"field": "spec.a", "message": "must be x", "reason": "FieldValueInvalid"},
        {"field": "spec.b", "message": "is not allowed", "reason": "NotEntitled"},
        {"field": "", "message": "whole object is wrong", "reason": "Invalid"},
    ]


@pytest.mark.parametrize(
    ("count", "suffix"),
    [
        pytest.param(1, None, id="one"),
        pytest.param(20, None, id="twenty-all-listed"),
        pytest.param(21, "; and 1 more", id="twenty-one"),
        pytest.param(45, "; and 25 more", id="forty-five"),
    ],
)
def test_after_twenty_causes_and_n_more(count: int, suffix: str | None) -> None:
    causes = tuple(invalid(FieldPath.of(f"f{i}"), f"m{i}") for i in range(count))
    status = render(Denied(causes))["response"]["status"]
    listed = "; ".join(f"f{i}: m{i}" for i in range(min(count, 20)))
    assert status["message"] == listed + (suffix or "")
    assert denial_message(causes) == status["message"]
    assert [c["field"] for c in status["details"]["causes"]] == [
        f"f{i}" for i in range(min(count, 20))
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("short", "short", id="short"),
        pytest.param("x" * 119, "x" * 119, id="119-kept"),
        pytest.param("x" * 120, "x" * 116 + "...", id="120-clipped"),
        pytest.param("y" * 500, "y" * 116 + "...", id="500-clipped"),
    ],
)
def test_clip_warning(text: str, expected: str) -> None:
    assert clip_warning(text) == expected
    assert len(clip_warning(text)) < 120


def test_warnings_clipped_and_deduplicated_in_order() -> None:
    long_a = "a" * 200
    long_a2 = "a" * 180  # different text, same first 116 characters
    decision = Allowed((), ("second", "first", "second", long_a, long_a2, "first"))
    warnings = render(decision)["response"]["warnings"]
    assert warnings == ["second", "first", "a" * 116 + "..."]
    assert all(len(w) < 120 for w in warnings)


def test_denial_carries_its_warnings() -> None:
    response = render(Denied((invalid(FieldPath.of("a"), "x"),), ("careful", "careful")))[
        "response"
    ]
    assert response["warnings"] == ["careful"]


def test_encode_response_is_json_with_a_trailing_newline() -> None:
    rendered = render(Allowed(OPS, ("w",)))
    data = encode_response(rendered)
    assert data.endswith(b"\n")
    assert orjson.loads(data) == rendered


# The envelope: what is not an AdmissionReview is a MalformedReview, never a denial.

CATALOG = offline_catalog(OBJECTS, Policy(vgpu_entitled=True))


def body(request: Any = None, **envelope: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"apiVersion": V1, "kind": "AdmissionReview"}
    if request is not None:
        out["request"] = request
    out.update(envelope)
    return out


def req(
    kind: str = "VirtualMachineInstance", group: str = "kubevirt.io", **fields: Any
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "uid": "u-1",
        "kind": {"group": group, "version": "v1", "kind": kind},
        "operation": "CREATE",
        "namespace": "tenant-a",
        "object": {"metadata": {"name": "vm"}, "spec": {}},
    }
    out.update(fields)
    return out


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        pytest.param([], "body must be a JSON object", id="list"),
        pytest.param("x", "body must be a JSON object", id="string"),
        pytest.param(None, "body must be a JSON object", id="null"),
        pytest.param({}, "apiVersion must be one of", id="empty-object"),
        pytest.param(
            body(req(), apiVersion="admission.k8s.io/v2"),
            "apiVersion must be one of",
            id="unknown-version",
        ),
        pytest.param(
            body(req(), kind="Review"),
            "kind must be AdmissionReview (got 'Review')",
            id="wrong-kind",
        ),
        pytest.param(body(), "request: required", id="no-request"),
        pytest.param(body("x"), "request: required", id="request-not-object"),
        pytest.param(body(req(uid="")), "request.uid: required", id="empty-uid"),
        pytest.param(body(req(uid=5)), "request.uid: required", id="uid-not-string"),
        pytest.param(
            body({**req(), "kind": "VirtualMachineInstance"}),
            "request.kind: required, an object with group, version and kind "
            "(got 'VirtualMachineInstance')",
            id="kind-not-object",
        ),
        pytest.param(
            body(req(kind="Deployment", group="apps")),
            "does not admit apps/Deployment",
            id="unknown-kind",
        ),
        pytest.param(
            body(req(kind="Pod", group="kubevirt.io")),
            "does not admit kubevirt.io/Pod",
            id="kind-in-wrong-group",
        ),
    ],
)
def test_malformed_review(payload: Any, message: str) -> None:
    with pytest.raises(MalformedReview) as info:
        review(payload, CATALOG)
    assert message in str(info.value)


def test_endpoint_expecting_another_kind_refuses_the_review() -> None:
    with pytest.raises(
        MalformedReview,
        match=r"this endpoint admits core/Pod, not kubevirt\.io/VirtualMachineInstance",
    ):
        review(body(req()), CATALOG, expect=POD)


def test_endpoint_names_the_group_it_received() -> None:
    """Same kind, wrong group: the message must not read "admits X, not X"."""
    with pytest.raises(MalformedReview) as info:
        review(body(req(group="example.io")), CATALOG, expect=VMI)
    assert (
        "admits kubevirt.io/VirtualMachineInstance, not example.io/VirtualMachineInstance"
        in str(info.value)
    )


@pytest.mark.parametrize("api_version", [V1, V1BETA1])
def test_review_echoes_api_version_and_uid(api_version: str) -> None:
    rendered = review(body(req(uid="abc"), apiVersion=api_version), CATALOG, expect=VMI)
    assert rendered == {
        "apiVersion": api_version,
        "kind": "AdmissionReview",
        "response": {"uid": "abc", "allowed": True},
    }


def gpuclass_request(obj: Any, operation: str = "CREATE", old: Any = None) -> dict[str, Any]:
    return body(
        req(
            "GPUClass",
            "cozystack.io",
            object=obj,
            operation=operation,
            oldObject=old,
            namespace=None,
        )
    )


def test_gpuclass_review_invalid_is_422_with_every_cause() -> None:
    obj = {
        "metadata": {"name": "Bad"},
        "spec": {
            "vendor": "v",
            "model": "m",
            "mode": "mig",
            "source": {"devicePlugin": {"resourceName": "x"}},
        },
    }
    response = review(gpuclass_request(obj), CATALOG)["response"]
    assert response["status"]["code"] == 422
    assert [c["field"] for c in response["status"]["details"]["causes"]] == [
        "metadata.name",
        "spec.mode",
        "spec.source.devicePlugin.resourceName",
    ]


def test_gpuclass_review_warns_about_a_shared_resource() -> None:
    obj = {
        "metadata": {"name": "again"},
        "spec": {
            "vendor": "v",
            "model": "m",
            "mode": "passthrough",
            "source": {"devicePlugin": {"resourceName": "example.com/whole-gpu"}},
        },
    }
    response = review(gpuclass_request(obj), CATALOG)["response"]
    assert response["allowed"] is True
    assert any(
        "example-whole-gpu already uses example.com/whole-gpu" in w for w in response["warnings"]
    )


def test_gpuclass_delete_allowed() -> None:
    assert review(gpuclass_request(None, "DELETE"), CATALOG)["response"] == {
        "uid": "u-1",
        "allowed": True,
    }


LAUNCHER_USER = {"username": "system:serviceaccount:cozy-kubevirt:kubevirt-controller"}


def launcher_request(
    selection: str,
    *,
    user: dict[str, str] = LAUNCHER_USER,
    labelled: bool = True,
    tolerations: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "generateName": "virt-launcher-",
        "annotations": {"gpu.cozystack.io/classes": selection},
    }
    if labelled:
        meta["labels"] = {"kubevirt.io": "virt-launcher"}
    spec: dict[str, Any] = {"containers": [{"name": "compute"}]}
    if tolerations is not None:
        spec["tolerations"] = tolerations
    pod = {"metadata": meta, "spec": spec}
    return body(req("Pod", "", object=pod, userInfo=user))


TOL = {"key": "gpu.example.com/dedicated", "operator": "Exists", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("request_body", "operations", "warned"),
    [
        pytest.param(
            launcher_request('[{"className": "example-whole-gpu"}]'),
            [{"op": "add", "path": "/spec/tolerations", "value": [TOL]}],
            False,
            id="launcher-gets-class-tolerations",
        ),
        pytest.param(
            launcher_request('[{"className": "example-whole-gpu"}]', user={"username": "me"}),
            [],
            False,
            id="other-user",
        ),
        pytest.param(
            launcher_request('[{"className": "example-whole-gpu"}]', labelled=False),
            [],
            False,
            id="not-a-launcher",
        ),
        pytest.param(
            launcher_request("not json"), [], True, id="unreadable-selection-never-refused"
        ),
        pytest.param(
            launcher_request('[{"className": "no-such"}]'),
            [],
            True,
            id="unknown-class-never-refused",
        ),
        pytest.param(
            launcher_request('[{"className": "example-whole-gpu"}]', tolerations=[TOL]),
            [],
            False,
            id="identical-toleration-not-repeated",
        ),
        pytest.param(
            launcher_request(
                '[{"className": "example-whole-gpu"}, {"className": "example-whole-gpu", "count": 2}]',
                tolerations=[{"key": "other", "operator": "Exists"}],
            ),
            [{"op": "add", "path": "/spec/tolerations/-", "value": TOL}],
            False,
            id="existing-kept-class-toleration-once",
        ),
    ],
)
def test_launcher_pod(request_body: dict[str, Any], operations: list[Any], warned: bool) -> None:
    response = review(request_body, CATALOG, expect=POD)["response"]
    assert response["allowed"] is True
    assert (
        json.loads(base64.b64decode(response["patch"])) if "patch" in response else []
    ) == operations
    assert bool(response.get("warnings")) is warned


def test_empty_catalog_still_answers() -> None:
    rendered = review(
        body(
            req(
                object={
                    "metadata": {
                        "annotations": {"gpu.cozystack.io/classes": '[{"className": "a"}]'}
                    }
                }
            )
        ),
        Catalog(),
    )
    assert rendered["response"]["status"]["code"] == 403
