"""docs/architecture.md's tree is the tree on disk (docs/conventions.md: keep the picture true).

The "The tree" block lists every package folder of shared/, webhook/ and reconciler/ with
the modules it holds. A module or package added, moved, renamed or removed without the
list changing fails here; so does a folder of the picture that does not exist.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
TOP = ("shared", "webhook", "reconciler")


def listed_tree(text: str) -> dict[str, set[str]]:
    """Folder (relative path) -> module names, from the ```text block after "## The tree"."""
    section = text.split("## The tree", 1)[1]
    block = re.search(r"```text\n(.*?)```", section, re.S)
    assert block, "docs/architecture.md: no ```text block under '## The tree'"
    tree: dict[str, set[str]] = {}
    stack: list[tuple[int, str]] = []
    for line in block.group(1).splitlines():
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        folder, _, modules = line.strip().partition("/")
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = "/".join([*(name for _, name in stack), folder])
        assert path not in tree, f"{path}/ listed twice"
        tree[path] = set(modules.split())
        stack.append((indent, folder))
    return tree


def disk_tree() -> dict[str, set[str]]:
    tree: dict[str, set[str]] = {}
    for top in TOP:
        for init in sorted((ROOT / top).rglob("__init__.py")):
            folder = init.parent
            tree[folder.relative_to(ROOT).as_posix()] = {
                p.stem for p in folder.glob("*.py") if p.stem != "__init__"
            }
    return tree


def test_every_package_and_module_on_disk_is_in_the_tree() -> None:
    listed, disk = listed_tree(DOC.read_text()), disk_tree()
    assert sorted(listed) == sorted(disk), "package folders differ from docs/architecture.md"
    for folder, modules in disk.items():
        assert listed[folder] == modules, (
            f"{folder}/: not in the doc {sorted(modules - listed[folder])}, "
            f"not on disk {sorted(listed[folder] - modules)}"
        )


def test_every_folder_of_the_tree_has_a_row_in_who_owns_what() -> None:
    text = DOC.read_text()
    rows = set(re.findall(r"^\| `([a-z/_]+)/` \|", text, re.M))
    assert set(listed_tree(text)) - {"shared"} <= rows


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        pytest.param(
            "a/   x y\n  b/   z\n",
            {"a": {"x", "y"}, "a/b": {"z"}},
            id="nested",
        ),
        pytest.param(
            "a/\n  b/  x\n  c/  y\nd/  w\n",
            {"a": set(), "a/b": {"x"}, "a/c": {"y"}, "d": {"w"}},
            id="siblings-and-back-out",
        ),
    ],
)
def test_the_tree_reader(block: str, expected: dict[str, set[str]]) -> None:
    assert listed_tree(f"## The tree\n\n```text\n{block}```\n") == expected
