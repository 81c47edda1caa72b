"""One name per concept: no class name is defined twice in the package.

A reader who meets `Plan` or `Policy` should not have to ask which one (docs/conventions.md rule 27): the
resolution's units per class and the CLI's catalog-change preview were both `Plan`, the
platform settings and the certificate lifetimes both `Policy`, the annotation entry and the
reconciler's stored class both `ClassEntry`, the status read model and the status dataclass
both `Capacity`. They are `UnitPlan`, `CertPolicy`, `StoredClass` and `CapacityStatus` now,
and this test keeps it so (it runs in `make test`, and shows itself failing on a planted twin).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("shared", "webhook", "reconciler")


def class_twins(root: Path) -> dict[str, list[str]]:
    """Class names defined in more than one place under `root`'s package folders."""
    where: dict[str, list[str]] = defaultdict(list)
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    where[node.name].append(f"{path.relative_to(root)}:{node.lineno}")
    return {name: places for name, places in where.items() if len(places) > 1}


def test_no_class_name_is_defined_twice() -> None:
    assert class_twins(ROOT) == {}


def test_a_planted_twin_is_found(tmp_path: Path) -> None:
    for folder in FOLDERS:
        (tmp_path / folder).mkdir()
    (tmp_path / "shared" / "a.py").write_text("class Plan:\n    pass\n")
    (tmp_path / "webhook" / "b.py").write_text("class Plan:\n    pass\n")
    assert class_twins(tmp_path) == {"Plan": ["shared/a.py:1", "webhook/b.py:1"]}
