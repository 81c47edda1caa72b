"""The checks `gpuclass validate` adds to the webhook's verdict (shared/cli/lint.py)."""

from __future__ import annotations

from typing import Any

import pytest

from gpuclass.shared.cli.lint import FileInput, classify, lint


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param(
            {"apiVersion": "cozystack.io/v1alpha1", "kind": "GPUClass"}, "class", id="ours"
        ),
        pytest.param({"apiVersion": "v1", "kind": "GPUClass"}, "class", id="ours-wrong-version"),
        pytest.param({"kind": "GpuClass"}, "near-miss", id="case"),
        pytest.param({"kind": "GPUCalss"}, "near-miss", id="transposed"),
        pytest.param({"kind": "GPUClasss"}, "near-miss", id="letter-added"),
        pytest.param({"kind": "gpu-class"}, "near-miss", id="dashed"),
        pytest.param({"kind": "gpuclasses"}, "near-miss", id="plural"),
        pytest.param(
            {"apiVersion": "cozystack.io/v1alpha1", "kind": "Other"}, "our-group", id="our-group"
        ),
        pytest.param({"apiVersion": "v1", "kind": "ConfigMap"}, "other", id="configmap"),
        pytest.param({"apiVersion": "apps/v1", "kind": "Deployment"}, "other", id="deployment"),
        pytest.param({"apiVersion": "v1", "kind": "Class"}, "other", id="far-from-ours"),
        pytest.param({}, "other", id="no-kind"),
    ],
)
def test_classify(obj: dict[str, Any], expected: str) -> None:
    assert classify(obj) == expected


def test_other_kinds_of_our_group_are_a_warning_not_an_error() -> None:
    report = lint(
        [FileInput("a.yaml", [{"apiVersion": "cozystack.io/v1alpha1", "kind": "WorkloadMonitor"}])]
    )
    assert report.errors == 0 and report.warnings == 1


def test_a_duplicate_name_in_one_file() -> None:
    doc = {
        "apiVersion": "cozystack.io/v1alpha1",
        "kind": "GPUClass",
        "metadata": {"name": "x"},
        "spec": {
            "vendor": "v",
            "model": "m",
            "mode": "passthrough",
            "source": {"devicePlugin": {"resourceName": "example.com/x"}},
        },
    }
    report = lint([FileInput("a.yaml", [doc, doc])])
    assert [(line.finding.field, line.finding.code) for line in report.lines] == [
        ("metadata.name", "DuplicateName")
    ]
    assert "earlier in this file" in report.lines[0].finding.message
