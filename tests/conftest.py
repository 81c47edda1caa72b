"""Shared test plumbing: the golden fixtures' state and the regeneration flag."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest_plugins = ["tests.controlplane.plugin"]

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "admission"
OBJECTS = [str(ROOT / "examples"), str(ROOT / "tests" / "fixtures" / "objects")]
# Golden VMI requests that are not valid KubeVirt objects on purpose, and why
# (tests/e2e/test_kubevirt_crds.py proves these and only these fail KubeVirt's schema).
NOT_KUBEVIRT = {
    "vmi-4.6-unknown-fields-survive": "carries fields KubeVirt does not know, to show they survive",
    "vmi-4.6-missing-containers-created": "no spec.domain.devices (KubeVirt requires it) and an "
    "unknown field, to show the patch creates the containers",
    "vmi-4.6-volumes-not-a-list": "spec.volumes is `true`: the schema is checked only after "
    "mutating admission, so the webhook meets such objects and refuses them",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-fixtures",
        action="store_true",
        default=False,
        help="rewrite tests/fixtures/admission/*/response.json from the current code (review the diff)",
    )


@dataclass(frozen=True)
class GoldenCase:
    name: str
    folder: Path
    request: dict[str, Any]
    vgpu_entitled: bool
    endpoint: str | None = None
    """The webhook path that answers (case.json `endpoint`); None: the kind's first path."""

    @property
    def response_path(self) -> Path:
        return self.folder / "response.json"

    def expected(self) -> dict[str, Any]:
        return json.loads(self.response_path.read_text())


def golden_cases() -> Iterator[GoldenCase]:
    for folder in sorted(p for p in FIXTURES.iterdir() if p.is_dir()):
        settings = (
            json.loads((folder / "case.json").read_text())
            if (folder / "case.json").exists()
            else {}
        )
        yield GoldenCase(
            folder.name,
            folder,
            json.loads((folder / "request.json").read_text()),
            bool(settings.get("vgpu_entitled", True)),
            settings.get("endpoint"),
        )


@pytest.fixture(scope="session")
def update_fixtures(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-fixtures"))


@pytest.fixture
def keep_logging() -> Iterator[None]:
    """main() points the root logger at the (captured) stderr; put the test runner's handlers back."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
