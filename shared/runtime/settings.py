"""Settings both binaries share: one pydantic-settings object per binary extends this.

Every field is a `--kebab-case` flag and a `GPUCLASS_*` environment variable
(flags win). List fields accept repeated flags, or a comma-separated variable.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping, Sequence
from pathlib import Path
from typing import Annotated, Final, Literal, TypeVar

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, CliApp, NoDecode, SettingsConfigDict

from gpuclass.shared import names
from gpuclass.shared.catalog import Policy

S = TypeVar("S", bound="CommonSettings")


class CommonSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="GPUCLASS_",
        cli_kebab_case=True,
        cli_implicit_flags=True,
        cli_hide_none_type=True,
        extra="ignore",
    )

    objects: Annotated[list[Path], NoDecode] = Field(
        default_factory=list,
        description="YAML/JSON file or folder of Kubernetes objects to run from instead of a cluster; repeatable",
    )
    vgpu_entitled: bool = Field(
        False, description="the platform's root vGPU entitlement (gpu.vgpu) is on"
    )
    kubeconfig: Path | None = Field(None, description="kubeconfig file; default: in-cluster config")
    license_namespace: str = Field(
        names.DEFAULT_LICENSE_NAMESPACE, description="namespace of licence source Secrets"
    )
    kubevirt_namespace: str = Field(
        names.DEFAULT_KUBEVIRT_NAMESPACE, description="namespace of the KubeVirt CR"
    )
    kubevirt_controller_user: str = Field(
        names.DEFAULT_KUBEVIRT_CONTROLLER_USER, description="user that creates virt-launcher Pods"
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
        return Policy(self.vgpu_entitled, self.license_namespace, self.kubevirt_controller_user)


# Old spellings kept for one release (CHANGELOG): identifiers and flags use the wire's `license`.
DEPRECATED_FLAGS: Final = {"--licence-namespace": "--license-namespace"}
DEPRECATED_ENV: Final = {"GPUCLASS_LICENCE_NAMESPACE": "GPUCLASS_LICENSE_NAMESPACE"}


def migrate_deprecated(
    argv: Sequence[str], environ: MutableMapping[str, str], prog: str
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


def parse_settings(cls: type[S], argv: Sequence[str] | None, prog: str) -> S:
    """Flags, then environment, then defaults; `--help` prints every flag and exits."""
    settings_cls = type(
        cls.__name__, (cls,), {"model_config": {**cls.model_config, "cli_prog_name": prog}}
    )
    args = migrate_deprecated(sys.argv[1:] if argv is None else argv, os.environ, prog)
    return CliApp.run(settings_cls, cli_args=args)
