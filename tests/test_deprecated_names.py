"""Old `licence` spellings of flags, variables and chart values keep working for one release.

Identifiers and flags now use the wire's spelling, `license`; the old names are rewritten with a
warning on stderr (CHANGELOG, Unreleased).
"""

from __future__ import annotations

import json

import pytest

from gpuclass.reconciler.main import main as reconciler_main
from gpuclass.reconciler.settings import ReconcilerSettings
from gpuclass.reconciler.state.licenses import launcher_licence, launcher_license
from gpuclass.shared.cli.main import main as cli_main
from gpuclass.shared.core.base.causes import CauseCode
from gpuclass.shared.process.settings import migrate_deprecated, parse_settings
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


@pytest.mark.parametrize(
    ("old", "new"),
    [
        pytest.param("LicenceHandMounted", CauseCode.LICENSE_HAND_MOUNTED, id="hand-mounted"),
        pytest.param("LicenceVolumeMissing", CauseCode.LICENSE_VOLUME_MISSING, id="volume-missing"),
        pytest.param("LicenseHandMounted", CauseCode.LICENSE_HAND_MOUNTED, id="new-word"),
    ],
)
def test_old_reasons_are_read_as_the_new_codes(old: str, new: CauseCode) -> None:
    """A reason read as input (a user's CI expectation, a stored log) in the old spelling is the
    same code; what we write is the new word."""
    assert CauseCode(old) is new
    assert new.value.startswith("License")


def test_old_python_names_are_the_same_members() -> None:
    assert CauseCode.LICENCE_HAND_MOUNTED is CauseCode.LICENSE_HAND_MOUNTED
    assert CauseCode.LICENCE_VOLUME_MISSING is CauseCode.LICENSE_VOLUME_MISSING
    assert "LICENCE_HAND_MOUNTED" not in [code.name for code in CauseCode], "an alias, not a member"
    assert launcher_licence is launcher_license


def test_once_report_carries_the_old_key_beside_the_new(capsys: pytest.CaptureFixture[str]) -> None:
    assert reconciler_main(["--objects", "examples", "--once", "--log-level", "warning"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert "licenseCopies" in report
    assert report["licenceCopies"] == report["licenseCopies"]
