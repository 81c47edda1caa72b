"""What `pip install .` puts into site-packages: one top-level package, `gpuclass`.

The three folders `shared/`, `webhook/` and `reconciler/` install as `gpuclass.shared`,
`gpuclass.webhook` and `gpuclass.reconciler` (pyproject.toml's package-dir mapping; the decision
is in docs/decisions.md). PyPI already has packages named `shared` and `reconciler`; a user's CI
environment may hold them, so the end-to-end test installs the built wheel beside both and runs all
three binaries from a folder outside the checkout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]


def test_every_package_folder_is_listed_under_its_installed_name() -> None:
    mapping = SETUPTOOLS["package-dir"]
    on_disk = set()
    for installed, folder in mapping.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder).parts
            on_disk.add(".".join([installed, *relative]))
    assert set(SETUPTOOLS["packages"]) == on_disk
    assert {name.split(".")[0] for name in on_disk} == {"gpuclass"}


def test_console_scripts_point_into_the_one_package() -> None:
    scripts = PYPROJECT["project"]["scripts"]
    assert set(scripts) == {"gpuclass", "gpuclass-webhook", "gpuclass-reconciler"}
    assert all(target.startswith("gpuclass.") for target in scripts.values())


def _run(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"{args}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    _run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", out, ROOT, cwd=out)
    [built] = out.glob("gpuclass-*.whl")
    return built


def test_the_wheel_holds_one_top_level_package(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        tops = {name.split("/")[0] for name in archive.namelist()}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"gpuclass"}


def test_installed_beside_pypi_shared_and_reconciler_all_three_binaries_run(
    wheel: Path, tmp_path: Path
) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    bin_dir = env_dir / "bin"
    pip = [bin_dir / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    # The namesakes from PyPI first (their own dependencies are irrelevant here), then gpuclass.
    _run(*pip, "--no-deps", "shared", "reconciler", cwd=tmp_path)
    _run(*pip, wheel, cwd=tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUCLASS_")}
    env.pop("PYTHONPATH", None)
    examples = ROOT / "examples"

    status = json.loads(
        _run(bin_dir / "gpuclass", "status", "--objects", examples, cwd=tmp_path, env=env)
    )
    assert {item["name"] for item in status["items"]} >= {"example-whole-gpu"}

    once = _run(
        bin_dir / "gpuclass-reconciler", "--objects", examples, "--once", cwd=tmp_path, env=env
    )
    assert "example-whole-gpu" in once

    helptext = _run(bin_dir / "gpuclass-webhook", "--help", cwd=tmp_path, env=env)
    assert "--objects" in helptext

    # The namesakes are still PyPI's: nothing of ours shadows them, nor they us.
    # find_spec locates a package without running it (theirs need dependencies we skipped).
    probe = (
        "from importlib.util import find_spec as f; "
        "print(f('shared').origin); print(f('reconciler').origin); print(f('gpuclass.shared.cli.main').origin)"
    )
    theirs_shared, theirs_reconciler, ours = _run(
        bin_dir / "python", "-c", probe, cwd=tmp_path, env=env
    ).split()
    site = str(env_dir)
    assert theirs_shared.startswith(site) and "gpuclass" not in theirs_shared
    assert theirs_reconciler.startswith(site) and "gpuclass" not in theirs_reconciler
    assert ours.startswith(site) and "/gpuclass/shared/" in ours
