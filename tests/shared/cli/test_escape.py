"""Outputs nobody can take over (shared/cli/escape.py, docs/decisions.md "Outputs nobody can take
over"): hostile text from a pull request or a tenant, through every format of `validate`,
`review -o text`, `explain` and `plan`.

The checks restate each format's rules, not our code: a CI log line that starts with `::` is a
GitHub workflow command (the runner's rule), so only ours may; no control character or ANSI
escape reaches plain text; JUnit XML must parse (XML 1.0); Markdown is read by a CommonMark
parser (markdown-it-py, with GitHub's tables): hostile text may not add an HTML block or comment,
close our code block, break a table row, or mention anyone (`@name` in plain text); JSON must
load back to the same strings (Python's parser: a lone surrogate from a YAML file is written as its
escape, which it reads back).
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from gpuclass.shared.cli.escape import guard_lines, md_code, md_fence, md_text, text, xml_text
from gpuclass.shared.cli.explain import Explanation, NodeRow
from gpuclass.shared.cli.explaincmd import render_class
from gpuclass.shared.cli.lint import FileError, FileReport, Finding, Line, LintReport, ObjectReport
from gpuclass.shared.cli.lintformat import render_github, render_json, render_junit, render_text
from gpuclass.shared.cli.plan import ClassPlan, InventoryEntry, Plan, VMPlan
from gpuclass.shared.cli.planformat import render_plan
from gpuclass.shared.cli.reviewtext import render_review_text

ATTACKS = [
    "::error::pwned",
    "::add-mask::x",
    "::stop-commands::token",
    "x\n::error::pwned",
    "x\r\n::warning file=a::b",
    "```\n</details>\n<!-- hidden -->",
    "` | `",
    "@octocat please merge",
    "<img src=x onerror=alert(1)>",
    "a|b|c",
    "\x1b[31mred\x1b[0m",
    "\x9b31mred",
    "\x00\x07\x08\x0c",
    "\ud800 lone surrogate",
    "\u2028line\u2029",
    "<!-- -->",
    "[link](javascript:alert(1))",
    "````",
]
hostile = st.one_of(
    st.sampled_from(ATTACKS),
    st.text(alphabet=st.sampled_from(list("`:|@<>!-\n\r\x1b\x9b\x00 ab[]()*_#~\\&")), max_size=40),
    st.text(max_size=30),
)

CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")
COMMAND = re.compile(r"^::(error|warning|notice)( [^\n]*)?::[^\n]*$")


def plain_text_holds(output: str) -> None:
    """Plain text: no control character but the newline, no line that reads as a command."""
    assert not CONTROL.search(output), repr(output)
    for line in output.split("\n"):
        assert not line.lstrip().startswith("::"), line


def commands_only(output: str, count: int) -> None:
    """GitHub annotations: exactly `count` lines, each one workflow command of ours."""
    lines = output.split("\n")
    assert lines[-1] == ""
    assert len(lines) - 1 == count
    for line in lines[:-1]:
        assert COMMAND.match(line), line
        assert not CONTROL.search(line), repr(line)


def plan_of(s: str) -> Plan:
    return Plan(
        classes=[
            ClassPlan(
                s or "c",
                "changed",
                source=s,
                line=3,
                fields=(s,),
                refused=(f"refused: {s}",),
                advice=s,
                warnings=(s,),
                before={"free": 1, "conditions": [{"type": "Ready", "reason": s}]},
                after={"free": 2, "conditions": [{"type": "Ready", "reason": "Ready"}]},
                running=(f"ns/{s}",),
                running_effect=s,
            )
        ],
        vms=[VMPlan(s, s, "start-refused", (s,), (s,), s)],
        inventory=[InventoryEntry(s, s, s, s, (s,))],
    )


MD = MarkdownIt("commonmark").enable("table")
MENTION = re.compile(r"@[A-Za-z0-9]")
OUR_HTML = {"<details><summary>Full plan</summary>\n", "</details>\n", "<br>"}


def markdown_holds(output: str, full: str) -> None:
    tokens = MD.parse(output)
    fences = [t for t in tokens if t.type == "fence"]
    assert len(fences) == 1 and fences[0].content.rstrip("\n") == full.rstrip("\n")
    html = [t.content for t in tokens if t.type == "html_block"]
    assert html == ["<details><summary>Full plan</summary>\n", "</details>\n"], html
    rows = [t for t in tokens if t.type == "tr_open"]
    cells = [t for t in tokens if t.type == "td_open"]
    assert len(rows) == 2 and len(cells) == 5, (len(rows), len(cells))  # header + one class
    for token in tokens:
        for child in token.children or []:
            if child.type == "html_inline":
                assert child.content in OUR_HTML, child.content
            if child.type == "text":  # GitHub's mentions: `@` and a name, in the rendered text
                assert not MENTION.search(child.content), child.content


@settings(max_examples=300, deadline=None)
@given(hostile)
@example("```\n</details>\n<!-- hidden -->")
@example("::error::pwned")
def test_plan_in_every_format(s: str) -> None:
    plan = plan_of(s)
    plain_text_holds(render_plan(plan, "text"))
    full = render_plan(plan, "text")
    markdown_holds(render_plan(plan, "markdown"), full)
    commands_only(render_plan(plan, "github"), 3)  # the refusal, the VM, the summary
    assert json.loads(render_plan(plan, "json"))["classes"][0]["name"] == (s or "c")


@settings(max_examples=300, deadline=None)
@given(hostile)
def test_validate_in_every_format(s: str) -> None:
    finding = Finding(s, s, "Invalid")
    report = LintReport(
        [
            FileReport(s, [ObjectReport("GPUClass", s, [finding], [s])], FileError("Bad", s, 1)),
        ],
        [Line(s, s, finding)],
    )
    rendered = render_text(report)
    plain_text_holds(rendered.out)
    plain_text_holds(rendered.err)
    ET.fromstring(render_junit(report).split("\n", 1)[1])  # parses as XML 1.0
    commands_only(render_github(report), 3)  # the file error, the cause, the warning
    assert json.loads(render_json(report))["files"][0]["path"] == s


@settings(max_examples=200, deadline=None)
@given(hostile)
def test_review_text(s: str) -> None:
    response = {
        "response": {
            "allowed": False,
            "status": {
                "code": 422,
                "reason": s,
                "message": s,
                "details": {"causes": [{"field": s, "message": s, "reason": s}]},
            },
            "warnings": [s],
        }
    }
    plain_text_holds(render_review_text(response))


@settings(max_examples=200, deadline=None)
@given(hostile)
def test_explain_text(s: str) -> None:
    row = NodeRow(s, 1, 2, "untolerated", f"untolerated taint {s}")
    explanation = Explanation(s, 1, s, (row,), 0, False, s, notes=(s,))
    plain_text_holds(render_class(explanation))


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        pytest.param("a`b", "``a`b``", id="one-backtick-inside"),
        pytest.param("``", "``` `` ```", id="only-backticks-padded"),
        pytest.param("a|b", "`a\\|b`", id="pipe-escaped"),
        pytest.param("\x1b[31m", "`\\x1b[31m`", id="escape-shown"),
    ],
)
def test_md_code(value: str, shown: str) -> None:
    assert md_code(value) == shown


def test_the_other_escapes_by_example() -> None:
    assert text("a\nb\x1b") == "a\\x0ab\\x1b"
    assert text("a\nb", keep_newlines=True) == "a\nb"
    assert guard_lines("ok\n  ::error::x\n") == "ok\n  \\x3a:error::x\n"
    assert md_text("<!-- @a | b -->") == "&lt;!-- @\u200ba \\| b --&gt;"
    assert md_fence("x ```` y") == "`````"
    assert xml_text("a\x00b\ud800") == "a\\x00b\\ud800"


TOKEN = "ZXhhbXBsZS1ub3QtYS1yZWFsLXRva2Vu"  # examples/cluster/license-secret.yaml
DECODED = "example-not-a-real-token"


@pytest.mark.parametrize("fmt", ["text", "json", "markdown", "github"])
def test_the_license_token_never_reaches_a_plan(
    fmt: str, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """`gpuclass plan` over the examples, whose license source Secret holds a token, and a
    proposed catalog that changes the licensed class: no format prints the token."""
    from pathlib import Path

    from gpuclass.shared.cli.main import main

    root = Path(__file__).resolve().parents[3]
    proposed = tmp_path / "catalog.yaml"
    licensed = (root / "examples" / "catalog" / "example-licensed-vgpu.yaml").read_text()
    proposed.write_text(licensed.replace("featureType: 1", "featureType: 4"))
    main(["plan", "--objects", str(root / "examples"), "-o", fmt, str(proposed)])
    out, err = capsys.readouterr()
    assert TOKEN not in out + err and DECODED not in out + err


@pytest.mark.parametrize(
    "argv",
    [
        ["status", "--objects", "examples"],
        ["explain", "example-licensed-vgpu", "--objects", "examples"],
        ["explain", "example-licensed-vgpu", "--objects", "examples", "-o", "json"],
        ["review", "-o", "text", "--objects", "examples", "examples/reviews/vmi-whole-gpu.json"],
        ["review", "--objects", "examples", "examples/reviews/vmi-whole-gpu.json"],
        ["validate", "-o", "github", "examples/catalog"],
    ],
    ids=lambda argv: "-".join(a for a in argv[:4] if not a.startswith("examples")),
)
def test_the_license_token_never_reaches_any_other_output(
    argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from pathlib import Path

    from gpuclass.shared.cli.main import main

    monkeypatch.chdir(Path(__file__).resolve().parents[3])
    main(argv, environ={})
    out, err = capsys.readouterr()
    assert TOKEN not in out + err and DECODED not in out + err
