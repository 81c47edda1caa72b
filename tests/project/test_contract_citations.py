"""Every citation in the repository resolves to something the repository holds.

Code, tests and docs cite the contract (`docs/contract.md section 6`, `contract.md 4.5`) and the
conventions (`docs/conventions.md rule 16`). A clone of this repository alone must be able to follow
each one, so this test reads every tracked text file, finds the citations, and checks that the cited
section, rule or file exists. It also refuses references to handbook files the repository does not
contain.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".tpl", ".json", ".txt", ".toml", ".sh", ""}

# "contract.md section 4", "contract.md sections 1 and 6", "contract.md 4.1",
# "contract.md section 4 rule 5", "contract.md section 6, in-use finalizer".
CONTRACT_CITATION = re.compile(
    r"contract\.md(?:#section-\d+)?\s+(?:(?:sections?\s+(?P<sections>\d+(?:\s*(?:,|and)\s*\d+)*)"
    r"(?:\s+rule\s+(?P<rule>\d+))?)|(?P<dotted>\d+\.\d+))"
)
CONVENTION_CITATION = re.compile(
    r"conventions\.md\s+rules?\s+(?P<rules>\d+(?:\s*(?:,|and)\s*\d+)*)"
)
MISSING_FILES = re.compile(r"CONTRACT\.md|STYLE\.md|STYLE rule|gpuclass-catalog\.txt|\.\./shared/")


def tracked_text_files() -> list[Path]:
    listing = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    files = [ROOT / name for name in listing]
    return [
        f
        for f in files
        if f.is_file()
        and f.suffix in TEXT_SUFFIXES
        and "fixtures/admission" not in f.as_posix()
        and f.name != "go.sum"
    ]


def contract_anchors() -> tuple[set[int], set[str]]:
    text = (ROOT / "docs" / "contract.md").read_text()
    sections = {int(n) for n in re.findall(r'<a id="section-(\d+)"></a>', text)}
    rules = set(re.findall(r"^\s*-?\s*(\d+\.\d+)\s", text, flags=re.MULTILINE))
    rules |= set(re.findall(r"\((\d+\.\d+)\)", text))
    return sections, rules


def convention_numbers() -> set[int]:
    text = (ROOT / "docs" / "conventions.md").read_text()
    return {int(n) for n in re.findall(r"^(\d+)\.\s", text, flags=re.MULTILINE)}


def numbers(group: str) -> list[int]:
    return [int(n) for n in re.findall(r"\d+", group)]


def test_every_contract_citation_resolves() -> None:
    sections, rules = contract_anchors()
    assert sections == set(range(1, 8)), "the contract has sections 1-7"
    broken: list[str] = []
    seen = 0
    for path in tracked_text_files():
        for match in CONTRACT_CITATION.finditer(path.read_text(errors="replace")):
            seen += 1
            where = f"{path.relative_to(ROOT)}: {match.group(0)!r}"
            if match.group("dotted"):
                dotted = match.group("dotted")
                if dotted not in rules:
                    broken.append(where)
                continue
            cited = numbers(match.group("sections"))
            if any(n not in sections for n in cited):
                broken.append(where)
            if match.group("rule") and f"{cited[0]}.{match.group('rule')}" not in rules:
                broken.append(where)
    assert seen >= 30, f"only {seen} citations found: is the pattern still right?"
    assert not broken, "citations that resolve to nothing:\n" + "\n".join(broken)


def test_every_convention_citation_resolves() -> None:
    known = convention_numbers()
    assert known == set(range(1, 29))
    broken = [
        f"{path.relative_to(ROOT)}: {match.group(0)!r}"
        for path in tracked_text_files()
        for match in CONVENTION_CITATION.finditer(path.read_text(errors="replace"))
        if any(n not in known for n in numbers(match.group("rules")))
    ]
    assert not broken, "\n".join(broken)


def test_no_reference_to_files_outside_the_repository() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in tracked_text_files()
        if path.name != Path(__file__).name
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if MISSING_FILES.search(line)
    ]
    assert not offenders, "references to files the repository does not hold:\n" + "\n".join(
        offenders
    )


@pytest.mark.parametrize(
    "doc",
    sorted(p.relative_to(ROOT).as_posix() for p in [ROOT / "README.md", *ROOT.glob("docs/*.md")]),
)
def test_relative_links_in_docs_exist(doc: str) -> None:
    path = ROOT / doc
    missing = []
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text()):
        if "://" in target or target.startswith("mailto:"):
            continue
        if not (path.parent / target).exists():
            missing.append(target)
    assert not missing, f"{doc} links to missing files: {missing}"
