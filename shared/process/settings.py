"""Settings both binaries share: one pydantic-settings object per binary extends this.

The `gpuclass` CLI parses its own flags (argparse) and borrows only `migrate_deprecated`.

Every field is a `--kebab-case` flag and a `GPUCLASS_*` environment variable
(flags win). List fields accept repeated flags, or a comma-separated variable.
`--help` is written for people (:func:`parse_settings`): each option with a metavar
that says what to give (`PATH`, `SECONDS`, never `list[Path]`), its default in plain
words, and the variable it reads.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, MutableMapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Final, Literal, TypeVar, get_args, get_origin

from pydantic import Field, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, CliApp, CliSettingsSource, NoDecode, SettingsConfigDict

from gpuclass.shared.core.base import names
from gpuclass.shared.core.status.catalog import Policy
from gpuclass.shared.process.version import version_line

S = TypeVar("S", bound="CommonSettings")


class CommonSettings(BaseSettings):
    """The options the webhook and the reconciler share (files or cluster, the platform policy,
    namespaces, logging); each binary's settings class extends it. Every field reads a
    `GPUCLASS_*` variable and a flag, the flag winning."""

    model_config = SettingsConfigDict(
        env_prefix="GPUCLASS_",
        cli_kebab_case=True,
        cli_implicit_flags=True,
        cli_hide_none_type=True,
        extra="ignore",
    )

    objects: Annotated[list[Path], NoDecode] = Field(
        default_factory=list,
        description="YAML/JSON file or folder of Kubernetes objects to run from instead of a "
        "cluster; repeatable (comma-separated in the variable)",
        json_schema_extra={"metavar": "PATH"},
    )
    vgpu_entitled: bool = Field(
        False, description="the platform's root vGPU entitlement (gpu.vgpu) is on"
    )
    kubeconfig: Path | None = Field(
        None,
        description="kubeconfig file; without it: $KUBECONFIG (a colon-separated list), else "
        "the in-cluster service account in a Pod, else ~/.kube/config",
    )
    context: str | None = Field(
        None,
        description="kubeconfig context to use (default: the kubeconfig's current context)",
        json_schema_extra={"metavar": "NAME"},
    )
    license_namespace: str = Field(
        names.DEFAULT_LICENSE_NAMESPACE,
        description="namespace of license source Secrets",
        json_schema_extra={"metavar": "NAMESPACE"},
    )
    kubevirt_namespace: str = Field(
        names.DEFAULT_KUBEVIRT_NAMESPACE,
        description="namespace of the KubeVirt CR",
        json_schema_extra={"metavar": "NAMESPACE"},
    )
    kubevirt_controller_user: str = Field(
        names.DEFAULT_KUBEVIRT_CONTROLLER_USER,
        description="user that creates virt-launcher Pods",
        json_schema_extra={"metavar": "USER"},
    )
    memory_return_seconds: float = Field(
        300.0,
        ge=0,
        description="give the C library's free heap pages back to the system this often "
        "(glibc's malloc_trim), so resident memory follows what the process holds; 0: never",
        json_schema_extra={"metavar": "SECONDS"},
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field("info", description="log level")
    log_format: Literal["json", "text"] = Field("json", description="log format")

    @field_validator("objects", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        if isinstance(value, str):
            return [part for part in value.split(",") if part]
        return value

    def policy(self) -> Policy:
        """The platform policy these settings describe, as the core's rules take it."""
        return Policy(self.vgpu_entitled, self.license_namespace, self.kubevirt_controller_user)


# Old spellings kept for one release (CHANGELOG): identifiers and flags use the wire's `license`.
DEPRECATED_FLAGS: Final = {"--licence-namespace": "--license-namespace"}
DEPRECATED_ENV: Final = {"GPUCLASS_LICENCE_NAMESPACE": "GPUCLASS_LICENSE_NAMESPACE"}


def migrate_deprecated(
    argv: Sequence[str], environ: MutableMapping[str, str], *, prog: str
) -> list[str]:
    """Rewrite deprecated flags and variables to their new names, warning once for each on stderr.

    A new name given as well wins over the old one.
    """
    migrated = []
    for arg in argv:
        flag, sep, value = arg.partition("=")
        if flag in DEPRECATED_FLAGS:
            new = DEPRECATED_FLAGS[flag]
            print(f"{prog}: {flag} is deprecated; use {new}", file=sys.stderr)
            arg = new + sep + value
        migrated.append(arg)
    for old, new in DEPRECATED_ENV.items():
        if old in environ:
            print(f"{prog}: {old} is deprecated; use {new}", file=sys.stderr)
            environ.setdefault(new, environ[old])
            del environ[old]
    return migrated


def _metavar(name: str, info: FieldInfo) -> str:
    """What the option's value is, in the words of a man page."""
    extra = info.json_schema_extra
    if isinstance(extra, dict) and isinstance(extra.get("metavar"), str):
        return str(extra["metavar"])
    annotation = info.annotation
    args = [a for a in get_args(annotation) if a is not type(None)]
    base = args[0] if get_origin(annotation) is not list and len(args) == 1 else annotation
    if get_origin(base) is list:
        return "PATH" if get_args(base) == (Path,) else "VALUE"
    if base is Path:
        return "DIR" if name.endswith("_dir") else "FILE"
    if base in (int, float):
        return "SECONDS" if name.endswith("_seconds") else "N"
    if name.endswith("_namespace"):
        return "NAMESPACE"
    return "ADDRESS" if name.endswith("_address") else "NAME"


def _default_text(info: FieldInfo) -> str:
    if info.default_factory is not None:
        value: Any = info.default_factory()  # type: ignore[call-arg]
    else:
        value = info.default
    if value is None or value is False or value == []:
        return ""
    if value is True:
        return " (default: on)"
    if isinstance(value, list):
        return f" (default: {','.join(str(v) for v in value)})"
    if isinstance(value, float):
        return f" (default: {value:g})"
    return f" (default: {value})"


def env_var(name: str) -> str:
    """The environment variable that sets field `name` (`GPUCLASS_` and the name in upper case), as
    shown in `--help`."""
    return f"GPUCLASS_{name.upper()}"


def _help(name: str, info: FieldInfo) -> str:
    text = f"{info.description or ''}{_default_text(info)} [env: {env_var(name)}]"
    return text.replace("%", "%%")


def _readable_add_argument(fields: dict[str, FieldInfo]) -> Callable[..., Any]:
    """pydantic-settings' `add_argument_method` hook: its metavar (the Python type) and help
    (`(default: null)`) are replaced by ours, made from the same field."""

    def add_argument(parser: Any, *flags: str, **kwargs: Any) -> Any:
        dest = kwargs.get("dest", "")
        info = fields.get(dest)
        if info is not None:
            kwargs["help"] = _help(dest, info)
            if kwargs.get("metavar") is not None and not kwargs["metavar"].startswith("{"):
                kwargs["metavar"] = _metavar(dest, info)
        return argparse.ArgumentParser.add_argument(parser, *flags, **kwargs)

    return add_argument


EPILOG = """\
Every option is also read from the environment variable shown with it; a flag wins
over its variable. List variables are comma-separated; booleans take true/false.
GPUCLASS_LICENCE_NAMESPACE and --licence-namespace are deprecated spellings of
GPUCLASS_LICENSE_NAMESPACE and --license-namespace.

The cluster (without --objects): --kubeconfig, else $KUBECONFIG, else the in-cluster
service account when running in a Pod, else ~/.kube/config; --context picks a context.
"""


def cli_source(cls: type[S], prog: str) -> CliSettingsSource[Any]:
    """The flag parser of a binary: pydantic-settings' own, with readable help and `--version`."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=(cls.__doc__ or "").strip() or None,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=version_line(prog))
    return CliSettingsSource(
        cls,
        root_parser=parser,
        add_argument_method=_readable_add_argument(dict(cls.model_fields)),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def parse_settings(cls: type[S], argv: Sequence[str] | None, *, prog: str) -> S:
    """Flags, then environment, then defaults; `--help` prints every flag and exits, and
    `--version` prints `<prog> <version>` and exits."""
    args = migrate_deprecated(sys.argv[1:] if argv is None else argv, os.environ, prog=prog)
    return CliApp.run(cls, cli_args=args, cli_settings_source=cli_source(cls, prog))
