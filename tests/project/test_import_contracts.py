"""The import contracts of pyproject.toml hold, and each one fails on the wrong arrow it names.

`lint-imports` (import-linter) checks the layers of the core, the purity of the core and
of the shells' pure parts, the independence of the three shells, the I/O edge below them
and the one kubernetes_asyncio adapter per binary (docs/architecture.md, "Boundaries").
`make lint` and `make test` run it; here each contract is shown to break when a copy of
the tree gets the import it forbids.

What import-linter cannot see is checked by `ast` below: dynamic imports (which would
hide an arrow from the tool), the bare folder names, and test modules importing each other.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
FOLDERS = ("shared", "webhook", "reconciler")


def run_contracts(root: Path, *, contract: str | None = None) -> subprocess.CompletedProcess[str]:
    args = [str(LINT_IMPORTS), "--no-cache", *(["--contract", contract] if contract else [])]
    return subprocess.run(
        args,
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_tree_keeps_every_contract() -> None:
    result = run_contracts(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.fixture
def tree_copy(tmp_path: Path) -> Path:
    """The three folders under `gpuclass/` in a temporary directory, with pyproject.toml."""
    for folder in FOLDERS:
        shutil.copytree(
            ROOT / folder,
            tmp_path / "gpuclass" / folder,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    return tmp_path


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        pytest.param(
            "shared/core/model/selection.py",
            "from gpuclass.shared.core.admission import decisions",
            "core-layers",
            id="model-imports-admission",
        ),
        pytest.param(
            "shared/core/base/names.py",
            "from gpuclass.shared.core.status import catalog",
            "core-layers",
            id="base-imports-status",
        ),
        pytest.param(
            "shared/core/status/catalog.py", "import asyncio", "pure-core", id="core-asyncio"
        ),
        pytest.param(
            "shared/core/admission/review.py",
            "from gpuclass.shared.files import loader",
            "pure-core",
            id="core-imports-edge",
        ),
        pytest.param(
            "shared/core/model/snapshot.py", "import pathlib", "pure-core", id="core-files"
        ),
        pytest.param(
            "reconciler/state/usage.py", "import time", "pure-shell-state", id="state-clock"
        ),
        pytest.param(
            "reconciler/state/store.py",
            "from gpuclass.reconciler.api import client",
            "pure-shell-state",
            id="state-imports-adapter",
        ),
        pytest.param(
            "shared/kube/apicollections.py",
            "import asyncio",
            "pure-edge-tables",
            id="edge-table-io",
        ),
        pytest.param(
            "webhook/app.py",
            "from gpuclass.reconciler import metrics",
            "shells-independent",
            id="webhook-imports-reconciler",
        ),
        pytest.param(
            "shared/cli/lint.py",
            "from gpuclass.webhook import paths",
            "shells-independent",
            id="cli-imports-webhook",
        ),
        pytest.param(
            "shared/files/loader.py",
            "from gpuclass.shared.cli import lint",
            "edge-below-shells",
            id="edge-imports-cli",
        ),
        pytest.param(
            "reconciler/worker.py",
            "import kubernetes_asyncio",
            "one-kube-adapter",
            id="second-adapter",
        ),
    ],
)
def test_each_contract_breaks_on_its_wrong_arrow(
    tree_copy: Path, module: str, line: str, contract: str
) -> None:
    assert run_contracts(tree_copy, contract=contract).returncode == 0, "kept before the change"
    with (tree_copy / "gpuclass" / module).open("a") as f:
        f.write(f"\n{line}  # noqa\n")
    result = run_contracts(tree_copy, contract=contract)
    assert result.returncode != 0, result.stdout
    assert "BROKEN" in result.stdout


# What the tool cannot see.


def python_files(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def imported_modules(source: str) -> Iterator[str]:
    """Every absolute module name `source` imports (`from a import b` yields a and a.b)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def dynamic_imports(source: str) -> list[str]:
    """Calls that import or build a module or class by name, which import-linter cannot follow."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level:
            found.append(f"relative import from {'.' * node.level}{node.module or ''}")
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name in ("import_module", "__import__"):
            found.append(name)
        elif name == "type" and len(node.args) == 3:
            found.append("type() with three arguments")
    return found


@pytest.mark.parametrize("path", python_files(*FOLDERS), ids=rel)
def test_package_imports_are_static_and_absolute(path: Path) -> None:
    assert dynamic_imports(path.read_text()) == []


@pytest.mark.parametrize(
    ("source", "found"),
    [
        pytest.param("import importlib\nimportlib.import_module('x')", ["import_module"], id="im"),
        pytest.param("__import__('time')", ["__import__"], id="dunder"),
        pytest.param("K = type('K', (object,), {})", ["type() with three arguments"], id="type"),
        pytest.param("from . import x", ["relative import from ."], id="relative"),
        pytest.param("import time\nkind = type(x)", [], id="plain-type-call-passes"),
    ],
)
def test_the_dynamic_import_check_can_fail(source: str, found: list[str]) -> None:
    assert dynamic_imports(source) == found


# Installed, the folders exist only as gpuclass.shared, gpuclass.webhook, gpuclass.reconciler:
# a bare `import shared` would find PyPI's package of that name, or nothing.
@pytest.mark.parametrize("path", python_files(*FOLDERS, "tests", "benchmarks", "examples"), ids=rel)
def test_nothing_imports_the_bare_folder_names(path: Path) -> None:
    bare = [n for n in imported_modules(path.read_text()) if n.split(".")[0] in FOLDERS]
    assert bare == []


@pytest.mark.parametrize("path", python_files("tests"), ids=rel)
def test_tests_share_builders_not_test_modules(path: Path) -> None:
    """Helpers shared by several test files live in modules such as tests/builders.py."""
    found = imported_modules(path.read_text())
    assert sorted({n for n in found if re.match(r"(gpuclass\.)?tests\.(.+\.)?test_", n)}) == []
