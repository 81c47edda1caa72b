"""Settings of `gpuclass-webhook`: flags and `GPUCLASS_*` environment variables."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field, field_validator
from pydantic_settings import NoDecode

from gpuclass.shared.runtime.settings import CommonSettings


class WebhookSettings(CommonSettings):
    port: int = Field(8443, ge=0, le=65535, description="HTTPS port (0: any free port)")
    bind_address: str = Field("0.0.0.0", description="address to listen on")
    tls_cert_file: Path | None = Field(
        None, description="serving certificate (PEM); reloaded when it changes"
    )
    tls_key_file: Path | None = Field(
        None, description="serving key (PEM); reloaded when it changes"
    )
    tls_dir: Path | None = Field(
        None,
        description="where a self-signed certificate and its CA are written when no cert is given",
    )
    tls_hosts: Annotated[list[str], NoDecode] = Field(
        ["localhost", "127.0.0.1", "::1"],
        description="host names/IPs of the self-signed certificate (comma-separated in the env var)",
    )
    tls_reload_seconds: float = Field(
        2.0, gt=0, description="how often to check certificate files for changes"
    )
    max_body_bytes: int = Field(7 * 1024 * 1024, gt=0, description="larger request bodies get 413")
    objects_poll_seconds: float = Field(
        1.0, gt=0, description="how often --objects files are checked for changes"
    )
    shutdown_grace_seconds: float = Field(
        20.0, ge=0, description="time to drain in-flight requests on SIGTERM"
    )

    @field_validator("tls_hosts", mode="before")
    @classmethod
    def _split_hosts(cls, value: object) -> object:
        return [part for part in value.split(",") if part] if isinstance(value, str) else value
