"""The CRD in the chart and the pydantic models agree (docs/conventions.md rule 4): names, required, enums, types, bounds.

Walks `shared.core.model.models.GPUClassSpec` (and GPUClassStatus) field by field beside the
CRD's openAPIV3Schema, so a field added to one and not the other, a changed enum or
a dropped bound fails here. Also checks the CRD's identity and printer columns
against shared/core/base/names.py and docs/contract.md section 1.
"""

from __future__ import annotations

import copy
import re
import types
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
import pytest
import yaml
from pydantic import BaseModel, Field
from pydantic.fields import FieldInfo

from gpuclass.shared.core.base import k8s, names
from gpuclass.shared.core.model.models import (
    Condition,
    DevicePlugin,
    GPUClassSpec,
    GPUClassStatus,
    License,
    Source,
    Toleration,
)

CRD_PATH = (
    Path(__file__).resolve().parents[2] / "charts" / "gpuclass" / "templates" / "crd-gpuclass.yaml"
)
CRD: dict[str, Any] = yaml.safe_load(CRD_PATH.read_text())
VERSION = CRD["spec"]["versions"][0]
SCHEMA = VERSION["schema"]["openAPIV3Schema"]
SPEC = SCHEMA["properties"]["spec"]
STATUS = SCHEMA["properties"]["status"]

JSON_TYPES = {str: "string", int: "integer", bool: "boolean"}


def unwrap(annotation: Any) -> tuple[Any, list[Any], bool]:
    """(core type, constraint metadata, optional) of a field annotation: drops `| None` and Annotated."""
    metadata: list[Any] = []
    optional = False
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation, *extra = get_args(annotation)
            for item in extra:
                metadata.extend(item.metadata if isinstance(item, FieldInfo) else [item])
        elif origin in (Union, types.UnionType):
            members = [a for a in get_args(annotation) if a is not type(None)]
            optional = optional or len(members) < len(get_args(annotation))
            assert len(members) == 1, f"unions other than X | None are not in the CRD: {annotation}"
            annotation = members[0]
        else:
            return annotation, metadata, optional


def constraints(field: FieldInfo) -> tuple[Any, dict[str, Any]]:
    core, metadata, _ = unwrap(field.annotation)
    found: dict[str, Any] = {}
    for item in [*field.metadata, *metadata]:
        if isinstance(item, annotated_types.MinLen):
            found["minLength"] = item.min_length
        elif isinstance(item, annotated_types.Ge):
            found["minimum"] = item.ge
    return core, found


def wire_name(name: str, field: FieldInfo) -> str:
    return field.alias or name


def compare(model: type[BaseModel], schema: dict[str, Any], where: str) -> list[str]:
    """Every disagreement between a model and its schema node, as readable lines."""
    problems: list[str] = []
    assert schema.get("type") == "object", where
    properties: dict[str, Any] = schema.get("properties", {})
    fields = {wire_name(n, f): f for n, f in model.model_fields.items()}
    if set(fields) != set(properties):
        problems.append(
            f"{where}: model fields {sorted(fields)} != schema properties {sorted(properties)}"
        )
    required = {n for n, f in fields.items() if f.is_required()}
    if required != set(schema.get("required", [])):
        problems.append(
            f"{where}: required {sorted(required)} != schema {sorted(schema.get('required', []))}"
        )
    for name in sorted(set(fields) & set(properties)):
        problems += compare_field(fields[name], properties[name], f"{where}.{name}")
    return problems


def compare_field(field: FieldInfo, prop: dict[str, Any], where: str) -> list[str]:
    core, bounds = constraints(field)
    problems: list[str] = []
    if get_origin(core) is list:
        if prop.get("type") != "array":
            return [f"{where}: list in the model, {prop.get('type')} in the schema"]
        (item,) = get_args(core)
        if isinstance(item, type) and issubclass(item, BaseModel):
            return compare(item, prop["items"], f"{where}[]")
        return compare_field(FieldInfo(annotation=item), prop["items"], f"{where}[]")
    if isinstance(core, type) and issubclass(core, BaseModel):
        return compare(core, prop, where)
    if get_origin(core) is Literal:
        values = list(get_args(core))
        if prop.get("enum") is None or sorted(map(repr, values)) != sorted(map(repr, prop["enum"])):
            problems.append(f"{where}: enum {values} != schema {prop.get('enum')}")
        base = {type(v) for v in values}
        expected_type = JSON_TYPES[base.pop()] if len(base) == 1 else None
    else:
        expected_type = JSON_TYPES.get(core)
    if expected_type is None:
        return [*problems, f"{where}: cannot map {core} to a schema type"]
    if prop.get("type") != expected_type:
        problems.append(f"{where}: {expected_type} in the model, {prop.get('type')} in the schema")
    if (
        bounds.get("minLength") == 1
        and "minLength" not in prop
        and _refuses_empty(prop.get("pattern"))
    ):
        bounds.pop("minLength")  # the schema's pattern already requires a character
    for key in ("minLength", "minimum"):
        if bounds.get(key) != prop.get(key):
            problems.append(
                f"{where}: {key} {bounds.get(key)} in the model, {prop.get(key)} in the schema"
            )
    if "default" in prop and field.default != prop["default"]:
        problems.append(
            f"{where}: default {field.default!r} in the model, {prop['default']!r} in the schema"
        )
    return problems


def _refuses_empty(pattern: str | None) -> bool:
    return pattern is not None and re.fullmatch(pattern, "") is None


def test_spec_schema_matches_the_model() -> None:
    assert compare(GPUClassSpec, SPEC, "spec") == []


def test_status_schema_matches_the_model() -> None:
    assert compare(GPUClassStatus, STATUS, "status") == []


@pytest.mark.parametrize(
    ("model", "path"),
    [
        pytest.param(Toleration, ("tolerations", "items"), id="Toleration"),
        pytest.param(License, ("license",), id="License"),
        pytest.param(Source, ("source",), id="Source"),
        pytest.param(DevicePlugin, ("source", "devicePlugin"), id="DevicePlugin"),
    ],
)
def test_nested_models_match(model: type[BaseModel], path: tuple[str, ...]) -> None:
    node = SPEC["properties"][path[0]]
    for part in path[1:]:
        node = node[part] if part == "items" else node["properties"][part]
    assert compare(model, node, ".".join(path)) == []


def test_conditions_match_metav1_condition_model() -> None:
    assert (
        compare(Condition, STATUS["properties"]["conditions"]["items"], "status.conditions[]") == []
    )


def test_bounds_the_contract_names_are_present() -> None:
    assert SPEC["properties"]["maxCount"] == {
        **SPEC["properties"]["maxCount"],
        "type": "integer",
        "minimum": 1,
    }
    assert SPEC["properties"]["license"]["properties"]["featureType"]["enum"] == [1, 4]
    assert SPEC["properties"]["mode"]["enum"] == ["passthrough", "vgpu"]
    for key in ("vendor", "model", "profile"):
        assert SPEC["properties"][key]["minLength"] == 1


# The comparator must be able to fail.


class _Inner(BaseModel):
    level: int


class _Sample(BaseModel):
    name: str
    mode: Literal["a", "b"] = "a"
    count: int | None = None
    inner: _Inner | None = None
    label: Annotated[str, Field(min_length=1)] | None = None
    size: int = Field(default=1, ge=1)


SAMPLE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string"},
        "mode": {"type": "string", "enum": ["a", "b"]},
        "count": {"type": "integer"},
        "inner": {
            "type": "object",
            "required": ["level"],
            "properties": {"level": {"type": "integer"}},
        },
        "label": {"type": "string", "minLength": 1},
        "size": {"type": "integer", "minimum": 1, "default": 1},
    },
}


def _mutated(
    path: tuple[str, ...], key: str, value: Any, base: dict[str, Any] = SAMPLE_SCHEMA
) -> dict[str, Any]:
    schema = copy.deepcopy(base)
    node = schema
    for part in path:
        node = node["properties"][part]
    if value is None:
        del node[key]
    else:
        node[key] = value
    return schema


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        pytest.param(SAMPLE_SCHEMA, None, id="agree"),
        pytest.param(_mutated(("mode",), "enum", ["a", "c"]), "enum", id="enum-differs"),
        pytest.param(
            _mutated(("count",), "type", "string"), "integer in the model", id="type-differs"
        ),
        pytest.param(_mutated(("count",), "minimum", 1), "minimum", id="bound-only-in-schema"),
        pytest.param(
            _mutated(("name",), "minLength", 1), "minLength", id="min-length-only-in-schema"
        ),
        pytest.param(
            _mutated(("label",), "minLength", None), "minLength", id="min-length-only-in-model"
        ),
        pytest.param(
            _mutated(("label",), "pattern", "^.+$", _mutated(("label",), "minLength", None)),
            None,
            id="non-empty-pattern-stands-for-min-length",
        ),
        pytest.param(
            _mutated(("label",), "pattern", "^.*$", _mutated(("label",), "minLength", None)),
            "minLength",
            id="permissive-pattern-does-not",
        ),
        pytest.param(_mutated(("size",), "minimum", None), "minimum", id="minimum-only-in-model"),
        pytest.param(_mutated(("size",), "default", 2), "default", id="default-differs"),
        pytest.param(_mutated((), "required", ["name", "mode"]), "required", id="required-differs"),
        pytest.param(
            _mutated(("inner",), "required", None), "required", id="nested-required-differs"
        ),
        pytest.param(
            {
                **SAMPLE_SCHEMA,
                "properties": {**SAMPLE_SCHEMA["properties"], "extra": {"type": "string"}},
            },
            "model fields",
            id="field-only-in-schema",
        ),
    ],
)
def test_comparator_detects(schema: dict[str, Any], problem: str | None) -> None:
    found = compare(_Sample, schema, "sample")
    if problem is None:
        assert found == []
    else:
        assert any(problem in line for line in found), found


# Identity and columns (docs/contract.md section 1, shared/core/base/names.py).


def test_crd_identity() -> None:
    assert (
        CRD["apiVersion"] == "apiextensions.k8s.io/v1" and CRD["kind"] == "CustomResourceDefinition"
    )
    assert CRD["metadata"]["name"] == f"{names.PLURAL}.{names.GROUP}" == "gpuclasses.cozystack.io"
    spec = CRD["spec"]
    assert spec["group"] == names.GROUP == "cozystack.io"
    assert spec["scope"] == "Cluster"
    assert spec["names"]["kind"] == names.KIND == "GPUClass"
    assert spec["names"]["plural"] == names.PLURAL
    assert spec["names"]["shortNames"] == ["gpuc"]
    assert [v["name"] for v in spec["versions"]] == [names.VERSION] == ["v1alpha1"]
    assert VERSION["served"] is True and VERSION["storage"] is True
    assert VERSION["subresources"] == {"status": {}}
    assert names.API_VERSION == "cozystack.io/v1alpha1"


# (name, type, jsonPath, priority): priority 1 columns appear only with `kubectl get -o wide`.
PRINTER_COLUMNS = [
    ("Mode", "string", ".spec.mode", 0),
    ("Profile", "string", ".spec.profile", 1),
    ("Resource", "string", ".spec.source.devicePlugin.resourceName", 0),
    ("Free", "integer", ".status.free", 0),
    ("MaxFreePerNode", "integer", ".status.maxFreePerNode", 0),
    ("MaxUnitsPerNode", "integer", ".status.maxUnitsPerNode", 1),
    ("Ready", "string", '.status.conditions[?(@.type=="Ready")].status', 0),
    ("Reason", "string", '.status.conditions[?(@.type=="Ready")].reason', 1),
    ("Advertising", "integer", ".status.capacity.advertising", 1),
    ("Eligible", "integer", ".status.capacity.eligible", 1),
    ("Schedulable", "string", '.status.conditions[?(@.type=="Schedulable")].status', 1),
    ("Why", "string", '.status.conditions[?(@.type=="Schedulable")].reason', 1),
    ("Age", "date", ".metadata.creationTimestamp", 0),
]


def test_printer_columns() -> None:
    columns = [
        (c["name"], c["type"], c["jsonPath"], c.get("priority", 0))
        for c in VERSION["additionalPrinterColumns"]
    ]
    assert columns == PRINTER_COLUMNS
    # Every column points at a field the schema (and so the model) has.
    assert {"mode", "profile"} <= set(SPEC["properties"])
    assert (
        "resourceName" in SPEC["properties"]["source"]["properties"]["devicePlugin"]["properties"]
    )
    assert {"free", "maxFreePerNode", "maxUnitsPerNode", "capacity"} <= set(STATUS["properties"])
    assert {"advertising", "eligible"} <= set(STATUS["properties"]["capacity"]["properties"])
    condition = STATUS["properties"]["conditions"]["items"]["properties"]
    assert {"status", "reason"} <= set(condition)
    assert "Ready" in names.CONDITION_TYPES
    assert names.STATUS_CONDITION_TYPES[-1] == names.SCHEDULABLE == "Schedulable"


def _fields(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every node of the schema, as `kubectl explain` walks it (array items included)."""
    found = [(path or "<root>", node)]
    for key, child in node.get("properties", {}).items():
        found.extend(_fields(child, f"{path}.{key}"))
    if "items" in node:
        found.extend(_fields(node["items"], f"{path}[]"))
    return found


def test_every_field_has_a_description_for_kubectl_explain() -> None:
    fields = _fields(SCHEMA)
    assert len(fields) >= 39
    # The API server refuses a description on metadata (it explains ObjectMeta itself).
    assert "description" not in SCHEMA["properties"]["metadata"]
    missing = [
        path
        for path, node in fields
        if path != ".metadata" and not str(node.get("description", "")).strip()
    ]
    assert not missing, f"no description: {missing}"


def test_descriptions_name_the_immutable_fields() -> None:
    for key in ("vendor", "model", "mode", "profile"):
        assert "Immutable" in SPEC["properties"][key]["description"], key


@pytest.mark.parametrize(
    "value", ["a", "gpu-1", "a" * 63, "a" * 64, "A", "-a", "a-", "a.b", "a_b", ""]
)
def test_name_pattern_agrees_with_dns_label_rule(value: str) -> None:
    name = SCHEMA["properties"]["metadata"]["properties"]["name"]
    accepted = bool(re.fullmatch(name["pattern"], value)) and len(value) <= name["maxLength"]
    assert accepted is (k8s.dns_label_error(value) is None)


@pytest.mark.parametrize(
    "value",
    [
        "example.com/gpu",
        "nvidia.com/GA102GL_A10",
        "gpu",
        "Example.com/gpu",
        "example.com/-x",
        "a/b/c",
        "/gpu",
        "example.com/",
    ],
)
def test_resource_name_pattern_agrees_with_extended_resource_rule(value: str) -> None:
    prop = SPEC["properties"]["source"]["properties"]["devicePlugin"]["properties"]["resourceName"]
    assert bool(re.fullmatch(prop["pattern"], value)) is (
        k8s.extended_resource_error(value) is None
    )


@pytest.mark.parametrize(
    "value", ["s", "a.b-c", "Bad Secret", ".a", "a..b", "a.", "a_b", "a" * 254]
)
def test_secret_name_pattern_agrees_with_dns_subdomain_rule(value: str) -> None:
    prop = SPEC["properties"]["license"]["properties"]["secretName"]
    accepted = bool(re.fullmatch(prop["pattern"], value)) and len(value) <= prop["maxLength"]
    assert accepted is (k8s.dns_subdomain_error(value) is None)
