"""`gpuclass-webhook`: serve the admission webhook over HTTPS.

With `--objects`, answers come from those files (re-read when they change) and a
self-signed certificate is made when none is given; otherwise the catalog is a
store kept by list+watch of the API server (`--kubeconfig`, `KUBECONFIG`, in-cluster or
`~/.kube/config`; `--context` picks a context). With `--cert-secret`, the webhook
keeps its own CA and serving certificate in that Secret and the caBundles current
(`webhook/certs/rotator.py`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from gpuclass.shared.files.loader import LoadError
from gpuclass.shared.kube.clusterconfig import ClusterConfigError
from gpuclass.shared.process.http import server_config
from gpuclass.shared.process.logs import setup_logging
from gpuclass.shared.process.memory import keep_returning_memory
from gpuclass.shared.process.settings import parse_settings
from gpuclass.webhook.app import AppContext, create_app
from gpuclass.webhook.catalogs import CatalogFeed, CatalogStore, FileCatalog
from gpuclass.webhook.certs.rotator import CertTarget, SelfManagedCertificates
from gpuclass.webhook.certs.tls import ReloadingContext, self_signed
from gpuclass.webhook.limits import BodyBudget, BodyLimits
from gpuclass.webhook.metrics import WebhookMetrics
from gpuclass.webhook.server import ConnectionLimits, WebhookServer, shrink_tls_buffers
from gpuclass.webhook.settings import WebhookSettings

log = logging.getLogger("gpuclass.webhook")


async def _watched_catalog(settings: WebhookSettings, metrics: WebhookMetrics) -> CatalogFeed:
    from gpuclass.shared.kube.kubeclient import api_client
    from gpuclass.webhook.kube import FIELD_MANAGER, webhook_client

    api = await api_client(settings.kubeconfig, binary=FIELD_MANAGER, context=settings.context)
    return CatalogStore(
        webhook_client(api, kubevirt_namespace=settings.kubevirt_namespace),
        settings.policy(),
        on_restart=lambda resource, reason: metrics.watch_restarts.labels(resource, reason).inc(),
        on_store_error=lambda resource: metrics.store_errors.labels(resource).inc(),
    )


def _tls(settings: WebhookSettings) -> ReloadingContext:
    if settings.tls_cert_file and settings.tls_key_file:
        return ReloadingContext(settings.tls_cert_file, settings.tls_key_file)
    if settings.tls_cert_file or settings.tls_key_file:
        raise ValueError(
            "give both --tls-cert-file and --tls-key-file, or neither for a self-signed certificate"
        )
    directory = settings.tls_dir or Path(tempfile.mkdtemp(prefix="gpuclass-webhook-tls-"))
    files = self_signed(directory, settings.tls_hosts)
    log.info(
        "self-signed certificate created; trust its CA to call the webhook",
        extra={"fields": {"ca_file": str(files.ca), "cert_file": str(files.cert)}},
    )
    return ReloadingContext(files.cert, files.key)


def _self_managed_tls(settings: WebhookSettings) -> ReloadingContext:
    """A placeholder pair to listen with until the Secret's pair is loaded (not ready till then)."""
    problems = settings.cert_policy().problems()
    if problems:
        raise ValueError("certificate lifetimes cannot rotate safely: " + "; ".join(problems))
    if settings.objects or settings.tls_cert_file or settings.tls_key_file:
        raise ValueError(
            "--cert-secret serves its own certificate from the API server: "
            "give neither --objects nor --tls-cert-file/--tls-key-file"
        )
    directory = settings.tls_dir or Path(tempfile.mkdtemp(prefix="gpuclass-webhook-tls-"))
    files = self_signed(directory, settings.tls_hosts, days=1)
    return ReloadingContext(files.cert, files.key)


async def _certificates(
    settings: WebhookSettings, tls: ReloadingContext, *, metrics: WebhookMetrics
) -> SelfManagedCertificates:
    from gpuclass.shared.kube.kubeclient import api_client
    from gpuclass.webhook.kube import FIELD_MANAGER, CertAdapter

    assert settings.cert_secret is not None
    configurations = [
        (kind, name)
        for kind, name in (
            ("mutating", settings.cert_mutating_webhook_configuration),
            ("validating", settings.cert_validating_webhook_configuration),
        )
        if name
    ]
    target = CertTarget(
        settings.cert_secret_namespace(), settings.cert_secret, tuple(configurations)
    )
    api = await api_client(settings.kubeconfig, binary=FIELD_MANAGER, context=settings.context)
    return SelfManagedCertificates(
        CertAdapter(api),
        target,
        policy=settings.cert_policy(),
        tls=tls,
        poll_seconds=settings.cert_poll_seconds,
        on_loaded=lambda: metrics.served_certificate(tls.expiry),
        on_synced=metrics.certificate_sync,
    )


async def serve(settings: WebhookSettings) -> int:
    """Build the catalog source (files or the API), the TLS material and the server, then serve
    until a signal ends it: 0 after a clean stop, 2 when the settings, files or certificates
    cannot start it."""
    metrics = WebhookMetrics()
    certificates: SelfManagedCertificates | None = None
    try:
        tls = _self_managed_tls(settings) if settings.cert_secret else _tls(settings)
        feed: CatalogFeed = (
            FileCatalog(
                settings.objects,
                settings.policy(),
                poll_seconds=settings.objects_poll_seconds,
                kubevirt_namespace=settings.kubevirt_namespace,
            )
            if settings.objects
            else await _watched_catalog(settings, metrics)
        )
        if settings.cert_secret:
            certificates = await _certificates(settings, tls, metrics=metrics)
        else:
            metrics.served_certificate(tls.expiry)
    except (LoadError, ValueError, OSError) as exc:
        log.error("cannot start", extra={"fields": {"error": str(exc)}})
        return 2

    async def reload_certificates() -> None:
        while True:
            await asyncio.sleep(settings.tls_reload_seconds)
            try:
                if tls.reload():
                    metrics.served_certificate(tls.expiry)
            except OSError as exc:
                log.warning("certificate files unreadable", extra={"fields": {"error": str(exc)}})

    background = [certificates.run] if certificates is not None else [reload_certificates]
    background.append(functools.partial(keep_returning_memory, settings.memory_return_seconds))
    ctx = AppContext(
        feed,
        metrics,
        _body_limits(settings),
        tls_ready=_tls_ready(tls, certificates),
        background=background,
    )
    config = server_config(
        create_app(ctx),
        host=settings.bind_address,
        port=settings.port,
        lifespan=True,
        timeout_keep_alive=settings.keep_alive_seconds,
        timeout_graceful_shutdown=int(settings.shutdown_grace_seconds),
        http="httptools",  # what `GuardedProtocol` extends (webhook/server.py), for the record
    )
    config.load()
    shrink_tls_buffers()
    server = WebhookServer(
        config,
        tls=tls.context,
        limits=_connection_limits(settings, metrics),
        drain_seconds=settings.drain_seconds,
        on_drain=lambda: setattr(ctx, "draining", True),
    )

    async def announce() -> None:
        while not server.started:
            await asyncio.sleep(0.05)
        ports = sorted({s.getsockname()[1] for srv in server.servers for s in (srv.sockets or ())})
        log.info("serving", extra={"fields": {"address": settings.bind_address, "ports": ports}})

    announcer = asyncio.create_task(announce())
    await server.serve()
    announcer.cancel()
    return 0


def _tls_ready(
    tls: ReloadingContext, certificates: SelfManagedCertificates | None
) -> Callable[[], bool]:
    """Ready once a real pair is served: the Secret's when self-managed, else the files'."""
    if certificates is not None:
        return lambda: certificates.loaded
    return lambda: tls.expiry > 0


def _body_limits(settings: WebhookSettings) -> BodyLimits:
    budget = settings.max_body_buffer_bytes
    # Small bodies (every real review) may use all of it; the last eighth is theirs alone.
    return BodyLimits(
        settings.max_body_bytes,
        settings.body_timeout_seconds,
        BodyBudget(budget, small_bytes=256 * 1024, reserve=budget // 8),
    )


def _connection_limits(settings: WebhookSettings, metrics: WebhookMetrics) -> ConnectionLimits:
    return ConnectionLimits(
        max_connections=settings.max_connections,
        max_in_flight=settings.max_in_flight,
        max_header_bytes=settings.max_header_bytes,
        header_timeout=settings.header_timeout_seconds,
        handshake_timeout=settings.tls_handshake_timeout_seconds,
        on_close=lambda reason: metrics.connections_cut.labels(reason).inc(),
    )


def main(argv: Sequence[str] | None = None) -> int:
    """The `gpuclass-webhook` entry point: settings from flags and `GPUCLASS_*` variables, logging,
    then :func:`serve`; 1 when no cluster configuration can be found."""
    settings = parse_settings(WebhookSettings, argv, prog="gpuclass-webhook")
    setup_logging(settings.log_level, settings.log_format)
    try:
        return asyncio.run(serve(settings))
    except ClusterConfigError as exc:
        print(f"gpuclass-webhook: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
