"""Every validated string finishes in time linear in its length, in the webhook and the CLI alike.

A quadratic regex once let `spec.memory` of 20,000 digits and a `!` block the event loop
for seconds. Here Hypothesis builds strings of digits, dots and signs (with an ending that
makes a match fail late), puts them in every field a rule reads, and compares the time of a
10 kB and a 100 kB input in the same run: linear work grows 10x, quadratic work 100x, so
the ratio must stay at most 20. Names ending in a newline, which Python's `$` accepts, are
refused like the API server's patterns refuse them.
"""

from __future__ import annotations

import copy
import json
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gpuclass.shared.cli.main import main as cli_main
from gpuclass.shared.cli.reviewcmd import offline_catalog
from gpuclass.shared.core.admission.review import review
from gpuclass.shared.core.base import k8s
from gpuclass.shared.core.model.validation import validate_class
from gpuclass.shared.core.status.catalog import Policy
from gpuclass.shared.core.status.entitlement import tenant_chain
from tests.conftest import OBJECTS

ROOT = Path(__file__).resolve().parent.parent
CATALOG = offline_catalog(OBJECTS, Policy(vgpu_entitled=True))
VMI_REVIEW = json.loads((ROOT / "examples" / "reviews" / "vmi-whole-gpu.json").read_text())

GPUCLASS: dict[str, Any] = {
    "apiVersion": "cozystack.io/v1alpha1",
    "kind": "GPUClass",
    "metadata": {"name": "example"},
    "spec": {
        "vendor": "example",
        "model": "example-model",
        "mode": "vgpu",
        "profile": "example-profile",
        "memory": "16Gi",
        "source": {"devicePlugin": {"resourceName": "example.com/gpu"}},
        "license": {"secretName": "example-license"},
        "tolerations": [{"key": "example.com/gpu", "operator": "Equal", "value": "x"}],
    },
}

# (where the string goes, the cause path a refusal names or None when any value is valid there)
CLASS_FIELDS: list[tuple[tuple[str | int, ...], str | None]] = [
    (("metadata", "name"), "metadata.name"),
    (("spec", "memory"), "spec.memory"),
    (("spec", "source", "devicePlugin", "resourceName"), "spec.source.devicePlugin.resourceName"),
    (("spec", "license", "secretName"), "spec.license.secretName"),
    (("spec", "tolerations", 0, "key"), "spec.tolerations[0].key"),
    (("spec", "tolerations", 0, "value"), "spec.tolerations[0].value"),
    (("spec", "vendor"), None),
    (("spec", "model"), None),
    (("spec", "profile"), None),
    (("spec", "displayName"), None),
]

ANNOTATION = "gpu.cozystack.io/classes"


def _set(obj: Any, path: tuple[str | int, ...], value: object) -> None:
    for part in path[:-1]:
        obj = obj[part]
    obj[path[-1]] = value


def _class_with(path: tuple[str | int, ...], value: str) -> dict[str, Any]:
    obj = copy.deepcopy(GPUCLASS)
    _set(obj, path, value)
    return obj


def _vmi_with(where: str, value: str) -> dict[str, Any]:
    body = copy.deepcopy(VMI_REVIEW)
    request = body["request"]
    meta = request["object"]["metadata"]
    if where == "className":
        meta["annotations"][ANNOTATION] = json.dumps([{"className": value}])
    elif where == "rawName":
        meta["annotations"][ANNOTATION] = json.dumps([{"name": value}])
    elif where == "count":
        meta["annotations"][ANNOTATION] = json.dumps(
            [{"className": "example-whole-gpu", "count": value}]
        )
    elif where == "namespace":
        request["namespace"] = value
        meta["namespace"] = value
    elif where == "resourceRequest":
        request["object"]["spec"]["domain"].setdefault("resources", {})["requests"] = {value: "1"}
    return body


VMI_FIELDS = ["className", "rawName", "count", "namespace", "resourceRequest"]

pattern = st.text(alphabet="0123456789.+-", min_size=1, max_size=8)
ending = st.sampled_from(["", "!", "\n", "Gi", "e", "-"])


def _seconds(work: Callable[[], object]) -> float:
    return min(timeit.repeat(work, number=1, repeat=5))


def _grows_linearly(make: Callable[[int], Callable[[], object]]) -> float:
    """Time of the 100 kB input over the 10 kB one (best of five each)."""
    small, large = make(10_000), make(100_000)
    small()  # warm caches (the catalog's, pydantic's) before timing
    return _seconds(large) / max(_seconds(small), 1e-6)


def _long(unit: str, tail: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size] + tail


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(field=st.sampled_from(CLASS_FIELDS), unit=pattern, tail=ending)
def test_gpuclass_fields_take_linear_time(
    field: tuple[tuple[str | int, ...], str | None], unit: str, tail: str
) -> None:
    path, cause = field

    def make(size: int) -> Callable[[], object]:
        obj = _class_with(path, _long(unit, tail, size))
        return lambda: validate_class(obj)

    ratio = _grows_linearly(make)
    assert ratio <= 20, f"{path}: 100 kB took {ratio:.1f}x the time of 10 kB"
    verdict = validate_class(_class_with(path, _long(unit, tail, 10_000)))
    if cause is not None:
        event(f"refused {cause}")
        assert any(c.field == cause for c in verdict.causes), verdict.causes


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(where=st.sampled_from(VMI_FIELDS), unit=pattern, tail=ending)
def test_vmi_review_fields_take_linear_time(where: str, unit: str, tail: str) -> None:
    def make(size: int) -> Callable[[], object]:
        body = _vmi_with(where, _long(unit, tail, size))
        return lambda: review(body, CATALOG)

    ratio = _grows_linearly(make)
    assert ratio <= 20, f"{where}: 100 kB took {ratio:.1f}x the time of 10 kB"
    answer = review(_vmi_with(where, _long(unit, tail, 10_000)), CATALOG)
    event(f"{where}: allowed={answer['response']['allowed']}")
    assert answer["response"]["uid"] == VMI_REVIEW["request"]["uid"]


def test_the_reported_quantity_is_refused_at_once_and_not_echoed_whole() -> None:
    """The input of the report: 20,000 digits and '!', and a megabyte of them."""
    for size in (20_000, 1_000_000):
        verdict = validate_class(_class_with(("spec", "memory"), "1" * size + "!"))
        [cause] = [c for c in verdict.causes if c.field == "spec.memory"]
        assert "at most 64 characters" in cause.message
        assert len(cause.message) < 200


def test_cli_validate_refuses_the_reported_quantity(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "class.json"
    manifest.write_text(json.dumps(_class_with(("spec", "memory"), "1" * 20_000 + "!")))
    assert cli_main(["validate", str(manifest)]) == 1
    out = capsys.readouterr().out
    assert "spec.memory" in out and len(out) < 400


def test_a_long_tenant_namespace_has_no_ancestors_to_walk() -> None:
    assert tenant_chain("tenant-" + "a-" * 50_000 + "a") is None
    assert tenant_chain("tenant-a-b") == ["tenant-a-b", "tenant-a"]


NEWLINE_NAMES = [
    pytest.param(("metadata", "name"), "example\n", "metadata.name", id="class-name"),
    pytest.param(
        ("spec", "source", "devicePlugin", "resourceName"),
        "example.com/gpu\n",
        "spec.source.devicePlugin.resourceName",
        id="resource-name",
    ),
    pytest.param(
        ("spec", "license", "secretName"),
        "example-license\n",
        "spec.license.secretName",
        id="secret-name",
    ),
    pytest.param(
        ("spec", "tolerations", 0, "key"),
        "example.com/gpu\n",
        "spec.tolerations[0].key",
        id="toleration-key",
    ),
    pytest.param(
        ("spec", "tolerations", 0, "value"),
        "x\n",
        "spec.tolerations[0].value",
        id="toleration-value",
    ),
    pytest.param(("spec", "memory"), "16Gi\n", "spec.memory", id="memory"),
]


@pytest.mark.parametrize(("path", "value", "cause"), NEWLINE_NAMES)
def test_a_trailing_newline_is_refused(path: tuple[str | int, ...], value: str, cause: str) -> None:
    assert not any(c.field == cause for c in validate_class(_class_with(path, value[:-1])).causes)
    assert any(c.field == cause for c in validate_class(_class_with(path, value)).causes)


@pytest.mark.parametrize(
    "check",
    [
        k8s.dns_label_error,
        k8s.dns_subdomain_error,
        k8s.qualified_name_error,
        k8s.label_value_error,
    ],
)
def test_name_checks_refuse_a_final_newline(check: Callable[[str], str | None]) -> None:
    assert check("abc") is None
    assert check("abc\n") is not None


def test_a_class_name_with_a_newline_is_invalid_input_in_the_annotation() -> None:
    answer = review(_vmi_with("className", "example-whole-gpu\n"), CATALOG)
    assert answer["response"]["allowed"] is False
    assert answer["response"]["status"]["code"] == 422
