"""The cause codes: one enum, the contract's table (docs/contract.md 3.5), and what the fixtures carry."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gpuclass.shared.core.base.causes import CauseCode, forbidden, invalid
from gpuclass.shared.core.base.fieldpath import FieldPath

ROOT = Path(__file__).resolve().parents[4]
ROW = re.compile(r"^\s*\| `(?P<reason>\w+)` \| (?P<whose>Kubernetes|ours) \| (?P<rule>[^|]+) \|$")


def contract_table() -> dict[str, tuple[str, str]]:
    """reason -> (whose, rule text), read from the table under rule 3.5."""
    text = (ROOT / "docs" / "contract.md").read_text()
    section = text[text.index("- 3.5 ") : text.index('<a id="section-4">')]
    rows = {}
    for line in section.splitlines():
        match = ROW.match(line)
        if match:
            rows[match["reason"]] = (match["whose"], match["rule"].strip())
    return rows


def test_the_contract_table_and_the_enum_name_the_same_codes() -> None:
    assert sorted(contract_table()) == sorted(code.value for code in CauseCode)


@pytest.mark.parametrize("code", list(CauseCode), ids=str)
def test_kubernetes_words_are_the_ones_the_contract_calls_kubernetes(code: CauseCode) -> None:
    whose, _ = contract_table()[code.value]
    assert code.is_kubernetes == (whose == "Kubernetes")


@pytest.mark.parametrize("code", list(CauseCode), ids=str)
def test_class_state_codes_are_the_rule_4_3_rows(code: CauseCode) -> None:
    """Rule 4.3 is the state of a class (the codes a VirtualMachine only warns about, 4.10)."""
    _, rule = contract_table()[code.value]
    assert code.is_class_state == rule.endswith("(4.3)")


def test_every_reason_a_golden_response_carries_is_a_code() -> None:
    seen: set[str] = set()
    for response in (ROOT / "tests" / "fixtures" / "admission").glob("*/response.json"):
        status = json.loads(response.read_text())["response"].get("status") or {}
        seen.update(c["reason"] for c in status.get("details", {}).get("causes", []))
    assert seen, "the golden fixtures hold denials"
    assert seen <= {code.value for code in CauseCode}, seen - {code.value for code in CauseCode}


def test_a_code_is_written_as_its_word() -> None:
    """The wire carries the word, not the enum's name (orjson, str() and f-strings alike)."""
    import orjson

    cause = forbidden(FieldPath.of("spec"), "no", code=CauseCode.NOT_ENTITLED)
    assert orjson.dumps({"reason": cause.code}) == b'{"reason":"NotEntitled"}'
    assert f"{cause.code}" == str(cause.code) == "NotEntitled"
    assert invalid(FieldPath.of("spec"), "no").code == "Invalid"
