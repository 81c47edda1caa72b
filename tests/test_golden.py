"""Golden AdmissionReview fixtures (docs/conventions.md rule 16), replayed through the library and the CLI.

Each tests/fixtures/admission/<case>/ holds request.json and the exact
response.json the webhook must send (plus patch.json, the decoded patch, for
review). `pytest tests/test_golden.py --update-fixtures` rewrites the responses;
review the diff before committing. The same files are replayed over HTTPS
against the running webhook in tests/webhook/test_app.py.

Because response.json is written by the code it checks, expected.yaml beside
the cases holds each verdict written by hand from the contract (allowed, code,
cause paths, the fields a patch changes, whether it warns); every response.json
and every live answer must agree with it.
"""

from __future__ import annotations

import base64
import json
import re
from functools import cache
from typing import Any

import jsonpatch
import pytest
import yaml

from gpuclass.shared.cli.main import main as cli_main
from gpuclass.shared.cli.reviewcmd import offline_catalog
from gpuclass.shared.core.admission.review import review
from gpuclass.shared.core.status.catalog import Catalog, Policy
from tests.builders import changed_fields
from tests.conftest import FIXTURES, OBJECTS, GoldenCase, golden_cases

CASES = list(golden_cases())
EXPECTED: dict[str, dict[str, Any]] = yaml.safe_load((FIXTURES / "expected.yaml").read_text())
ANNOTATION_PATH = "metadata.annotations[gpu.cozystack.io/classes]"


@cache
def catalog(vgpu_entitled: bool) -> Catalog:
    return offline_catalog(OBJECTS, Policy(vgpu_entitled=vgpu_entitled))


def test_every_contract_rule_has_a_fixture() -> None:
    names = {c.name for c in CASES}
    for rule in ("4.1", "4.2", "4.3", "4.4", "4.5", "4.6", "4.7", "4.8"):
        assert any(f"vmi-{rule}-" in n for n in names), rule
    assert any(n.startswith("vmi-update-") for n in names)
    assert any(n.startswith("pod-launcher-") for n in names)
    assert sum(n.startswith("vm-4.10-") for n in names) >= 10
    assert sum(n.startswith("gpuclass-5-") for n in names) >= 15


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_library_answer_matches_golden(case: GoldenCase, update_fixtures: bool) -> None:
    response = review(case.request, catalog(case.vgpu_entitled), endpoint=case.endpoint)
    if update_fixtures:
        case.response_path.write_text(json.dumps(response, indent=2, ensure_ascii=False) + "\n")
        patch = response["response"].get("patch")
        patch_path = case.folder / "patch.json"
        if patch:
            patch_path.write_text(json.dumps(json.loads(base64.b64decode(patch)), indent=2) + "\n")
        elif patch_path.exists():
            patch_path.unlink()
    assert response == case.expected()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_patch_applies_and_is_idempotent(case: GoldenCase) -> None:
    response = case.expected()["response"]
    if "patch" not in response:
        return
    operations = json.loads(base64.b64decode(response["patch"]))
    assert operations == json.loads((case.folder / "patch.json").read_text())
    patched = jsonpatch.apply_patch(case.request["request"]["object"], operations)
    again = json.loads(json.dumps(case.request))
    again["request"]["object"] = patched
    second = review(again, catalog(case.vgpu_entitled), endpoint=case.endpoint)["response"]
    assert second["allowed"] is True
    assert "patch" not in second, "resolving an already resolved object must yield no operations"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_cli_prints_the_same_answer(
    case: GoldenCase, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    args = ["review"] + [a for path in OBJECTS for a in ("--objects", path)]
    if case.vgpu_entitled:
        args.append("--vgpu-entitled")
    if case.endpoint:
        args += ["--endpoint", case.endpoint]
    assert cli_main([*args, str(case.folder / "request.json")]) == 0
    assert json.loads(capsysbinary.readouterr().out) == case.expected()


def test_every_case_has_a_hand_written_verdict() -> None:
    assert sorted(EXPECTED) == sorted(c.name for c in CASES)


def _verdict(case: GoldenCase, answer: dict[str, Any]) -> dict[str, Any]:
    """The parts of an answer the hand-written table speaks about, in its notation."""
    response = answer["response"]
    verdict: dict[str, Any] = {"allowed": response["allowed"]}
    if not response["allowed"]:
        status = response.get("status") or {}
        verdict["code"] = status.get("code")
        causes = (status.get("details") or {}).get("causes") or []
        verdict["causes"] = sorted(
            str(c.get("field", "")).replace(ANNOTATION_PATH, "@", 1) for c in causes
        )
        more = re.search(r"; and (\d+) more$", str(status.get("message", "")))
        if more:
            verdict["more"] = int(more.group(1))
    elif "patch" in response:
        operations = json.loads(base64.b64decode(response["patch"]))
        source = case.request["request"]["object"]
        verdict["changes"] = sorted(
            changed_fields(source, jsonpatch.apply_patch(source, operations))
        )
    verdict["warns"] = bool(response.get("warnings"))
    return verdict


def _written(name: str) -> dict[str, Any]:
    row = dict(EXPECTED[name])
    row.setdefault("warns", False)
    row.pop("xfail", None)
    for key in ("causes", "changes"):
        if key in row:
            row[key] = sorted(row[key])
    return row


def _mark_known_bug(name: str) -> None:
    reason = EXPECTED[name].get("xfail")
    if reason:
        pytest.xfail(str(reason))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_golden_response_matches_the_contract_table(case: GoldenCase) -> None:
    _mark_known_bug(case.name)
    assert _verdict(case, case.expected()) == _written(case.name)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_live_answer_matches_the_contract_table(case: GoldenCase) -> None:
    _mark_known_bug(case.name)
    answer = review(case.request, catalog(case.vgpu_entitled), endpoint=case.endpoint)
    assert _verdict(case, answer) == _written(case.name)
