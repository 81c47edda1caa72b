"""The gpuclass-selection library chart (docs/contract.md section 2), through a stand-in application chart.

tests/fixtures/selection-chart renders one VirtualMachine with the library's helpers; the library is
vendored into a temporary copy as `helm dependency build` would. Class lists become the selection
annotation (the list as JSON, verbatim), raw lists become `gpuN` device entries, mixed lists fail.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import helm_python as helm
import jsonschema
import pytest
import yaml

from tests.chart_helpers import (
    SELECTION_FIXTURE,
    SELECTION_LIBRARY,
    load_yaml,
    render,
    selection_chart,
)

ANNOTATION = "gpu.cozystack.io/classes"


def _vm(chart: Path, gpus: Any) -> dict[str, Any]:
    values = {} if gpus is ... else {"gpus": gpus}
    manifests = render(values, chart=chart, release="vm1", namespace="tenant-a")
    vm: dict[str, Any] = yaml.safe_load(manifests["selection-chart/templates/vm.yaml"])
    return vm


def _annotations(vm: dict[str, Any]) -> dict[str, str]:
    annotations: dict[str, str] = vm["spec"]["template"]["metadata"]["annotations"]
    return annotations


def _devices(vm: dict[str, Any]) -> dict[str, Any]:
    devices: dict[str, Any] = vm["spec"]["template"]["spec"]["domain"]["devices"]
    return devices


@pytest.fixture(scope="module")
def chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return selection_chart(tmp_path_factory.mktemp("with-schema"))


@pytest.fixture(scope="module")
def chart_without_schema(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return selection_chart(tmp_path_factory.mktemp("without-schema"), with_schema=False)


@pytest.mark.parametrize(
    "gpus",
    [
        pytest.param([{"className": "example-whole-gpu", "count": 1}], id="one-class"),
        pytest.param([{"className": "example-whole-gpu"}], id="count-omitted-stays-omitted"),
        pytest.param(
            [{"className": "b", "count": 2}, {"className": "a"}, {"className": "b", "count": 3}],
            id="order-and-repeats-kept",
        ),
    ],
)
def test_class_entries_become_the_annotation_verbatim(
    chart: Path, gpus: list[dict[str, Any]]
) -> None:
    vm = _vm(chart, gpus)
    annotations = _annotations(vm)
    assert json.loads(annotations[ANNOTATION]) == gpus
    assert annotations["example.com/unrelated"] == "kept"
    assert "gpus" not in _devices(vm)


def test_raw_entries_become_numbered_kubevirt_gpus(chart: Path) -> None:
    vm = _vm(
        chart,
        [
            {"name": "example.com/whole-gpu"},
            {"name": "example.com/whole-gpu"},
            {"name": "example.com/other"},
        ],
    )
    assert ANNOTATION not in _annotations(vm)
    assert _devices(vm)["gpus"] == [
        {"name": "gpu1", "deviceName": "example.com/whole-gpu"},
        {"name": "gpu2", "deviceName": "example.com/whole-gpu"},
        {"name": "gpu3", "deviceName": "example.com/other"},
    ]
    assert _devices(vm)["disks"] == [{"name": "root", "disk": {"bus": "virtio"}}]


@pytest.mark.parametrize(
    "gpus",
    [pytest.param([], id="empty"), pytest.param(..., id="absent"), pytest.param(None, id="null")],
)
def test_no_selection_renders_nothing(chart_without_schema: Path, gpus: Any) -> None:
    vm = _vm(chart_without_schema, gpus)
    assert ANNOTATION not in _annotations(vm)
    assert "gpus" not in _devices(vm)


@pytest.mark.parametrize(
    ("gpus", "message"),
    [
        pytest.param(
            [{"className": "a"}, {"name": "example.com/x"}],
            "gpus mixes className entries (gpus[0]) and raw name entries (gpus[1])",
            id="mixed-class-first",
        ),
        pytest.param(
            [{"name": "example.com/x"}, {"name": "example.com/y"}, {"className": "a"}],
            "gpus mixes className entries (gpus[2]) and raw name entries (gpus[0])",
            id="mixed-raw-first",
        ),
        pytest.param(
            [{"className": "a", "name": "example.com/x"}],
            "gpus[0] sets both className and name",
            id="both-keys",
        ),
        pytest.param(
            [{"className": "a"}, {"count": 2}],
            "gpus[1] must set className (a GPU class) or name",
            id="neither-key",
        ),
        pytest.param(
            [{"name": "example.com/x", "count": 2}],
            "gpus[0]: count belongs to className entries only",
            id="count-on-raw",
        ),
        pytest.param(
            [{"className": ""}],
            "gpus[0].className must be a non-empty class name",
            id="empty-class",
        ),
        pytest.param(["example.com/x"], "gpus[0] must be an object", id="entry-not-object"),
        pytest.param({"className": "a"}, "gpus must be a list", id="not-a-list"),
    ],
)
def test_the_template_refuses_what_the_contract_refuses(
    chart_without_schema: Path, gpus: Any, message: str
) -> None:
    with pytest.raises(helm.HelmRenderError) as failure:
        _vm(chart_without_schema, gpus)
    assert message in str(failure.value)


def test_the_fixture_schema_embeds_the_library_fragment_verbatim() -> None:
    fragment = json.loads((SELECTION_LIBRARY / "schema" / "gpus.schema.json").read_text())
    fixture = json.loads((SELECTION_FIXTURE / "values.schema.json").read_text())
    assert fixture["properties"]["gpus"] == fragment
    jsonschema.Draft202012Validator.check_schema(fragment)


@pytest.mark.parametrize(
    "gpus",
    [
        pytest.param([{"className": "a"}, {"name": "example.com/x"}], id="mixed"),
        pytest.param([{"className": "a", "count": 0}], id="count-zero"),
        pytest.param([{"className": "a", "count": "2"}], id="count-string"),
        pytest.param([{"className": "a", "count": 1.5}], id="count-fraction"),
        pytest.param([{"className": "a", "count": True}], id="count-bool"),
        pytest.param([{"className": "a", "profile": "x"}], id="unknown-key"),
        pytest.param([{"className": "Example_GPU"}], id="class-not-dns-label"),
        pytest.param([{"name": "example.com/x", "count": 1}], id="count-on-raw"),
        pytest.param([{}], id="empty-entry"),
        pytest.param("example-whole-gpu", id="not-a-list"),
    ],
)
def test_the_schema_fragment_refuses_bad_lists(chart: Path, gpus: Any) -> None:
    with pytest.raises(helm.HelmValuesError):
        _vm(chart, gpus)
    fragment = json.loads((SELECTION_LIBRARY / "schema" / "gpus.schema.json").read_text())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(gpus, fragment, cls=jsonschema.Draft202012Validator)


@pytest.mark.parametrize(
    "gpus",
    [
        pytest.param(
            [{"className": "example-whole-gpu", "count": 2}, {"className": "b"}], id="classes"
        ),
        pytest.param([{"name": "example.com/whole-gpu"}], id="raw"),
        pytest.param([], id="empty"),
    ],
)
def test_the_schema_fragment_accepts_good_lists(chart: Path, gpus: Any) -> None:
    _vm(chart, gpus)
    fragment = json.loads((SELECTION_LIBRARY / "schema" / "gpus.schema.json").read_text())
    jsonschema.validate(gpus, fragment, cls=jsonschema.Draft202012Validator)


def test_the_library_is_a_library_chart() -> None:
    metadata = load_yaml(SELECTION_LIBRARY / "Chart.yaml")
    assert metadata["type"] == "library"
    [dependency] = load_yaml(SELECTION_FIXTURE / "Chart.yaml")["dependencies"]
    assert (dependency["name"], dependency["version"]) == (metadata["name"], metadata["version"])
    assert (
        SELECTION_FIXTURE / dependency["repository"].removeprefix("file://")
    ).resolve() == SELECTION_LIBRARY
