"""Renderings of a :class:`shared.cli.lint.LintReport`: `gpuclass validate -o text|json|junit|github`.

Pure functions from a report to the text a CI job reads (docs/operations.md, "Linting the
catalog in CI", documents each format):

- `text`: one line per cause, `FILE: NAME: FIELD: message` (docs/contract.md 7.1), on
  standard output; unreadable files and warnings on standard error, so that standard
  output keeps only that pinned format.
- `json`: one document, schema version 1 (below), stable for scripts.
- `junit`: JUnit XML, one test case per object, one `<failure>` per cause, one `<error>`
  per unreadable file (GitLab, Jenkins and most CI dashboards read it).
- `github`: GitHub Actions workflow commands (`::error file=…::…`), which annotate the
  pull request; escaped as the Actions toolkit does.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Any, Literal

from gpuclass.shared.cli.escape import guard_lines, json_text, text, xml_text
from gpuclass.shared.cli.lint import FileReport, LintReport, ObjectReport

Format = Literal["text", "json", "junit", "github"]
FORMATS: tuple[Format, ...] = ("text", "json", "junit", "github")
JSON_SCHEMA_VERSION = 1
PROG = "gpuclass validate"


@dataclass(frozen=True, slots=True)
class Rendered:
    """What to write where: `out` to stdout (the report), `err` to stderr (`-o text` puts file
    errors and warnings there, so stdout holds only cause lines)."""

    out: str
    err: str


def render(report: LintReport, output: Format) -> Rendered:
    """The report in `output`'s format; every format but text writes the whole report to stdout."""
    if output == "json":
        return Rendered(render_json(report), "")
    if output == "junit":
        return Rendered(render_junit(report), "")
    if output == "github":
        return Rendered(render_github(report), "")
    return render_text(report)


def render_text(report: LintReport) -> Rendered:
    """`FILE: NAME: FIELD: message`, one line per cause on stdout (contract 7.1); unreadable files
    and warnings on stderr."""
    out = [
        f"{text(line.path)}: {text(line.name)}: {text(line.finding.field)}: "
        f"{text(line.finding.message)}\n"
        for line in report.lines
    ]
    err = []
    for file in report.files:
        if file.error:
            err.append(f"{PROG}: {text(file.path)}: {text(file.error.message)}\n")
        for obj in file.objects:
            err += [
                f"{text(file.path)}: {text(obj.name)}: warning: {text(w)}\n" for w in obj.warnings
            ]
    return Rendered(guard_lines("".join(out)), guard_lines("".join(err)))


def _object_json(obj: ObjectReport) -> dict[str, Any]:
    return {
        "kind": obj.kind,
        "name": obj.name,
        "valid": not obj.causes,
        "causes": [{"field": c.field, "message": c.message, "code": c.code} for c in obj.causes],
        "warnings": list(obj.warnings),
    }


def _file_json(file: FileReport) -> dict[str, Any]:
    error = file.error
    return {
        "path": file.path,
        "error": None
        if error is None
        else {"code": error.code, "message": error.message, "line": error.line},
        "objects": [_object_json(o) for o in file.objects],
    }


def render_json(report: LintReport) -> str:
    """The report as one JSON document (schema `version` 1, stable for CI scripts): a summary, then
    per file its error and its objects with causes and warnings."""
    document = {
        "version": JSON_SCHEMA_VERSION,
        "valid": report.errors == 0,
        "summary": {
            "files": len(report.files),
            "objects": report.objects,
            "errors": report.errors,
            "warnings": report.warnings,
        },
        "files": [_file_json(f) for f in report.files],
    }
    return json_text(document) + "\n"


def _suite(file: FileReport) -> ET.Element:
    path = xml_text(file.path)
    suite = ET.Element("testsuite", name=path)
    failures = errors = 0
    if file.error:
        errors += 1
        case = ET.SubElement(suite, "testcase", classname=path, name="(file)", file=path)
        message = xml_text(file.error.message)
        error = ET.SubElement(case, "error", type=xml_text(file.error.code), message=message)
        error.text = message
    for obj in file.objects:
        name = xml_text(f"{obj.kind}/{obj.name}")
        case = ET.SubElement(suite, "testcase", classname=path, name=name, file=path)
        for cause in obj.causes:
            said = xml_text(f"{cause.field}: {cause.message}" if cause.field else cause.message)
            failure = ET.SubElement(case, "failure", type=xml_text(cause.code), message=said)
            failure.text = said
        if obj.warnings:
            ET.SubElement(case, "system-out").text = "".join(
                f"warning: {xml_text(w)}\n" for w in obj.warnings
            )
        failures += 1 if obj.causes else 0
    tests = len(file.objects) + (1 if file.error else 0)
    suite.set("tests", str(tests))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    suite.set("skipped", "0")
    return suite


def render_junit(report: LintReport) -> str:
    """Suites are files with something to say (objects of ours, or an error); `failures`
    counts failed test cases, as JUnit does, each case holding one `<failure>` per cause."""
    root = ET.Element("testsuites", name=PROG)
    suites = [_suite(f) for f in report.files if f.objects or f.error]
    for name in ("tests", "failures", "errors"):
        root.set(name, str(sum(int(s.get(name) or 0) for s in suites)))
    root.extend(suites)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def escape_data(value: str) -> str:
    """The Actions toolkit's escaping of a command's message (`escapeData`)."""
    return value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(value: str) -> str:
    """The Actions toolkit's escaping of a command property (`escapeProperty`)."""
    return escape_data(value).replace(":", "%3A").replace(",", "%2C")


def workflow_command(
    command: Literal["error", "warning", "notice"], message: str, **properties: str | int | None
) -> str:
    """One GitHub Actions workflow command (`::error file=...,line=...::message`), message and
    properties escaped as the Actions toolkit does, properties that are None left out; control
    characters are shown escaped first (:func:`shared.cli.escape.text`), so no ANSI sequence
    or other control reaches the log."""
    props = ",".join(
        f"{key}={escape_property(text(value))}"
        for key, value in properties.items()
        if value is not None
    )
    return f"::{command} {props}::{escape_data(text(message, keep_newlines=True))}\n"


def render_github(report: LintReport) -> str:
    """Workflow commands GitHub shows as annotations on the pull request: an error per unreadable
    file and per cause, a warning per warning."""
    lines = []
    for file in report.files:
        if file.error:
            lines.append(
                workflow_command(
                    "error", file.error.message, file=file.path, line=file.error.line, title=PROG
                )
            )
    for line in report.lines:
        title = f"{line.name}: {line.finding.field}" if line.finding.field else line.name
        lines.append(workflow_command("error", line.finding.message, file=line.path, title=title))
    for file in report.files:
        for obj in file.objects:
            lines += [
                workflow_command("warning", w, file=file.path, title=obj.name) for w in obj.warnings
            ]
    return "".join(lines)
