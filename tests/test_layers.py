"""Layer boundaries (docs/conventions.md rules 1 and 10), checked by parsing every import with `ast`.

- The core (every module directly in shared/ except the command line, cli.py and
  explaincmd.py) imports neither the
  binaries nor the I/O edge (shared.runtime, shared.cli) nor web, Kubernetes-client
  or logging-setup libraries, and never calls logging.basicConfig.
- webhook/ and reconciler/ do not import each other.
- kubernetes_asyncio is imported only by the three adapter modules.

Imports anywhere in a module count (also inside functions), as do relative imports
and `importlib.import_module("...")` / `__import__("...")` with a literal name.
The packages are walked as they are on disk, so the test holds for whatever exists.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT / "shared"

PACKAGE = "gpuclass"  # the one import name the three folders install under (pyproject.toml)
CORE_FORBIDDEN = (
    "gpuclass.webhook",
    "gpuclass.reconciler",
    "gpuclass.shared.runtime",
    "gpuclass.shared.cli",
    "fastapi",
    "uvicorn",
    "starlette",
    "kubernetes_asyncio",
    "httpx",
    "logging.config",
)
KUBE_ADAPTERS = {"shared/runtime/kubeclient.py", "webhook/kube.py", "reconciler/kube.py"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([PACKAGE, *parts])


def imported_modules(source: str, module: str, *, is_package: bool = False) -> Iterator[str]:
    """Every module name `source` imports, fully qualified (`from a import b` yields a and a.b)."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)] if node.level > 1 else anchor
                base = ".".join([*anchor, *([base] if base else [])])
            yield base
            for alias in node.names:
                yield f"{base}.{alias.name}"
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = (
                func.attr
                if isinstance(func, ast.Attribute)
                else func.id
                if isinstance(func, ast.Name)
                else ""
            )
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                yield node.args[0].value


def calls_basic_config(source: str) -> bool:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr == "basicConfig":
                return True
            if isinstance(func, ast.Name) and func.id == "basicConfig":
                return True
        if (
            isinstance(node, ast.ImportFrom)
            and node.module == "logging"
            and any(alias.name == "basicConfig" for alias in node.names)
        ):
            return True
    return False


def matches(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def violations(path: Path, forbidden: tuple[str, ...]) -> list[str]:
    source = path.read_text()
    names = imported_modules(source, module_name(path), is_package=path.name == "__init__.py")
    return sorted({n for n in names for f in forbidden if matches(n, f)})


def python_files(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py")) if (ROOT / folder).is_dir() else []


CLI_EDGE = frozenset({"cli.py", "explaincmd.py"})
"""The offline command line: I/O edge beside the core, not part of it."""
CORE = sorted(p for p in SHARED.glob("*.py") if p.name not in CLI_EDGE)
ALL = [p for folder in ("shared", "webhook", "reconciler") for p in python_files(folder)]


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_the_core_is_where_the_architecture_says() -> None:
    names = {p.name for p in CORE}
    assert {
        "admission.py",
        "resolution.py",
        "availability.py",
        "snapshot.py",
        "validation.py",
    } <= names
    assert "cli.py" not in names and "explaincmd.py" not in names
    assert "explain.py" in names, "the explanation itself is pure core"


@pytest.mark.parametrize("path", CORE, ids=rel)
def test_core_imports_no_edge_or_binary(path: Path) -> None:
    assert violations(path, CORE_FORBIDDEN) == []


@pytest.mark.parametrize("path", CORE, ids=rel)
def test_core_sets_up_no_logging(path: Path) -> None:
    assert not calls_basic_config(path.read_text())


@pytest.mark.parametrize("path", python_files("webhook"), ids=rel)
def test_webhook_does_not_import_reconciler(path: Path) -> None:
    assert violations(path, ("gpuclass.reconciler",)) == []


@pytest.mark.parametrize("path", python_files("reconciler"), ids=rel)
def test_reconciler_does_not_import_webhook(path: Path) -> None:
    assert violations(path, ("gpuclass.webhook",)) == []


# Installed, the folders exist only as gpuclass.shared, gpuclass.webhook, gpuclass.reconciler:
# a bare `import shared` would find PyPI's package of that name, or nothing.
BARE_NAMES = ("shared", "webhook", "reconciler")
PROJECT_PYTHON = [
    *ALL,
    *sorted((ROOT / "tests").rglob("*.py")),
    *sorted((ROOT / "benchmarks").rglob("*.py")),
    *sorted((ROOT / "examples").rglob("*.py")),
]


@pytest.mark.parametrize("path", PROJECT_PYTHON, ids=rel)
def test_nothing_imports_the_bare_folder_names(path: Path) -> None:
    assert violations(path, BARE_NAMES) == []


TESTS = sorted((ROOT / "tests").rglob("*.py"))


@pytest.mark.parametrize("path", TESTS, ids=rel)
def test_tests_share_builders_not_test_modules(path: Path) -> None:
    """Helpers shared by several test files live in modules such as tests/builders.py, never in a test_ module."""
    found = imported_modules(path.read_text(), "tests.x")
    assert sorted({n for n in found if re.match(r"(gpuclass\.)?tests\.(.+\.)?test_", n)}) == []


@pytest.mark.parametrize("path", [p for p in ALL if rel(p) not in KUBE_ADAPTERS], ids=rel)
def test_only_the_adapters_import_kubernetes_asyncio(path: Path) -> None:
    assert violations(path, ("kubernetes_asyncio",)) == []


# The checker itself: each rule must be able to fail.


@pytest.mark.parametrize(
    ("source", "module", "found"),
    [
        pytest.param("import fastapi", "gpuclass.shared.x", ["fastapi"], id="plain-import"),
        pytest.param(
            "from starlette.requests import Request",
            "gpuclass.shared.x",
            ["starlette.requests", "starlette.requests.Request"],
            id="from-import",
        ),
        pytest.param(
            "from gpuclass.shared import runtime",
            "gpuclass.shared.x",
            ["gpuclass.shared.runtime"],
            id="from-package-import-submodule",
        ),
        pytest.param(
            "from gpuclass.shared.runtime.loader import load_snapshot",
            "gpuclass.shared.x",
            ["gpuclass.shared.runtime.loader", "gpuclass.shared.runtime.loader.load_snapshot"],
            id="deep",
        ),
        pytest.param(
            "from . import cli", "gpuclass.shared.x", ["gpuclass.shared.cli"], id="relative-sibling"
        ),
        pytest.param(
            "from .runtime import clock",
            "gpuclass.shared.x",
            ["gpuclass.shared.runtime", "gpuclass.shared.runtime.clock"],
            id="relative-subpackage",
        ),
        pytest.param(
            "from .. import webhook",
            "gpuclass.shared.x.y",
            ["gpuclass.shared.webhook"],
            id="relative-two-levels",
        ),
        pytest.param(
            "def f():\n    import httpx\n", "gpuclass.shared.x", ["httpx"], id="inside-function"
        ),
        pytest.param(
            "import importlib\nimportlib.import_module('uvicorn')",
            "gpuclass.shared.x",
            ["uvicorn"],
            id="import-module",
        ),
        pytest.param(
            "__import__('kubernetes_asyncio.client')",
            "gpuclass.shared.x",
            ["kubernetes_asyncio.client"],
            id="dunder-import",
        ),
        pytest.param(
            "import logging.config", "gpuclass.shared.x", ["logging.config"], id="logging-config"
        ),
        pytest.param(
            "import logging\nimport httpxx\nfrom gpuclass.shared import names",
            "gpuclass.shared.x",
            [],
            id="near-misses-pass",
        ),
    ],
)
def test_checker_finds_forbidden_imports(source: str, module: str, found: list[str]) -> None:
    names = imported_modules(source, module)
    forbidden = (*CORE_FORBIDDEN, "gpuclass.shared.webhook")
    assert sorted({n for n in names for f in forbidden if matches(n, f)}) == found


@pytest.mark.parametrize(
    ("source", "calls"),
    [
        pytest.param("import logging\nlogging.basicConfig(level=10)", True, id="attribute-call"),
        pytest.param("from logging import basicConfig", True, id="imported"),
        pytest.param(
            "import logging\nlog = logging.getLogger(__name__)", False, id="get-logger-is-fine"
        ),
    ],
)
def test_checker_finds_basic_config(source: str, calls: bool) -> None:
    assert calls_basic_config(source) is calls
