"""The GPUClass CRD's schema and CEL rules, on a real API server, against the webhook.

Only the CRD is registered (no webhook). Every GPUClass golden fixture (CREATE and
UPDATE: the old object is created first, then updated to the new one) and a few
derived cases are sent with `fieldValidation=Strict`, and the API server's verdict is
compared with the webhook's: `response.allowed` of the fixture, or the same
validation code (`shared.core.model.validation`) for derived cases. Where the CRD cannot express
a rule the verdicts may differ; each such case is in DIVERGENCES with why (see
docs/cel-coverage.md). Every field the API server names in a refusal must be one the
webhook names too: the webhook, which reports everything at once, never misses a
cause the cluster would find.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpuclass.shared.core.base import k8s
from gpuclass.shared.core.model.validation import validate_class
from tests.controlplane import ControlPlane, status_causes, unique_name
from tests.controlplane.api import ApiError, RawObject

pytestmark = pytest.mark.controlplane

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "admission"
GPUCLASSES = "/apis/cozystack.io/v1alpha1/gpuclasses"
STRICT = {"fieldValidation": "Strict"}
NOT_CHECKED = "some validation rules were not checked"


@dataclass(frozen=True)
class Divergence:
    """A case where the API server's verdict legitimately differs from the webhook's."""

    api_allowed: bool
    why: str


# Verdict mismatches the CRD cannot avoid. Every golden fixture agrees today (unknown
# fields are refused under strict field validation); what remains is a JSON detail
# lost before any rule runs, and a bound the CRD needs for its CEL cost budget.
DIVERGENCES: dict[str, Divergence] = {
    "derived-max-count-float": Divergence(
        api_allowed=True,
        why="the API server decodes the integral JSON number 2.0 as the integer 2 before "
        "schema or CEL see it, and stores 2; the webhook reads raw JSON and refuses 2.0, "
        "but behind the API server it is sent 2",
    ),
    "derived-tolerations-over-64": Divergence(
        api_allowed=False,
        why="the CRD caps tolerations at 64 items (maxItems) so the CEL cost estimate of the "
        "per-item rules stays within budget; the webhook has no such cap",
    ),
}


@dataclass(frozen=True)
class Case:
    id: str
    obj: RawObject
    old: RawObject | None
    webhook_allowed: bool


def _fixture_cases() -> Iterator[Case]:
    for folder in sorted(FIXTURES.glob("gpuclass-*")):
        request = json.loads((folder / "request.json").read_text())["request"]
        if request["operation"] not in ("CREATE", "UPDATE"):
            continue
        response = json.loads((folder / "response.json").read_text())["response"]
        yield Case(folder.name, request["object"], request.get("oldObject"), response["allowed"])


def _class(**spec: Any) -> RawObject:
    body = {
        "vendor": "example",
        "model": "example-model",
        "mode": "passthrough",
        "source": {"devicePlugin": {"resourceName": "example.com/derived"}},
        **spec,
    }
    return {
        "apiVersion": "cozystack.io/v1alpha1",
        "kind": "GPUClass",
        "metadata": {"name": "derived"},
        "spec": body,
    }


VGPU = {"mode": "vgpu", "profile": "example-profile", "memory": "16Gi"}
LICENSED = _class(**VGPU, license={"secretName": "example-vgpu-license", "featureType": 4})
DOMAIN_255 = ".".join(["a" * 63] * 4)
TOLERATIONS = json.loads((FIXTURES / "gpuclass-5-toleration-rules" / "request.json").read_text())[
    "request"
]["object"]["spec"]["tolerations"]


def _derived(id_: str, obj: RawObject, old: RawObject | None = None) -> Case:
    """A case beyond the fixtures; the webhook's verdict comes from the same validator."""
    return Case(f"derived-{id_}", obj, old, not validate_class(obj, old=old).causes)


def _updated(old: RawObject, **spec: Any) -> RawObject:
    new = copy.deepcopy(old)
    new["spec"].update(spec)
    for key in [k for k, v in spec.items() if v is None]:
        del new["spec"][key]
    return new


DERIVED = [
    # The toleration fixture fails the schema (enums) before any CEL rule runs: one at a time.
    *(
        _derived(f"toleration-{i}-alone", _class(tolerations=[t]))
        for i, t in enumerate(TOLERATIONS)
    ),
    _derived(
        "toleration-value-not-label-value", _class(tolerations=[{"key": "k", "value": "-x-"}])
    ),
    _derived(
        "toleration-key-name-part-64", _class(tolerations=[{"key": "example.com/" + "k" * 64}])
    ),
    _derived("toleration-key-prefix-255", _class(tolerations=[{"key": DOMAIN_255 + "/k"}])),
    _derived(
        "toleration-key-empty-prefix", _class(tolerations=[{"key": "/k", "operator": "Exists"}])
    ),
    _derived(
        "toleration-no-execute-seconds",
        _class(
            tolerations=[
                {"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}
            ]
        ),
    ),
    _derived(
        "tolerations-over-64",
        _class(tolerations=[{"key": f"k{i}", "operator": "Exists"} for i in range(65)]),
    ),
    _derived(
        "resource-name-requests-prefix",
        _class(source={"devicePlugin": {"resourceName": "requests.example.com/gpu"}}),
    ),
    _derived(
        "resource-name-part-64",
        _class(source={"devicePlugin": {"resourceName": "example.com/" + "g" * 64}}),
    ),
    _derived(
        "resource-name-domain-255",
        _class(source={"devicePlugin": {"resourceName": DOMAIN_255 + "/gpu"}}),
    ),
    _derived(
        "resource-name-kubernetes-io-subdomain",
        _class(source={"devicePlugin": {"resourceName": "gpu.kubernetes.io/x"}}),
    ),
    _derived("max-count-float", _class(maxCount=2.0)),
    _derived("memory-negative", _class(memory="-1Gi")),
    _derived("memory-exponent", _class(memory="1e3")),
    _derived("license-default-feature-type", _class(**VGPU, license={"secretName": "lic"})),
    _derived("update-vendor", _updated(LICENSED, vendor="other"), LICENSED),
    _derived(
        "update-mode", _updated(LICENSED, mode="passthrough", profile=None, license=None), LICENSED
    ),
    _derived("update-profile", _updated(LICENSED, profile="other-profile"), LICENSED),
    _derived("update-memory-removed", _updated(LICENSED, memory=None), LICENSED),
    _derived(
        "update-feature-type",
        _updated(LICENSED, license={"secretName": "example-vgpu-license"}),
        LICENSED,
    ),
    _derived(
        "update-mutable-fields",
        _updated(
            LICENSED,
            displayName="New",
            maxCount=2,
            tolerations=[{"key": "k", "operator": "Exists"}],
        ),
        LICENSED,
    ),
]
CASES = [*_fixture_cases(), *DERIVED]


@dataclass(frozen=True)
class ApiVerdict:
    allowed: bool
    fields: frozenset[str]
    message: str


def _named(case: Case) -> tuple[RawObject, RawObject | None]:
    """Copies with a name unique to this run; an invalid name stays: it is under test."""
    obj, old = copy.deepcopy(case.obj), copy.deepcopy(case.old)
    name = obj["metadata"]["name"]
    if k8s.dns_label_error(name) is None:
        fresh = unique_name(name[:40])
        obj["metadata"]["name"] = fresh
        if old is not None:
            old["metadata"]["name"] = fresh
    return obj, old


def _refused_fields(error: ApiError) -> frozenset[str]:
    fields = {c["field"] for c in status_causes(error) if c.get("field") and c["field"] != "<nil>"}
    fields |= set(re.findall(r'unknown field "([^"]+)"', str(error)))  # strict decoding
    return frozenset(fields)


def submit(plane: ControlPlane, case: Case) -> ApiVerdict:
    """Create (or create the old object, then update to the new one) through the API server."""
    obj, old = _named(case)
    try:
        if old is None:
            plane.admin.call("POST", GPUCLASSES, body=obj, params=STRICT)
        else:
            created = plane.admin.call("POST", GPUCLASSES, body=old, params=STRICT)
            obj["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"]
            plane.admin.call(
                "PUT", f"{GPUCLASSES}/{obj['metadata']['name']}", body=obj, params=STRICT
            )
    except ApiError as error:
        if error.status_code not in (400, 422):  # a refusal, not a broken request
            raise
        if old is not None and "resourceVersion" not in obj["metadata"]:
            raise AssertionError(f"{case.id}: the old object was refused: {error}") from error
        return ApiVerdict(False, _refused_fields(error), str(error))
    return ApiVerdict(True, frozenset(), "")


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in CASES])
def test_crd_verdict_matches_the_webhook(control_plane: ControlPlane, case: Case) -> None:
    verdict = submit(control_plane, case)
    divergence = DIVERGENCES.get(case.id)
    expected = divergence.api_allowed if divergence else case.webhook_allowed
    assert verdict.allowed == expected, (
        f"API server {'accepted' if verdict.allowed else 'refused'}, expected "
        f"{'accepted' if expected else 'refused'} ({divergence.why if divergence else 'as the webhook'}) "
        f"{verdict.message}"
    )
    if divergence is None and not verdict.allowed:
        webhook_fields = {c.field for c in validate_class(case.obj, old=case.old).causes}
        assert verdict.fields, f"the API server named no field: {verdict.message}"
        assert verdict.fields <= webhook_fields, verdict.message


def test_divergences_name_real_cases_that_still_diverge() -> None:
    by_id = {c.id: c for c in CASES}
    for case_id, divergence in DIVERGENCES.items():
        assert case_id in by_id, f"{case_id} is allow-listed but no longer a case"
        assert by_id[case_id].webhook_allowed != divergence.api_allowed, f"{case_id} agrees now"


def test_unknown_fields_are_pruned_unless_validation_is_strict(control_plane: ControlPlane) -> None:
    """Why the comparison uses fieldValidation=Strict: by default the API server drops
    unknown fields with a warning, before any webhook sees the object."""
    obj, _ = _named(next(c for c in CASES if c.id == "gpuclass-5-unknown-spec-field"))
    response = control_plane.admin.request("POST", GPUCLASSES, body=obj)
    assert response.status_code == 201, response.text
    assert "replicas" not in response.json()["spec"]
    warning = response.headers.get("warning", "")
    assert "unknown field" in warning and "spec.replicas" in warning, warning


def test_cel_rules_wait_for_schema_errors(control_plane: ControlPlane) -> None:
    """The API server runs CEL rules only once the schema passes, so it names fewer causes
    than the webhook at once (tolerations 0-2 here are CEL rules; 3-4 are schema)."""
    case = next(c for c in CASES if c.id == "gpuclass-5-toleration-rules")
    verdict = submit(control_plane, case)
    assert not verdict.allowed
    assert NOT_CHECKED in verdict.message
    assert verdict.fields == {
        "spec.tolerations[3].operator",
        "spec.tolerations[3].effect",
        "spec.tolerations[4].key",
        "spec.tolerations[4].value",
    }
