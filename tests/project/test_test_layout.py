"""Tests mirror the tree (docs/testing.md, "Where tests live"; docs/conventions.md rule 12).

A test module under tests/shared/, tests/webhook/ or tests/reconciler/ sits in the folder that
mirrors a package and is named after a module of it (`test_<module>.py`, or
`test_<module>_<aspect>.py` for a second file). Other test modules live at the top of tests/ or in
the folders docs/testing.md names for what they span. Every module without a test file of its
name is listed in docs/testing.md with the tests that cover it, and only such modules are.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
DOC = ROOT / "docs" / "testing.md"
MIRRORED = ("shared", "webhook", "reconciler")
SPANNING = ("chart", "e2e", "project")
HELPERS = ("controlplane", "fixtures")


def packages() -> dict[str, set[str]]:
    """Package folder (relative, e.g. "shared/core/base") -> its module names."""
    found: dict[str, set[str]] = {}
    for top in MIRRORED:
        for init in (ROOT / top).rglob("__init__.py"):
            found[init.parent.relative_to(ROOT).as_posix()] = {
                p.stem for p in init.parent.glob("*.py") if p.stem != "__init__"
            }
    return found


def all_test_files() -> list[Path]:
    return sorted(
        p
        for p in TESTS.rglob("test_*.py")
        if p.relative_to(TESTS).parts[0] not in HELPERS and "__pycache__" not in p.parts
    )


def module_named_by(stem: str, modules: set[str]) -> str | None:
    """The module a test file `test_<module>[_<aspect>]` names: the longest that fits."""
    name = stem.removeprefix("test_")
    fits = [m for m in modules if name == m or name.startswith(f"{m}_")]
    return max(fits, key=len) if fits else None


def listed_untested() -> set[str]:
    """The modules of the table under "Modules without a test file of their name"."""
    section = DOC.read_text().split("### Modules without a test file of their name", 1)[1]
    section = section.split("\n#", 1)[0]
    return set(re.findall(r"^\| `([a-z_/]+\.py)` \|", section, re.M))


@pytest.mark.parametrize("path", all_test_files(), ids=lambda p: p.relative_to(TESTS).as_posix())
def test_each_test_module_sits_where_the_layout_says(path: Path) -> None:
    folder = path.parent.relative_to(TESTS)
    if not folder.parts or folder.parts[0] in SPANNING:
        return
    assert folder.parts[0] in MIRRORED, f"tests/{folder}/ is no folder docs/testing.md names"
    modules = packages().get(folder.as_posix())
    assert modules is not None, f"tests/{folder}/ mirrors no package: is there {folder}/?"
    assert module_named_by(path.stem, modules), f"{path.name} names no module of {folder}/"


def test_every_folder_of_tests_is_a_package() -> None:
    folders = {p.parent for p in all_test_files()} | {TESTS / name for name in SPANNING}
    missing = sorted(
        f.relative_to(ROOT).as_posix() for f in folders if not (f / "__init__.py").exists()
    )
    assert not missing, f"no __init__.py (module names must stay unique): {missing}"


def test_modules_without_a_test_of_their_name_are_the_ones_listed() -> None:
    untested = {
        f"{folder}/{module}.py"
        for folder, modules in packages().items()
        for module in modules
        if not (TESTS / folder / f"test_{module}.py").exists()
    }
    listed = listed_untested()
    assert sorted(untested - listed) == [], "add these to docs/testing.md with what covers them"
    assert sorted(listed - untested) == [], "listed in docs/testing.md, but tested or gone"


@pytest.mark.parametrize(
    ("stem", "expected"),
    [
        pytest.param("test_cache", "cache", id="exact"),
        pytest.param("test_cache_property", "cache", id="aspect"),
        pytest.param("test_pod_vgpu", "pod_vgpu", id="longest-module-wins"),
        pytest.param("test_pod_extra", "pod", id="aspect-of-a-shorter-module"),
        pytest.param("test_cachex", None, id="no-prefix-match-without-underscore"),
        pytest.param("test_unknown", None, id="no-module"),
    ],
)
def test_the_module_a_test_names(stem: str, expected: str | None) -> None:
    modules = {"cache", "pod", "pod_vgpu"}
    assert module_named_by(stem, modules) == expected
