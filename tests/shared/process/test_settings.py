"""The servers' flags (shared/process/settings.py): `--help` written for people, listing every
`GPUCLASS_*` variable, and `--version`."""

from __future__ import annotations

import re
from importlib import metadata

import pytest

from gpuclass.reconciler.main import main as reconciler_main
from gpuclass.reconciler.settings import ReconcilerSettings
from gpuclass.shared.process.settings import CommonSettings, parse_settings
from gpuclass.webhook.main import main as webhook_main
from gpuclass.webhook.settings import WebhookSettings

SERVERS = [
    pytest.param(webhook_main, WebhookSettings, "gpuclass-webhook", id="webhook"),
    pytest.param(reconciler_main, ReconcilerSettings, "gpuclass-reconciler", id="reconciler"),
]
PYTHON_TYPES = re.compile(r"list\[|\bPath\b|\b(int|float|str|bool)\b|null|default factory|None")


def help_text(main: object, capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        main(["--help"])  # type: ignore[operator]
    assert exited.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize(("main", "cls", "prog"), SERVERS)
def test_help_shows_no_python_types(
    main: object, cls: type[CommonSettings], prog: str, capsys: pytest.CaptureFixture[str]
) -> None:
    text = help_text(main, capsys)
    assert text.startswith(f"usage: {prog} ")
    options = text.split("options:", 1)[1].split("Every option is also read", 1)[0]
    assert not PYTHON_TYPES.findall(options), PYTHON_TYPES.findall(options)
    assert not PYTHON_TYPES.findall(text.split("options:", 1)[0])


@pytest.mark.parametrize(("main", "cls", "prog"), SERVERS)
def test_help_lists_every_variable(
    main: object, cls: type[CommonSettings], prog: str, capsys: pytest.CaptureFixture[str]
) -> None:
    text = " ".join(help_text(main, capsys).split())
    for field in cls.model_fields:
        flag, variable = f"--{field.replace('_', '-')}", f"GPUCLASS_{field.upper()}"
        assert flag in text
        assert f"[env: {variable}]" in text, variable
    assert "KUBECONFIG" in text and "~/.kube/config" in text


@pytest.mark.parametrize(
    ("environ", "attribute", "expected"),
    [
        pytest.param({"GPUCLASS_PORT": "9443"}, "port", 9443, id="int"),
        pytest.param({"GPUCLASS_VGPU_ENTITLED": "true"}, "vgpu_entitled", True, id="bool"),
        pytest.param({"GPUCLASS_CONTEXT": "staging"}, "context", "staging", id="context"),
        pytest.param({"GPUCLASS_TLS_HOSTS": "a,b"}, "tls_hosts", ["a", "b"], id="list"),
    ],
)
def test_the_listed_variables_are_honoured(
    environ: dict[str, str], attribute: str, expected: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert (
        getattr(parse_settings(WebhookSettings, [], prog="gpuclass-webhook"), attribute) == expected
    )


def test_a_flag_wins_over_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUCLASS_CONTEXT", "from-env")
    settings = parse_settings(
        ReconcilerSettings, ["--context", "from-flag"], prog="gpuclass-reconciler"
    )
    assert settings.context == "from-flag"


@pytest.mark.parametrize(("main", "cls", "prog"), SERVERS)
def test_version_in_process(
    main: object, cls: type[CommonSettings], prog: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])  # type: ignore[operator]
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"{prog} {metadata.version('gpuclass')}\n"
