"""`gpuclass validate`: lint catalog manifests for a GitOps repository (the checks are
:mod:`shared.cli.lint`, the formats :mod:`shared.cli.lintformat`). Reads only files.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpuclass.shared.cli.lint import FileError, FileInput, lint
from gpuclass.shared.cli.lintformat import FORMATS, Format, render
from gpuclass.shared.files.loader import LoadError, files_under, iter_objects


def add_parser(sub: Any) -> None:
    """Register `validate` on the `gpuclass` sub-parsers."""
    v = sub.add_parser(
        "validate",
        help="lint GPUClass manifests; exit 0 if all are valid, 1 otherwise",
        description="Lint GPUClass manifests: every file is read and every cause reported. "
        "Exit 0 when all are valid, 1 otherwise (and with --fail-on-warn, on warnings).",
    )
    v.add_argument(
        "-o",
        "--output",
        choices=FORMATS,
        default="text",
        help="text (FILE: NAME: FIELD: message), json, junit (JUnit XML) or github "
        "(GitHub Actions annotations); default %(default)s",
    )
    v.add_argument("--fail-on-warn", action="store_true", help="exit 1 on warnings too")
    v.add_argument("files", nargs="+", metavar="FILE", help="manifest files or folders")


def read_inputs(paths: Sequence[str]) -> list[FileInput]:
    """Every file under the paths, each read on its own: one that cannot be read is reported
    and the others are still checked. A file named twice is read once."""
    inputs: list[FileInput] = []
    seen: set[Path] = set()
    for raw in paths:
        try:
            found = files_under([raw])
        except LoadError as exc:
            inputs.append(FileInput(raw, error=FileError(exc.code, exc.reason, exc.line)))
            continue
        for path in found:
            key = path.resolve()
            if key in seen:
                continue
            seen.add(key)
            try:
                objects = list(iter_objects(path, strict_keys=True))
            except LoadError as exc:
                inputs.append(FileInput(str(path), error=FileError(exc.code, exc.reason, exc.line)))
                continue
            inputs.append(FileInput(str(path), objects))
    return inputs


def run_validate(
    files: Sequence[str], output: Format = "text", *, fail_on_warn: bool = False
) -> int:
    """`gpuclass validate`: 1 when any file or object has an error (or, with `fail_on_warn`, a
    warning), else 0; finding no GPUClass at all is said on stderr but is not a failure."""
    report = lint(read_inputs(files))
    rendered = render(report, output)
    sys.stdout.write(rendered.out)
    sys.stderr.write(rendered.err)
    if report.objects == 0 and report.errors == 0:
        print("gpuclass validate: no GPUClass objects found", file=sys.stderr)
    if report.errors:
        return 1
    return 1 if fail_on_warn and report.warnings else 0
