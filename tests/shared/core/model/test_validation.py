"""GPUClass validation (docs/contract.md section 5), one row per rule: path, message and code of each cause."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpuclass.shared.core.base.causes import MAX_WARNING_CHARS, Cause
from gpuclass.shared.core.model.validation import Verdict, validate_class

Expected = list[tuple[str, str, str]]  # (field path, message substring, code)

MODEL = "FieldValueInvalid"  # shape, type and enum causes (the strict model)
RULE = "Invalid"  # format and cross-field causes
FORBIDDEN = "FieldValueForbidden"  # immutability on UPDATE


def gpuclass(name: str | None = "new-offer", **spec: Any) -> dict[str, Any]:
    """A valid passthrough class; keyword arguments override spec fields (None removes one)."""
    body: dict[str, Any] = {
        "vendor": "example",
        "model": "example-model",
        "mode": "passthrough",
        "source": {"devicePlugin": {"resourceName": "example.com/new-offer"}},
    }
    body.update(spec)
    for key in [k for k, v in body.items() if v is None]:
        del body[key]
    obj: dict[str, Any] = {"apiVersion": "cozystack.io/v1alpha1", "kind": "GPUClass", "spec": body}
    if name is not None:
        obj["metadata"] = {"name": name}
    return obj


VGPU: dict[str, Any] = {"mode": "vgpu", "profile": "example-profile"}
LICENSED: dict[str, Any] = {**VGPU, "license": {"secretName": "example-vgpu-license"}}


def tol(**fields: Any) -> dict[str, Any]:
    return gpuclass(tolerations=[fields])


def assert_causes(causes: tuple[Cause, ...], expected: Expected) -> None:
    """Exactly the expected causes, each matched once by path, code and message substring."""
    remaining = list(causes)
    for field, text, code in expected:
        match = next(
            (c for c in remaining if c.field == field and c.code == code and text in c.message),
            None,
        )
        assert match is not None, f"no cause {field!r} {code} ~{text!r} in {remaining}"
        remaining.remove(match)
    assert remaining == [], f"unexpected causes: {remaining}"


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param(
            gpuclass(displayName="New", memory="16Gi", maxCount=2), [], id="valid-passthrough"
        ),
        pytest.param(gpuclass(**LICENSED), [], id="valid-licensed-vgpu-default-feature-type"),
        pytest.param(
            gpuclass(**VGPU, license={"secretName": "s", "featureType": 4}),
            [],
            id="valid-feature-type-4",
        ),
        pytest.param(gpuclass(memory="500m"), [], id="valid-fractional-memory"),
        # Name: a DNS label of at most 63 characters.
        pytest.param(
            gpuclass("Example_GPU"), [("metadata.name", "DNS label", RULE)], id="name-not-dns-label"
        ),
        pytest.param(
            gpuclass("a" * 64), [("metadata.name", "at most 63", RULE)], id="name-too-long"
        ),
        pytest.param(gpuclass("a" * 63), [], id="name-63-chars"),
        pytest.param(gpuclass(None), [("metadata.name", "required", RULE)], id="name-missing"),
        # Required fields.
        pytest.param(
            {"metadata": {"name": "empty"}, "spec": {}},
            [
                ("spec.vendor", "required", MODEL),
                ("spec.model", "required", MODEL),
                ("spec.mode", "required", MODEL),
                ("spec.source", "required", MODEL),
            ],
            id="required-fields-missing",
        ),
        pytest.param({"metadata": {"name": "x"}}, [("spec", "required", RULE)], id="spec-missing"),
        pytest.param("not an object", [("", "JSON object", RULE)], id="not-an-object"),
        pytest.param(
            gpuclass(vendor=""), [("spec.vendor", "must not be empty", MODEL)], id="vendor-empty"
        ),
        pytest.param(
            gpuclass(source={"devicePlugin": {}}),
            [("spec.source.devicePlugin.resourceName", "required", MODEL)],
            id="resource-name-missing",
        ),
        # mode: passthrough | vgpu.
        pytest.param(
            gpuclass(mode="mig"),
            [("spec.mode", "'passthrough' or 'vgpu'", MODEL)],
            id="mode-unknown",
        ),
        # resourceName: qualified extended-resource name, not kubernetes.io.
        pytest.param(
            gpuclass(source={"devicePlugin": {"resourceName": "whole-gpu"}}),
            [("spec.source.devicePlugin.resourceName", "qualified extended-resource name", RULE)],
            id="resource-name-unqualified",
        ),
        pytest.param(
            gpuclass(source={"devicePlugin": {"resourceName": "kubernetes.io/gpu"}}),
            [("spec.source.devicePlugin.resourceName", "kubernetes.io domain", RULE)],
            id="resource-name-kubernetes-io",
        ),
        pytest.param(
            gpuclass(source={"devicePlugin": {"resourceName": 3}}),
            [("spec.source.devicePlugin.resourceName", "must be a string", MODEL)],
            id="resource-name-not-string",
        ),
        # devicePlugin is the only source.
        pytest.param(
            gpuclass(source={"dra": {"deviceClassName": "gpu.example.com"}}),
            [
                ("spec.source.devicePlugin", "required", MODEL),
                ("spec.source.dra", "unknown field", MODEL),
            ],
            id="source-not-device-plugin",
        ),
        # vgpu requires profile; passthrough permits neither profile nor license.
        pytest.param(
            gpuclass(mode="vgpu"),
            [("spec.profile", "required for mode vgpu", RULE)],
            id="vgpu-requires-profile",
        ),
        pytest.param(
            gpuclass(profile="p"),
            [("spec.profile", "not permitted for mode passthrough", RULE)],
            id="passthrough-forbids-profile",
        ),
        pytest.param(
            gpuclass(license={"secretName": "s"}),
            [("spec.license", "not permitted for mode passthrough", RULE)],
            id="passthrough-forbids-license",
        ),
        # license.secretName is a DNS subdomain; featureType 1 or 4, an integer.
        pytest.param(
            gpuclass(**VGPU, license={"secretName": "Bad Secret"}),
            [("spec.license.secretName", "DNS subdomain", RULE)],
            id="license-secret-not-subdomain",
        ),
        pytest.param(
            gpuclass(**VGPU, license={}),
            [("spec.license.secretName", "required", MODEL)],
            id="license-secret-missing",
        ),
        pytest.param(
            gpuclass(**VGPU, license={"secretName": "s", "featureType": 2}),
            [("spec.license.featureType", "must be 1 or 4", MODEL)],
            id="feature-type-2",
        ),
        pytest.param(
            gpuclass(**VGPU, license={"secretName": "s", "featureType": True}),
            [("spec.license.featureType", "must be an integer (got a boolean)", MODEL)],
            id="feature-type-bool",
        ),
        pytest.param(
            gpuclass(**VGPU, license={"secretName": "s", "featureType": 4.0}),
            [("spec.license.featureType", "must be an integer (got a number)", MODEL)],
            id="feature-type-float",
        ),
        pytest.param(
            gpuclass(**VGPU, license={"secretName": "s", "featureType": "4"}),
            [("spec.license.featureType", "must be an integer (got a string)", MODEL)],
            id="feature-type-string",
        ),
        # memory: a positive quantity.
        pytest.param(
            gpuclass(memory="0"), [("spec.memory", "positive quantity", RULE)], id="memory-zero"
        ),
        pytest.param(
            gpuclass(memory="-1"),
            [("spec.memory", "positive quantity", RULE)],
            id="memory-negative",
        ),
        pytest.param(
            gpuclass(memory="lots"),
            [("spec.memory", "is not a Kubernetes quantity", RULE)],
            id="memory-not-quantity",
        ),
        pytest.param(
            gpuclass(memory=16),
            [("spec.memory", "must be a string (got an integer)", MODEL)],
            id="memory-number",
        ),
        # maxCount: an integer >= 1.
        pytest.param(
            gpuclass(maxCount=0),
            [("spec.maxCount", "greater than or equal to 1", MODEL)],
            id="max-count-zero",
        ),
        pytest.param(
            gpuclass(maxCount="2"),
            [("spec.maxCount", "must be an integer (got a string)", MODEL)],
            id="max-count-string",
        ),
        pytest.param(
            gpuclass(maxCount=2.0),
            [("spec.maxCount", "must be an integer (got a number)", MODEL)],
            id="max-count-float",
        ),
        pytest.param(
            gpuclass(maxCount=True),
            [("spec.maxCount", "must be an integer (got a boolean)", MODEL)],
            id="max-count-bool",
        ),
        # Unknown spec fields are refused.
        pytest.param(
            gpuclass(replicas=3),
            [("spec.replicas", "unknown field", MODEL)],
            id="unknown-spec-field",
        ),
        # Tolerations are Pod-shaped.
        pytest.param(
            tol(key="gpu.example.com/dedicated", operator="Exists", effect="NoSchedule"),
            [],
            id="toleration-valid",
        ),
        pytest.param(
            tol(key="bad key!", value="x"),
            [("spec.tolerations[0].key", "name part", RULE)],
            id="toleration-key-not-qualified",
        ),
        pytest.param(
            tol(operator="Equal", value="x"),
            [("spec.tolerations[0].key", "may be empty only with operator Exists", RULE)],
            id="toleration-keyless-equal",
        ),
        pytest.param(
            tol(value="x"),
            [("spec.tolerations[0].key", "may be empty only with operator Exists", RULE)],
            id="toleration-keyless-default-operator",
        ),
        pytest.param(
            tol(key="a", value="-x-"),
            [("spec.tolerations[0].value", "label value", RULE)],
            id="toleration-value-not-label",
        ),
        pytest.param(
            tol(key="a", operator="In"),
            [("spec.tolerations[0].operator", "'Exists' or 'Equal'", MODEL)],
            id="toleration-operator-unknown",
        ),
        pytest.param(
            tol(key="a", operator="Exists", value="x"),
            [("spec.tolerations[0].value", "must be empty when operator is Exists", RULE)],
            id="toleration-exists-with-value",
        ),
        pytest.param(
            tol(key="a", effect="Sometimes"),
            [("spec.tolerations[0].effect", "'NoSchedule'", MODEL)],
            id="toleration-effect-unknown",
        ),
        pytest.param(tol(key="a", effect=""), [], id="toleration-empty-effect"),
        pytest.param(
            tol(key="a", effect="NoSchedule", tolerationSeconds=10),
            [("spec.tolerations[0].tolerationSeconds", "only with effect NoExecute", RULE)],
            id="toleration-seconds-without-noexecute",
        ),
        pytest.param(
            tol(key="a", operator="Exists", tolerationSeconds=10),
            [("spec.tolerations[0].tolerationSeconds", "only with effect NoExecute", RULE)],
            id="toleration-seconds-without-effect",
        ),
        pytest.param(
            tol(key="a", effect="NoExecute", tolerationSeconds=30),
            [],
            id="toleration-seconds-with-noexecute",
        ),
        pytest.param(
            tol(key="a", effect="NoExecute", tolerationSeconds="30"),
            [("spec.tolerations[0].tolerationSeconds", "must be an integer", MODEL)],
            id="toleration-seconds-string",
        ),
        pytest.param(
            tol(key="a", operator="Exists", colour="red"),
            [("spec.tolerations[0].colour", "unknown field", MODEL)],
            id="toleration-unknown-field",
        ),
        pytest.param(
            gpuclass(tolerations="x"),
            [("spec.tolerations", "must be a list (got a string)", MODEL)],
            id="tolerations-not-list",
        ),
        pytest.param(
            gpuclass(tolerations=[{"key": "a", "operator": "Exists"}, {"key": "b!"}]),
            [("spec.tolerations[1].key", "name part", RULE)],
            id="toleration-index-in-path",
        ),
        # Every cause is reported at once.
        pytest.param(
            gpuclass("Bad_Name", mode="vgpu", memory="0", maxCount=0, extra=1),
            [
                ("metadata.name", "DNS label", RULE),
                ("spec.profile", "required for mode vgpu", RULE),
                ("spec.memory", "positive quantity", RULE),
                ("spec.maxCount", "greater than or equal to 1", MODEL),
                ("spec.extra", "unknown field", MODEL),
            ],
            id="all-causes-at-once",
        ),
    ],
)
def test_create_causes(obj: Any, expected: Expected) -> None:
    assert_causes(validate_class(obj).causes, expected)


def test_every_cause_is_invalid_input() -> None:
    verdict = validate_class(gpuclass("X", mode="mig", memory="0", maxCount=0))
    assert verdict.causes and {c.kind for c in verdict.causes} == {"invalid"}


@pytest.mark.parametrize(
    ("spec", "warned"),
    [
        pytest.param(
            {"tolerations": [{"operator": "Exists"}]},
            "spec.tolerations[0]: a key-less Exists",
            id="keyless-exists-warns",
        ),
        pytest.param(
            {"tolerations": [{"key": "", "operator": "Exists"}]},
            "spec.tolerations[0]: a key-less Exists",
            id="empty-key-exists-warns",
        ),
        pytest.param(
            {"tolerations": [{"key": "a", "operator": "Exists"}]}, None, id="keyed-exists-silent"
        ),
    ],
)
def test_keyless_exists_is_allowed_with_a_warning(spec: dict[str, Any], warned: str | None) -> None:
    warned = warned or ""
    verdict = validate_class(gpuclass(**spec))
    assert verdict.causes == ()
    assert [w[: len(warned)] for w in verdict.warnings] == ([warned] if warned else [])


def _update(old: dict[str, Any], new: dict[str, Any]) -> Verdict:
    return validate_class(new, old=old)


OLD_LICENSED = gpuclass("example-licensed-vgpu", **LICENSED, memory="16Gi")


def _changed(**changes: Any) -> dict[str, Any]:
    new = copy.deepcopy(OLD_LICENSED)
    new["spec"].update(changes)
    for key in [k for k, v in new["spec"].items() if v is None]:
        del new["spec"][key]
    return new


@pytest.mark.parametrize(
    ("new", "expected"),
    [
        pytest.param(
            _changed(vendor="other"),
            [("spec.vendor", "is immutable (was 'example', now 'other')", FORBIDDEN)],
            id="vendor",
        ),
        pytest.param(
            _changed(model="other"), [("spec.model", "is immutable", FORBIDDEN)], id="model"
        ),
        pytest.param(
            _changed(mode="passthrough", profile=None, license=None),
            [
                ("spec.mode", "is immutable", FORBIDDEN),
                ("spec.profile", "is immutable", FORBIDDEN),
                ("spec.license", "licensing mode", FORBIDDEN),
            ],
            id="mode-profile-license",
        ),
        pytest.param(
            _changed(profile="other"), [("spec.profile", "is immutable", FORBIDDEN)], id="profile"
        ),
        pytest.param(
            _changed(memory="8Gi"),
            [("spec.memory", "was '16Gi', now '8Gi'", FORBIDDEN)],
            id="memory",
        ),
        pytest.param(
            _changed(memory=None), [("spec.memory", "now unset", FORBIDDEN)], id="memory-removed"
        ),
        pytest.param(
            _changed(license=None),
            [("spec.license", "create a new class", FORBIDDEN)],
            id="license-removed",
        ),
        pytest.param(
            _changed(displayName="Renamed", maxCount=1), [], id="mutable-fields-change-freely"
        ),
        pytest.param(
            _changed(tolerations=[{"key": "a", "operator": "Exists"}]),
            [],
            id="tolerations-change-freely",
        ),
    ],
)
def test_update_immutability(new: dict[str, Any], expected: Expected) -> None:
    verdict = _update(OLD_LICENSED, new)
    assert_causes(verdict.causes, expected)
    for cause in verdict.causes:
        assert "create a new class" in cause.message


def test_update_adding_license_is_refused() -> None:
    old = gpuclass("x", **VGPU)
    verdict = _update(old, gpuclass("x", **LICENSED))
    assert_causes(verdict.causes, [("spec.license", "licensing mode", FORBIDDEN)])


def test_update_adding_an_identity_field_counts_as_a_change() -> None:
    old = gpuclass("x")
    verdict = _update(old, gpuclass("x", memory="16Gi"))
    assert_causes(verdict.causes, [("spec.memory", "was unset, now '16Gi'", FORBIDDEN)])


@pytest.mark.parametrize(
    ("new", "warned"),
    [
        pytest.param(
            _changed(source={"devicePlugin": {"resourceName": "example.com/other"}}),
            ["resourceName changed"],
            id="resource-name",
        ),
        pytest.param(
            _changed(license={"secretName": "other-secret"}),
            ["license.secretName changed"],
            id="secret-name",
        ),
        pytest.param(
            _changed(license={"secretName": "example-vgpu-license", "featureType": 4}),
            ["license.featureType changed"],
            id="feature-type",
        ),
        pytest.param(
            _changed(license={"secretName": "example-vgpu-license", "featureType": 1}),
            [],
            id="feature-type-explicit-default-is-no-change",
        ),
    ],
)
def test_update_allowed_with_warning(new: dict[str, Any], warned: list[str]) -> None:
    verdict = _update(OLD_LICENSED, new)
    assert verdict.causes == ()
    assert [w.split(":")[0] for w in verdict.warnings] == warned


@pytest.mark.parametrize(
    ("others", "warnings"),
    [
        pytest.param(
            {"old-offer": "example.com/new-offer"},
            ["class old-offer already uses example.com/new-offer"],
            id="shared",
        ),
        pytest.param({"new-offer": "example.com/new-offer"}, [], id="itself-is-not-another"),
        pytest.param({"old-offer": "example.com/other"}, [], id="different-resource"),
        pytest.param(
            {"b-offer": "example.com/new-offer", "a-offer": "example.com/new-offer"},
            [
                "class a-offer already uses example.com/new-offer",
                "class b-offer already uses example.com/new-offer",
            ],
            id="every-other-class-named-in-order",
        ),
    ],
)
def test_shared_resource_name_warns(others: dict[str, str], warnings: list[str]) -> None:
    verdict = validate_class(gpuclass(), others=others)
    assert verdict.causes == ()
    assert [w.split(":")[0] for w in verdict.warnings] == warnings


def test_manifest_refuses_status_stanza_only_in_lint_mode() -> None:
    obj = gpuclass()
    obj["status"] = {"free": 3}
    assert_causes(
        validate_class(obj, manifest=True).causes, [("status", "controller reports it", RULE)]
    )
    assert validate_class(obj).causes == ()


def test_warnings_are_clipped_under_120_characters() -> None:
    long_resource = "example.com/" + "g" * 60
    verdict = validate_class(
        gpuclass(source={"devicePlugin": {"resourceName": long_resource}}),
        others={"a" * 60: long_resource},
    )
    assert verdict.warnings
    assert all(len(w) <= MAX_WARNING_CHARS < 120 for w in verdict.warnings)
    assert verdict.warnings[0].endswith("...")
