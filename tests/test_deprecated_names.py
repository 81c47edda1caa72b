"""Old `licence` spellings of flags, variables and chart values keep working for one release.

Identifiers and flags now use the wire's spelling, `license`; the old names are rewritten with a
warning on stderr (CHANGELOG, Unreleased).
"""

from __future__ import annotations

import pytest

from gpuclass.reconciler.settings import ReconcilerSettings
from gpuclass.shared.cli.main import main as cli_main
from gpuclass.shared.kube.settings import migrate_deprecated, parse_settings
from tests.chart_helpers import deployment, pod_spec, render_objects


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        pytest.param(["--licence-namespace=x"], ["--license-namespace=x"], id="equals-form"),
        pytest.param(["--licence-namespace", "x"], ["--license-namespace", "x"], id="two-words"),
        pytest.param(["--license-namespace=x"], ["--license-namespace=x"], id="new-name-untouched"),
        pytest.param(["--objects", "licence"], ["--objects", "licence"], id="values-untouched"),
    ],
)
def test_flags_are_rewritten(
    argv: list[str], expected: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert migrate_deprecated(argv, {}, prog="prog") == expected
    warned = "deprecated" in capsys.readouterr().err
    assert warned is (argv != expected)


def test_old_variable_counts_and_the_new_one_wins(capsys: pytest.CaptureFixture[str]) -> None:
    env = {"GPUCLASS_LICENCE_NAMESPACE": "old"}
    migrate_deprecated([], env, prog="prog")
    assert env == {"GPUCLASS_LICENSE_NAMESPACE": "old"}
    env = {"GPUCLASS_LICENCE_NAMESPACE": "old", "GPUCLASS_LICENSE_NAMESPACE": "new"}
    migrate_deprecated([], env, prog="prog")
    assert env == {"GPUCLASS_LICENSE_NAMESPACE": "new"}
    assert "GPUCLASS_LICENCE_NAMESPACE is deprecated" in capsys.readouterr().err


def test_server_settings_take_the_old_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUCLASS_LICENSE_NAMESPACE", raising=False)
    settings = parse_settings(
        ReconcilerSettings,
        ["--objects", "examples", "--licence-namespace=vault"],
        prog="gpuclass-reconciler",
    )
    assert settings.license_namespace == "vault"


def test_cli_takes_the_old_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["status", "--objects", "examples", "--licence-namespace", "nowhere"]) == 0
    captured = capsys.readouterr()
    assert "--licence-namespace is deprecated" in captured.err
    # the source Secret is looked up in the namespace given: none there, so the licensed class says so
    assert "nowhere/" in captured.out


@pytest.mark.parametrize(
    ("values", "namespace"),
    [
        pytest.param({}, "cozy-system", id="default"),
        pytest.param({"settings": {"licenseNamespace": "vault"}}, "vault", id="new-key"),
        pytest.param({"settings": {"licenceNamespace": "old"}}, "old", id="old-key-wins"),
    ],
)
def test_chart_passes_the_namespace_under_either_key(
    values: dict[str, object], namespace: str
) -> None:
    objects = render_objects(values)
    for component in ("webhook", "reconciler"):
        [container] = pod_spec(deployment(objects, component))["containers"]
        assert f"--license-namespace={namespace}" in container["args"]
