"""The values schema Cozystack generates for the `gpus` list, and the pickers its dashboard
shows on it (docs/operations.md, "Cozystack's application charts", step 2).

cozyvalues-gen is built from its Go module at the version Cozystack's CI uses
(tests/controlplane/cozyvalues-gen/) and run on the stand-ins' values.yaml, as a chart's
`make generate` runs it. Expected values come from the documented change: `className` gets the
`gpuclass` picker, `name` keeps the `gpu` picker it has today, and nothing is required, since an
item is a class entry or a raw entry; before the change `name` is required.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.cozystack_apps import APPS, TEMPLATES, TYPEDEF_BEFORE, generate_schema, pickers

CLASS_PICKERS = {"gpus[].className": "gpuclass", "gpus[].name": "gpu"}


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_the_stand_ins_schema_is_what_cozyvalues_gen_writes(
    name: str, cozyvalues_gen: Path, tmp_path: Path
) -> None:
    chart = tmp_path / name
    shutil.copytree(APPS / name, chart)
    committed = json.loads((APPS / name / "values.schema.json").read_text())
    assert generate_schema(chart, cozyvalues_gen) == committed


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_the_dashboard_shows_the_class_picker_on_class_name_and_keeps_the_gpu_picker(
    name: str,
) -> None:
    schema = json.loads((APPS / name / "values.schema.json").read_text())
    assert pickers(schema) == CLASS_PICKERS
    items = schema["properties"]["gpus"]["items"]
    assert set(items["properties"]) == {"className", "count", "name"}
    assert not items.get("required")  # a class entry has no name, a raw entry no className


def test_before_the_change_name_is_required_and_the_only_picker(
    cozyvalues_gen: Path, tmp_path: Path
) -> None:
    (tmp_path / "values.yaml").write_text(
        f"{TYPEDEF_BEFORE}\n## @param {{[]GPU}} gpus - GPUs.\ngpus: []\n"
    )
    schema = generate_schema(tmp_path, cozyvalues_gen)
    assert pickers(schema) == {"gpus[].name": "gpu"}
    assert schema["properties"]["gpus"]["items"]["required"] == ["name"]


def test_a_picker_inside_any_of_is_not_found() -> None:
    """Why the documented change keeps the generated schema: the dashboard's walk does not
    enter `anyOf`, so a schema shaped like charts/gpuclass-selection/schema/gpus.schema.json
    would show no picker even with the option keys in its branches."""
    branch = {
        "items": {
            "properties": {
                "className": {"type": "string", "x-cozystack-options": {"source": "gpuclass"}}
            }
        }
    }
    schema = {"properties": {"gpus": {"type": "array", "anyOf": [branch]}}}
    assert pickers(schema) == {}
    assert pickers({"properties": {"gpus": branch}}) == {"gpus[].className": "gpuclass"}
