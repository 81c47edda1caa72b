"""`gpuclass review --manifest`: a plain manifest, wrapped as the API server would, answered.

The expected answers are the golden fixtures' (reviewed, and pinned by the hand-written
tests/fixtures/admission/expected.yaml): the VM of a fixture, written out as plain YAML,
must get the fixture's response (its uid aside).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuclass.shared.cli.main import main
from tests.conftest import FIXTURES, OBJECTS

OBJECT_ARGS = [a for p in OBJECTS for a in ("--objects", p)]


def fixture(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    folder = FIXTURES / name
    request = json.loads((folder / "request.json").read_text())["request"]
    response = json.loads((folder / "response.json").read_text())["response"]
    return request, response


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def write_yaml(tmp_path: Path, name: str, *docs: object) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(list(docs)))
    return str(path)


def without_uid(response: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in response.items() if k != "uid"}


@pytest.mark.parametrize(
    "case",
    [
        "vm-4.10-count-zero-refused",
        "vm-4.10-class-not-found-warns",
        "vm-4.10-worker-pool-vgpu-refused",
        "vm-4.10-valid-selection-allowed-unpatched",
        "vmi-4.6-whole-gpu-resolved",
        "vmi-4.3-class-not-found",
    ],
)
def test_a_plain_manifest_gets_the_golden_answer(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    request, expected = fixture(case)
    manifest = write_yaml(tmp_path, "manifest.yaml", request["object"])
    args = ["review", *OBJECT_ARGS, "--vgpu-entitled", "--manifest", manifest]
    code, out, err = run([*args, "--as", request["userInfo"]["username"]], capsys)
    assert code == 0, err
    assert without_uid(json.loads(out)["response"]) == without_uid(expected)


def test_namespace_flag_decides_the_entitlement(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    request, _ = fixture("vm-4.10-vgpu-not-entitled-refused")  # tenant-c: not entitled
    manifest = write_yaml(tmp_path, "vm.yaml", request["object"])
    base = ["review", *OBJECT_ARGS, "--vgpu-entitled", "--manifest", manifest]
    _, refused, _ = run(base, capsys)
    _, allowed, _ = run([*base, "--namespace", "tenant-a"], capsys)  # entitled (label)
    assert json.loads(refused)["response"]["status"]["code"] == 403
    assert json.loads(allowed)["response"]["allowed"] is True


def test_update_with_the_old_object_passes_an_untouched_template(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    request, _ = fixture("vm-4.10-update-template-unchanged-allowed")
    new = write_yaml(tmp_path, "new.yaml", request["object"])
    old = write_yaml(tmp_path, "old.yaml", request["oldObject"])
    args = ["review", *OBJECT_ARGS, "--manifest", "--operation", "UPDATE", "--old", old, new]
    code, out, _ = run(args, capsys)
    assert code == 0 and json.loads(out)["response"]["allowed"] is True
    code, out, _ = run(["review", *OBJECT_ARGS, "--manifest", new], capsys)  # as a CREATE
    assert json.loads(out)["response"]["allowed"] is False


def test_fail_on_deny_and_text_output_work_on_manifests(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    request, _ = fixture("vm-4.10-count-zero-refused")
    manifest = write_yaml(tmp_path, "vm.yaml", request["object"])
    args = ["review", *OBJECT_ARGS, "--manifest", "--fail-on-deny", "-o", "text", manifest]
    code, out, _ = run(args, capsys)
    assert code == 1
    assert "gpus[0].count" in out


@pytest.mark.parametrize(
    ("extra", "docs", "says"),
    [
        ([], [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine"}], "add --manifest"),
        (["--namespace", "tenant-a"], None, "need --manifest"),
        (
            ["--manifest"],
            [{"apiVersion": "v1", "kind": "Pod"}, {"apiVersion": "v1", "kind": "Pod"}],
            "one manifest expected, found 2",
        ),
        (["--manifest"], [{"apiVersion": "v1", "kind": "ConfigMap"}], "not a kind gpuclass admits"),
        (["--manifest", "--operation", "UPDATE"], None, "needs the old object"),
    ],
)
def test_what_cannot_be_reviewed_exits_2_with_one_line(
    extra: list[str],
    docs: list[object] | None,
    says: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    manifest = tmp_path / "m.json"
    if docs is None:
        request, _ = fixture("vm-4.10-count-zero-refused")
        manifest.write_text(json.dumps(request["object"]))
    elif len(docs) == 1:
        manifest.write_text(json.dumps(docs[0]))
    else:
        manifest = Path(write_yaml(tmp_path, "m.yaml", *docs))
    code, out, err = run(["review", *OBJECT_ARGS, *extra, str(manifest)], capsys)
    assert (code, out) == (2, "")
    assert err.startswith("gpuclass review: ") and err.count("\n") == 1
    assert says in err


@pytest.mark.parametrize("manifest", [True, False], ids=["manifest", "admission-review"])
def test_an_object_nested_too_deep_exits_2_with_one_line(
    manifest: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--manifest` refuses past 100 levels; an AdmissionReview as deep as orjson allows is
    answered or refused with one line, whatever the interpreter's recursion limit."""
    deep = '{"x":' * 1015 + "{}" + "}" * 1015
    vmi = (
        '{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance", '
        '"metadata": {"name": "v", "namespace": "tenant-a"}, "spec": ' + deep + "}"
    )
    text = vmi
    if not manifest:
        text = (
            '{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": '
            '{"uid": "u", "kind": {"group": "kubevirt.io", "version": "v1", '
            '"kind": "VirtualMachineInstance"}, "operation": "CREATE", "object": ' + vmi + "}}"
        )
    path = tmp_path / "deep.json"
    path.write_text(text)
    flags = ["--manifest"] if manifest else []
    code, out, err = run(["review", *OBJECT_ARGS, *flags, str(path)], capsys)
    if not manifest and code == 0:  # answered: the rules' recursion fit under this limit
        assert json.loads(out)["response"]["uid"] == "u"
        return
    assert (code, out) == (2, "")  # never a traceback (exit 1)
    assert err.startswith("gpuclass review: ") and err.count("\n") == 1
    assert "nests" in err


def test_delete_of_a_manifest_reviews_it_as_the_old_object(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    request, _ = fixture("vm-4.10-count-zero-refused")
    manifest = write_yaml(tmp_path, "vm.yaml", request["object"])
    code, out, err = run(
        ["review", *OBJECT_ARGS, "--manifest", "--operation", "DELETE", manifest], capsys
    )
    assert code == 0, err
    assert json.loads(out)["response"]["allowed"] is True  # docs/contract.md 4.10: DELETE passes
