"""docs/architecture.md's picture names the modules as they are (docs/conventions.md: keep the picture true).

Every word in a box is either a module of that box's folder or one of the few plain
words listed here; every module of the core and of the shared I/O edge is in its box.
A renamed, moved or deleted module, or a new core module left out, fails this test.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"

# Words of the picture that are not module names.
PLAIN = {
    "webhook": {"webhook", "connection", "limits", "hot", "path", "catalog", "from", "files", "or",
                "the", "api"},
    "cli": {"shared", "cli", "py", "gpuclass", "validate", "review", "status", "explain"},
    "reconciler": {"reconciler", "manager", "informers", "lease", "offline", "twin"},
    "shared": {"shared", "the", "pure", "core", "values", "in", "decisions", "out", "no", "i", "o",
               "clock", "environment", "rules", "world", "words", "render", "can", "a", "vm",
               "start", "now"},
    "shared/runtime": {"shared", "runtime", "the", "i", "o", "all", "three", "share", "files",
                       "snapshot", "one", "reflector", "http", "client", "and"},
}  # fmt: skip


def picture() -> list[str]:
    text = DOC.read_text()
    block = re.search(r"```\n(.*?)```", text, re.S)
    assert block, "docs/architecture.md has no picture"
    return block.group(1).splitlines()


def boxes() -> dict[str, set[str]]:
    """Words per box: the three shells side by side, then the core, then the I/O edge."""
    words: dict[str, set[str]] = {key: set() for key in PLAIN}
    wide = None
    for line in picture():
        cells = line.split("|")
        if len(cells) == 7:  # | webhook |  | cli |  | reconciler |
            for key, cell in zip(("webhook", "cli", "reconciler"), cells[1:6:2], strict=True):
                words[key] |= _words(cell)
        elif len(cells) == 3:
            header = cells[1].strip()
            if header.startswith("shared/runtime/"):
                wide = "shared/runtime"
            elif header.startswith("shared/"):
                wide = "shared"
            assert wide, f"a wide box before its header: {line!r}"
            words[wide] |= _words(cells[1])
    return words


def _words(cell: str) -> set[str]:
    return {w.lower() for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", cell)}


def modules(folder: str) -> set[str]:
    return {p.stem for p in (ROOT / folder).glob("*.py") if p.stem != "__init__"}


def test_every_word_in_a_box_is_a_module_of_its_folder_or_a_plain_word() -> None:
    for key, words in boxes().items():
        folder = "shared" if key == "cli" else key
        unknown = words - modules(folder) - PLAIN[key]
        assert not unknown, (
            f"docs/architecture.md names {sorted(unknown)} in {key}/: no such module"
        )


def test_every_core_and_edge_module_is_in_its_box() -> None:
    found = boxes()
    missing_core = modules("shared") - {"cli", "explaincmd"} - found["shared"]  # the CLI edge
    assert not missing_core, f"core modules missing from the picture: {sorted(missing_core)}"
    missing_edge = modules("shared/runtime") - found["shared/runtime"]
    assert not missing_edge, (
        f"shared/runtime modules missing from the picture: {sorted(missing_edge)}"
    )


def test_the_shell_boxes_name_their_folders_entry_points() -> None:
    found = boxes()
    assert {"app", "server", "state", "kube"} <= found["webhook"] & modules("webhook")
    assert {"manager", "cache", "worker", "sources", "kube"} <= found["reconciler"] & modules(
        "reconciler"
    )
