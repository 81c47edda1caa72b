"""Settings of `gpuclass-webhook`: flags and `GPUCLASS_*` environment variables."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Annotated

from pydantic import Field, field_validator
from pydantic_settings import NoDecode

from gpuclass.shared.process.settings import CommonSettings
from gpuclass.webhook.certs.rotation import CertPolicy

DAY = 86400  # seconds; whole numbers, so that --help prints them as such
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class WebhookSettings(CommonSettings):
    """Serve the GPUClass admission webhook over HTTPS."""

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
        description="host names/IPs of the self-signed certificate; repeatable "
        "(comma-separated in the variable)",
        json_schema_extra={"metavar": "HOST"},
    )
    tls_reload_seconds: float = Field(
        2.0, gt=0, description="how often to check certificate files for changes"
    )
    cert_secret: str | None = Field(
        None,
        description="Secret holding the webhook's own CA and serving certificate: when set, the "
        "webhook makes, rotates and serves them and keeps the caBundles current (needs the API)",
    )
    cert_namespace: str | None = Field(
        None, description="namespace of --cert-secret (default: the service account's)"
    )
    cert_mutating_webhook_configuration: str | None = Field(
        None, description="MutatingWebhookConfiguration whose caBundle --cert-secret keeps"
    )
    cert_validating_webhook_configuration: str | None = Field(
        None, description="ValidatingWebhookConfiguration whose caBundle --cert-secret keeps"
    )
    cert_ca_validity_seconds: float = Field(
        1825 * DAY, gt=0, description="lifetime of a CA made for --cert-secret (1825 days)"
    )
    cert_ca_renew_before_seconds: float = Field(
        365 * DAY,
        gt=0,
        description="a next CA is introduced when the CA has this long left (365 days)",
    )
    cert_validity_seconds: float = Field(
        90 * DAY,
        gt=0,
        description="lifetime of a serving certificate made for --cert-secret (90 days)",
    )
    cert_renew_before_seconds: float = Field(
        30 * DAY,
        gt=0,
        description="the serving certificate is renewed when it has this long left (30 days)",
    )
    cert_overlap_seconds: float = Field(
        3600,
        gt=0,
        description="a new CA is in every caBundle this long before it signs; a replaced one "
        "stays this long after",
    )
    cert_poll_seconds: float = Field(
        10.0,
        gt=0,
        description="how often each replica reads --cert-secret and the caBundles "
        "(at most a third of --cert-overlap-seconds)",
    )
    max_body_bytes: int = Field(7 * 1024 * 1024, gt=0, description="larger request bodies get 413")
    max_body_buffer_bytes: int = Field(
        32 * 1024 * 1024,
        gt=0,
        description="request bodies held in memory by all clients together; past it 503",
    )
    max_connections: int = Field(
        1000, gt=0, description="open connections; at the cap the longest-idle one is closed"
    )
    max_in_flight: int = Field(
        256,
        gt=0,
        description="requests being read or answered; at the cap the slowest body is dropped",
    )
    max_header_bytes: int = Field(
        16 * 1024, ge=1024, description="request line and headers; larger: 400 and close"
    )
    header_timeout_seconds: float = Field(
        5.0, gt=0, description="time to send the request headers (from connect, or the first byte)"
    )
    body_timeout_seconds: float = Field(
        10.0, gt=0, description="time to send the whole request body; then 408 and close"
    )
    keep_alive_seconds: int = Field(
        20, ge=1, description="an idle keep-alive connection is closed after this"
    )
    tls_handshake_timeout_seconds: float = Field(
        5.0, gt=0, description="time to complete the TLS handshake"
    )
    drain_seconds: float = Field(
        5.0,
        ge=0,
        description="on SIGTERM: readiness fails and requests are still served this long",
    )
    objects_poll_seconds: float = Field(
        1.0, gt=0, description="how often --objects files are checked for changes"
    )
    shutdown_grace_seconds: float = Field(
        15.0, ge=0, description="after the drain: time for in-flight requests to finish"
    )

    @field_validator("tls_hosts", mode="before")
    @classmethod
    def _split_hosts(cls, value: object) -> object:
        return [part for part in value.split(",") if part] if isinstance(value, str) else value

    def cert_policy(self) -> CertPolicy:
        """The rotation plan's lifetimes and hosts from the `--cert-*` seconds; the caller checks
        `problems()` before serving, as lifetimes that cannot overlap would never rotate safely."""
        return CertPolicy(
            ca_validity=timedelta(seconds=self.cert_ca_validity_seconds),
            ca_renew_before=timedelta(seconds=self.cert_ca_renew_before_seconds),
            cert_validity=timedelta(seconds=self.cert_validity_seconds),
            cert_renew_before=timedelta(seconds=self.cert_renew_before_seconds),
            overlap=timedelta(seconds=self.cert_overlap_seconds),
            hosts=frozenset(self.tls_hosts),
            poll=timedelta(seconds=self.cert_poll_seconds),
        )

    def cert_secret_namespace(self) -> str:
        """Where the certificate Secret lives: `--cert-namespace`, else the Pod's own namespace from
        its service account; outside a Pod without the flag, a ValueError (the webhook exits 2)."""
        if self.cert_namespace:
            return self.cert_namespace
        try:
            return SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
        except OSError:
            raise ValueError("--cert-secret needs --cert-namespace outside a Pod") from None
