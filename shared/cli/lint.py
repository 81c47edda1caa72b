"""The verdict of `gpuclass validate` on a set of manifest files (docs/contract.md 7.1).

Pure: the files arrive already read (their objects, or why they could not be read) and a
:class:`LintReport` comes out; `shared/cli/lintformat.py` renders it as text, JSON, JUnit or
GitHub workflow commands. Each GPUClass goes through
:func:`shared.core.model.validation.validate_class`, the webhook's own verdict; on top of it come
the checks only a set of manifests allows: the kind and apiVersion a manifest claims,
one definition per class name, and one class per resourceName.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from gpuclass.shared.core.base import names
from gpuclass.shared.core.model.validation import validate_class

API_VERSION = names.API_VERSION
NO_NAME = "(no name)"


@dataclass(frozen=True, slots=True)
class Finding:
    """One cause (an error) on one object: where, what to do, and a stable code."""

    field: str
    message: str
    code: str


@dataclass(slots=True)
class ObjectReport:
    """One manifest's findings: its errors (causes) and warnings. Only GPUClasses and near-miss
    kinds are reported; other objects of a GitOps folder are skipped."""

    kind: str
    name: str
    causes: list[Finding] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class FileError:
    """Why a whole file could not be read: its objects are unknown."""

    code: str
    message: str
    line: int | None = None


@dataclass(slots=True)
class FileReport:
    """One file: the reports of its objects, or `error` when the file could not be read (then its
    objects are unknown, not valid)."""

    path: str
    objects: list[ObjectReport] = field(default_factory=list)
    error: FileError | None = None


@dataclass(frozen=True, slots=True)
class Line:
    """One printed cause, in the order `-o text` prints them (validation first, then
    the checks across files, as before machine-readable output existed)."""

    path: str
    name: str
    finding: Finding


@dataclass(slots=True)
class LintReport:
    """The whole run, the one value every output format renders: per-file reports, and `lines`,
    every error in the order `-o text` prints them."""

    files: list[FileReport]
    lines: list[Line]

    @property
    def errors(self) -> int:
        """Every error: each cause line plus each unreadable file (the exit code is 1 when this is
        not 0)."""
        return len(self.lines) + sum(1 for f in self.files if f.error)

    @property
    def warnings(self) -> int:
        """Warnings over all objects; they fail the run only with `--fail-on-warn`."""
        return sum(len(o.warnings) for f in self.files for o in f.objects)

    @property
    def objects(self) -> int:
        """Objects reported on; 0 with 0 errors makes the CLI say no GPUClass was found."""
        return sum(len(f.objects) for f in self.files)


@dataclass(frozen=True, slots=True)
class FileInput:
    """One file as read by the CLI: its objects, or why it could not be read; `lint` itself reads
    nothing."""

    path: str
    objects: Sequence[Mapping[str, Any]] = ()
    error: FileError | None = None


Kind = Literal["class", "near-miss", "our-group", "other"]


def _edit_distance_at_most_one(a: str, b: str) -> bool:
    if abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diffs = [i for i in range(len(a)) if a[i] != b[i]]
        return len(diffs) <= 1 or (
            len(diffs) == 2 and diffs[1] == diffs[0] + 1 and a[diffs[0]] == b[diffs[1]]
        )
    short, long_ = (a, b) if len(a) < len(b) else (b, a)
    return any(long_[:i] + long_[i + 1 :] == short for i in range(len(long_)))


def classify(obj: Mapping[str, Any]) -> Kind:
    """Whether a manifest is a GPUClass, a mistyped one, another kind of our API group, or
    something else (skipped, as a GitOps folder holds other objects too)."""
    kind = obj.get("kind")
    if kind == names.KIND:
        return "class"
    folded = kind.lower().replace("-", "").replace("_", "") if isinstance(kind, str) else ""
    if folded in ("gpuclass", "gpuclasses") or (
        folded and _edit_distance_at_most_one(folded, names.KIND.lower())
    ):
        return "near-miss"
    api_version = obj.get("apiVersion")
    if isinstance(api_version, str) and api_version.partition("/")[0] == names.GROUP:
        return "our-group"
    return "other"


def _name(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return name if isinstance(name, str) and name else NO_NAME


def _resource(obj: Mapping[str, Any]) -> object:
    spec = obj.get("spec")
    source = spec.get("source") if isinstance(spec, dict) else None
    plugin = source.get("devicePlugin") if isinstance(source, dict) else None
    return plugin.get("resourceName") if isinstance(plugin, dict) else None


def _shown(value: object) -> str:
    return f'"{value}"' if isinstance(value, str) else "nothing"


def _class_report(obj: Mapping[str, Any]) -> ObjectReport:
    report = ObjectReport(names.KIND, _name(obj))
    api_version = obj.get("apiVersion")
    if api_version != API_VERSION:
        report.causes.append(
            Finding(
                "apiVersion",
                f"must be {API_VERSION} for kind {names.KIND} (got {_shown(api_version)}); "
                "the API server knows no other version",
                "WrongAPIVersion",
            )
        )
    verdict = validate_class(dict(obj), manifest=True)
    report.causes += [Finding(c.field, c.message, c.code) for c in verdict.causes]
    report.warnings += verdict.warnings
    return report


def _other_report(obj: Mapping[str, Any], kind: Kind) -> ObjectReport:
    raw_kind = obj.get("kind")
    shown = raw_kind if isinstance(raw_kind, str) else ""
    report = ObjectReport(shown, _name(obj))
    if kind == "near-miss":
        report.causes.append(
            Finding(
                "kind",
                f'unknown kind "{shown}": the catalog kind is spelled {names.KIND} '
                f"(apiVersion {API_VERSION}); kinds are case-sensitive",
                "UnknownKind",
            )
        )
    else:
        report.warnings.append(
            f"kind {shown or '(none)'} of {obj.get('apiVersion')} is not a {names.KIND}: not checked"
        )
    return report


def lint(files: Sequence[FileInput]) -> LintReport:
    """Every file's objects checked, each cause once, in a stable order."""
    reports: list[FileReport] = []
    lines: list[Line] = []
    classes: list[tuple[str, ObjectReport, Mapping[str, Any]]] = []
    for entry in files:
        report = FileReport(entry.path, error=entry.error)
        for obj in entry.objects:
            kind = classify(obj)
            if kind == "other":
                continue
            if kind == "class":
                obj_report = _class_report(obj)
                classes.append((entry.path, obj_report, obj))
            else:
                obj_report = _other_report(obj, kind)
            report.objects.append(obj_report)
            lines += [Line(entry.path, obj_report.name, c) for c in obj_report.causes]
        reports.append(report)
    for path, obj_report, finding in _across_files(classes):
        obj_report.causes.append(finding)
        lines.append(Line(path, obj_report.name, finding))
    return LintReport(reports, lines)


def _across_files(
    classes: Sequence[tuple[str, ObjectReport, Mapping[str, Any]]],
) -> list[tuple[str, ObjectReport, Finding]]:
    """One definition per class name, one class per resourceName (contract 7.1)."""
    found: list[tuple[str, ObjectReport, Finding]] = []
    first_name: dict[str, str] = {}
    first_resource: dict[str, str] = {}
    for path, report, obj in classes:
        name = report.name
        if name != NO_NAME and name in first_name:
            where = "earlier in this file" if first_name[name] == path else f"in {first_name[name]}"
            found.append(
                (
                    path,
                    report,
                    Finding(
                        "metadata.name",
                        f"class {name} is also defined {where}; define each class once "
                        "(the API server would keep only one of them)",
                        "DuplicateName",
                    ),
                )
            )
        first_name.setdefault(name, path)
        resource = _resource(obj)
        if isinstance(resource, str):
            if resource in first_resource and first_resource[resource] != name:
                found.append(
                    (
                        path,
                        report,
                        Finding(
                            "spec.source.devicePlugin.resourceName",
                            f"{resource} is already used by class {first_resource[resource]}; "
                            "use a different advertised resource for each offer",
                            "ResourceNameInUse",
                        ),
                    )
                )
            first_resource.setdefault(resource, name)
    return found
