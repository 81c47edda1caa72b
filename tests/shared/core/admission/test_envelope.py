"""The AdmissionReview envelope: every field a rule reads is type-checked, a wrong type is a client error.

Contract section 3: a body that is not an AdmissionReview gets a JSON 400, never a 500. The
table holds the wrong types that once crashed the webhook (`"operation": []`) and their
neighbours; the property puts any JSON value in each envelope field of a real review.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from gpuclass.shared.cli.reviewcmd import offline_catalog
from gpuclass.shared.core.admission.envelope import MAX_REVIEW_VALUES, too_many_values
from gpuclass.shared.core.admission.review import MalformedReview, review
from gpuclass.shared.core.status.catalog import Policy
from tests.conftest import OBJECTS

ROOT = Path(__file__).resolve().parents[4]
CATALOG = offline_catalog(OBJECTS, Policy(vgpu_entitled=True))
REVIEWS = {
    name: json.loads((ROOT / "examples" / "reviews" / f"{name}.json").read_text())
    for name in ("vmi-whole-gpu", "launcher-pod", "gpuclass-invalid")
}


def with_request(example: str, /, **fields: Any) -> dict[str, Any]:
    body = copy.deepcopy(REVIEWS[example])
    body["request"].update(fields)
    return body


WRONG_TYPES = [
    pytest.param("operation", [], "request.operation", id="operation-list"),
    pytest.param("operation", {}, "request.operation", id="operation-object"),
    pytest.param("operation", "PATCH", "request.operation", id="operation-unknown"),
    pytest.param("operation", None, "request.operation", id="operation-missing"),
    pytest.param("uid", 7, "request.uid", id="uid-number"),
    pytest.param("uid", "", "request.uid", id="uid-empty"),
    pytest.param("kind", [], "request.kind", id="kind-list"),
    pytest.param("kind", {"kind": "Pod", "group": 3}, "request.kind", id="kind-group-number"),
    pytest.param("namespace", ["tenant-a"], "request.namespace", id="namespace-list"),
    pytest.param("name", {}, "request.name", id="name-object"),
    pytest.param("userInfo", "admin", "request.userInfo", id="userinfo-string"),
    pytest.param("userInfo", {"username": []}, "request.userInfo", id="username-list"),
    pytest.param("userInfo", {"groups": "a"}, "request.userInfo.groups", id="groups-string"),
    pytest.param("dryRun", "false", "request.dryRun", id="dryrun-string"),
    pytest.param("dryRun", 0, "request.dryRun", id="dryrun-number"),
    pytest.param("object", [], "request.object", id="object-list"),
    pytest.param("oldObject", "x", "request.oldObject", id="oldobject-string"),
]


@pytest.mark.parametrize("name", list(REVIEWS))
@pytest.mark.parametrize(("field", "value", "path"), WRONG_TYPES)
def test_a_wrong_envelope_type_is_a_malformed_review(
    name: str, field: str, value: object, path: str
) -> None:
    body = with_request(name, **{field: value})
    if value is None:
        del body["request"][field]
    with pytest.raises(MalformedReview, match=rf"^{path.replace('.', '[.]')}\b"):
        review(body, CATALOG)


@pytest.mark.parametrize("name", list(REVIEWS))
def test_null_optional_fields_are_absent_fields(name: str) -> None:
    plain = review(REVIEWS[name], CATALOG)
    nulled = with_request(name, dryRun=None, userInfo=None, name=None, oldObject=None)
    if name != "vmi-whole-gpu":  # its namespace is only request.namespace's fallback
        nulled["request"]["namespace"] = REVIEWS[name]["request"].get("namespace")
    assert review(nulled, CATALOG)["response"]["uid"] == plain["response"]["uid"]


ENVELOPE_FIELDS = ["operation", "uid", "kind", "namespace", "name", "userInfo", "dryRun"]
ENVELOPE_FIELDS += ["object", "oldObject"]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(
    name=st.sampled_from(list(REVIEWS)),
    field=st.sampled_from(ENVELOPE_FIELDS),
    value=json_values,
)
def test_any_value_in_any_envelope_field_is_answered_or_refused(
    name: str, field: str, value: object
) -> None:
    try:
        rendered = review(with_request(name, **{field: value}), CATALOG)
    except MalformedReview:
        event(f"{field}: malformed")
        return
    event(f"{field}: answered")
    assert rendered["response"]["uid"] == REVIEWS[name]["request"]["uid"] or field == "uid"


def _nested_json(depth: int) -> str:
    return '{"x":' * depth + "{}" + "}" * depth


KINDS = {
    "VirtualMachineInstance": "kubevirt.io",
    "VirtualMachine": "kubevirt.io",
    "Pod": "",
    "GPUClass": "cozystack.io",
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_an_object_nested_as_deep_as_json_allows_is_answered_or_refused(
    kind: str, operation: str
) -> None:
    """orjson parses 1024 levels, Python recursion stops near 1000: between the two a body
    must still get an answer or a client error (400, exit 2), never an unexpected error."""

    deep = _nested_json(1015)  # the envelope adds 4 levels, the template 2: orjson's own limit
    obj = (
        '{"metadata": {"name": "vm", "namespace": "tenant-a", "annotations": '
        '{"gpu.cozystack.io/classes": "[{\\"className\\": \\"example-whole-gpu\\"}]"}}, '
        f'"spec": {{"template": {{"spec": {deep}}}, "domain": {deep}}}}}'
    )
    old = obj if operation == "UPDATE" else "null"
    text = (
        '{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": '
        f'{{"uid": "u", "kind": {{"group": "{KINDS[kind]}", "version": "v1", "kind": "{kind}"}}, '
        f'"operation": "{operation}", "namespace": "tenant-a", "object": {obj}, "oldObject": {old}}}}}'
    )
    body = orjson.loads(text)  # what the webhook parses: orjson accepts it
    try:
        answer = review(body, CATALOG)
    except MalformedReview as exc:
        assert "nests too deeply" in str(exc)
        return
    assert answer["response"]["uid"] == "u"


# Values per review (docs/decisions.md): counted from the bytes (tests/shared/core/base/
# test_jsonsize.py), refused before parsing.


def test_a_review_at_the_limit_passes_and_one_value_more_is_refused() -> None:
    # A list of N numbers counts N: its bracket and a comma before each number but the first.
    at_limit = b"[" + b"0," * (MAX_REVIEW_VALUES - 1) + b"0]"
    assert len(orjson.loads(at_limit)) == MAX_REVIEW_VALUES
    assert too_many_values(at_limit) is None
    over = b"[" + b"0," * MAX_REVIEW_VALUES + b"0]"
    refused = too_many_values(over)
    assert refused is not None
    assert f"more than {MAX_REVIEW_VALUES} JSON values (counted {MAX_REVIEW_VALUES + 1}" in refused


def test_every_example_review_is_far_below_the_limit() -> None:
    for path in (ROOT / "examples" / "reviews").glob("*.json"):
        data = path.read_bytes()
        assert too_many_values(data, limit=MAX_REVIEW_VALUES // 100) is None, path.name
