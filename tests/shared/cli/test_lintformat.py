"""Renderings of `gpuclass validate` (shared/cli/lintformat.py): GitHub escaping, JUnit and JSON shape."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from gpuclass.shared.cli.lint import FileError, FileInput, lint
from gpuclass.shared.cli.lintformat import escape_data, escape_property, render, workflow_command
from tests.builders import example_class


@pytest.mark.parametrize(
    ("raw", "data", "prop"),
    [
        pytest.param("plain", "plain", "plain", id="plain"),
        pytest.param("100%", "100%25", "100%25", id="percent-first"),
        pytest.param("a\r\nb", "a%0D%0Ab", "a%0D%0Ab", id="newlines"),
        pytest.param("x: y, z", "x: y, z", "x%3A y%2C z", id="colon-comma-in-properties"),
        pytest.param("%3A", "%253A", "%253A", id="escapes-are-escaped"),
    ],
)
def test_github_escaping(raw: str, data: str, prop: str) -> None:
    """The Actions toolkit's rules: `%`, CR and LF in messages; also `:` and `,` in properties."""
    assert escape_data(raw) == data
    assert escape_property(raw) == prop


def test_workflow_command_shape() -> None:
    line = workflow_command("error", "bad\nvalue", file="a,b.yaml", line=3, title="x: y")
    assert line == "::error file=a%2Cb.yaml,line=3,title=x%3A y::bad%0Avalue\n"


INPUTS = [
    FileInput("a.yaml", [example_class("ok"), example_class("bad", mode="mig", memory="0")]),
    FileInput("b.yaml", error=FileError("InvalidYAML", "not valid YAML", 2)),
    FileInput("c.yaml", [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}}]),
]


def test_junit_counts() -> None:
    root = ET.fromstring(render(lint(INPUTS), "junit").out)
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("3", "1", "1")
    # c.yaml holds nothing of ours: no suite for it
    assert [s.get("name") for s in root.findall("testsuite")] == ["a.yaml", "b.yaml"]
    bad = root.find("./testsuite/testcase[@name='GPUClass/bad']")
    assert bad is not None and len(bad.findall("failure")) == 2


def test_json_lists_every_file() -> None:
    document = json.loads(render(lint(INPUTS), "json").out)
    assert [f["path"] for f in document["files"]] == ["a.yaml", "b.yaml", "c.yaml"]
    assert document["files"][1]["error"] == {
        "code": "InvalidYAML",
        "message": "not valid YAML",
        "line": 2,
    }
    assert document["files"][2]["objects"] == []


def test_text_keeps_standard_output_to_causes() -> None:
    rendered = render(lint(INPUTS), "text")
    assert rendered.out.splitlines() == [
        line for line in rendered.out.splitlines() if line.startswith("a.yaml: bad: spec.")
    ]
    assert "b.yaml: not valid YAML" in rendered.err
