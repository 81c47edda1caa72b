"""Another commit's code, importable as `gpuclass`, for benchmarks that compare before and after.

`export(ref, folder)` writes `ref`'s `shared/`, `webhook/` and `reconciler/` (`git archive`) into
`folder` and returns the folder to put first on `PYTHONPATH`: it holds a `gpuclass` namespace
package whose subpackages link to the exported folders, as pyproject.toml maps them. The
editable install's finder comes after `PYTHONPATH`, so a process started with it imports the
old code and this interpreter's dependencies.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PARTS = ("shared", "reconciler", "webhook")


def export(ref: str, folder: Path) -> Path:
    """`ref`'s tree exported into `folder`; the returned folder goes on `PYTHONPATH`."""
    tree = folder / "tree"
    tree.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref, *PARTS], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    package = folder / "path" / "gpuclass"
    package.mkdir(parents=True)
    for part in PARTS:
        (package / part).symlink_to(tree / part)
    return folder / "path"


def short(ref: str) -> str:
    """`ref` as an abbreviated commit hash (for the printed labels)."""
    return subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", ref],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
