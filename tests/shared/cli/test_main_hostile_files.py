"""Bad input is an answer or exit 2, never a traceback: every command over hostile files.

A pull request writes the catalog and, in GitOps, the objects `--objects` reads; a tenant
writes the manifest `explain` and `review --manifest` read. Each generated file mixes the
examples' objects with fields of every type the YAML loader can produce where the rules expect
another (integer, float, null and bool keys; huge and negative numbers; strings where maps go;
deep lists), and runs `validate`, `status`, `explain`, `explain --manifest`, `review --manifest`
and `plan` in every output format. Each must return 0, 1 or 2 (2 with one line on standard
error naming the command), and `-o json` must be JSON. This is the fuzz pass of the hostile-PR
issue, kept as a test; its findings were fixed (docs/decisions.md, "Outputs nobody can take
over" and the CHANGELOG).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuclass.shared.cli.main import main

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"
WHOLE = yaml.safe_load((EXAMPLES / "catalog" / "example-whole-gpu.yaml").read_text())
VM = yaml.safe_load((EXAMPLES / "manifests" / "vm-two-whole-gpus.yaml").read_text())

odd_keys = st.one_of(
    st.integers(-(2**70), 2**70), st.floats(allow_nan=False), st.none(), st.booleans()
)
odd_values = st.recursive(
    st.one_of(
        st.integers(-(2**80), 2**80),
        st.floats(allow_nan=False),
        st.none(),
        st.booleans(),
        st.text(max_size=8),
    ),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.one_of(odd_keys, st.text(max_size=6)), children, max_size=3)
    ),
    max_leaves=12,
)
PATHS = (
    ("spec",),
    ("spec", "source"),
    ("spec", "source", "devicePlugin"),
    ("metadata",),
    ("metadata", "annotations"),
    ("spec", "template", "spec", "domain"),
    ("spec", "template", "spec", "domain", "devices"),
    ("spec", "template", "metadata", "annotations"),
)


def planted(obj: dict[str, Any], path: tuple[str, ...], key: Any, value: Any) -> dict[str, Any]:
    """`obj` with `key: value` written under `path` (created where missing)."""
    out = copy.deepcopy(obj)
    node: Any = out
    for step in path:
        if not isinstance(node.get(step), dict):
            node[step] = {}
        node = node[step]
    node[key] = value
    return out


def exit_is_an_answer(code: int, err: str, command: str) -> None:
    assert code in (0, 1, 2), (code, err)
    assert "Traceback" not in err
    if code == 2:
        assert err.startswith(f"gpuclass {command}: "), err


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    path=st.sampled_from(PATHS),
    key=st.one_of(odd_keys, st.sampled_from(["maxCount", "count", "className", "gpus", "mode"])),
    value=odd_values,
    in_vm=st.booleans(),
)
def test_every_command_answers_hostile_files(
    tmp_path_factory: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
    path: tuple[str, ...],
    key: Any,
    value: Any,
    in_vm: bool,
) -> None:
    folder = tmp_path_factory.mktemp("hostile")
    catalog = folder / "catalog.yaml"
    manifest = folder / "vm.yaml"
    hostile_class = planted(WHOLE, path, key, value) if not in_vm else WHOLE
    hostile_vm = planted(VM, path, key, value) if in_vm else VM
    try:
        catalog.write_text(yaml.safe_dump(hostile_class))
        manifest.write_text(yaml.safe_dump(hostile_vm))
    except yaml.YAMLError:
        return  # not writable as YAML: nothing a file could hold
    objects = folder / "objects"
    objects.mkdir()
    (objects / "class.yaml").write_text(catalog.read_text())
    (objects / "vm.yaml").write_text(manifest.read_text())
    runs: list[tuple[str, list[str], bool]] = [
        ("validate", ["validate", str(catalog)], False),
        ("validate", ["validate", "-o", "json", str(catalog)], True),
        ("validate", ["validate", "-o", "junit", str(catalog)], False),
        ("status", ["status", "--objects", str(EXAMPLES), "--objects", str(objects)], True),
        (
            "explain",
            ["explain", "example-whole-gpu", "--objects", str(objects), "-o", "json"],
            True,
        ),
        (
            "explain",
            ["explain", "--manifest", str(manifest), "--objects", str(EXAMPLES), "-o", "json"],
            True,
        ),
        (
            "review",
            ["review", "--manifest", "-o", "text", "--objects", str(EXAMPLES), str(manifest)],
            False,
        ),
        ("plan", ["plan", "--objects", str(EXAMPLES), "-o", "json", str(catalog)], True),
        ("plan", ["plan", "--objects", str(EXAMPLES), "-o", "markdown", str(catalog)], False),
        (
            "plan",
            ["plan", "--objects", str(EXAMPLES), "--objects", str(objects), str(catalog)],
            False,
        ),
    ]
    for command, argv, is_json in runs:
        code = main(argv, environ={})
        out, err = capsys.readouterr()
        exit_is_an_answer(code, err, command)
        if is_json and code != 2:
            json.loads(out)
