"""The HTTP both binaries serve beside their work: one health app and one uvicorn server wrapper.

*Probes.* `/healthz`, `/readyz` and `/metrics` are the same three routes in the webhook (mounted
in its FastAPI app, over HTTPS) and in the reconciler (the whole app, over plain HTTP). Each
binary says only what is its own, through :class:`Probes`: why it is not alive, why it is not
ready, a note a live process adds to its 200, its metrics registry and what to refresh before a
scrape. Both answer `/healthz` and `/readyz` with `{"status": "ok"|"unavailable", "message": …}`
(`application/json`, 200 or 503) and `/metrics` with Prometheus' text format; only GET (and HEAD)
is routed, and nothing redirects.

*Server.* :class:`Server` is uvicorn's server without uvicorn's logging config, access log,
`server` header or proxy-header trust (:func:`server_config`), with one of two signal policies:
:class:`OwnerStops` (no handler of uvicorn's: the reconciler owns SIGTERM, releases its Lease,
then sets `should_exit`) or :class:`DrainOnSignal` (the first SIGTERM/SIGINT keeps serving for
`seconds` while readiness fails, then uvicorn's graceful shutdown; the process exits 0). The
webhook's TLS and connection limits are its own, in `webhook/server.py`. The uvicorn internals
used here are listed in docs/decisions.md, "uvicorn internals the servers still use".
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from types import FrameType
from typing import Any, Final, TypeAlias

import orjson
import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp

HEALTHZ: Final = "/healthz"
READYZ: Final = "/readyz"
METRICS: Final = "/metrics"

_log = logging.getLogger("gpuclass.http")


def _nothing() -> str | None:
    return None


def _no_refresh() -> None:
    return None


@dataclass(frozen=True)
class Probes:
    """What the probe routes ask their binary. `live` and `ready` return None when all is well,
    else the reason their route gives with its 503. `note` is a warning `/healthz` adds to its 200
    (the reconciler's stale `--objects` files: the process serves its last good state, so a
    liveness probe must not restart it). `before_scrape` refreshes gauges read at scrape time."""

    registry: CollectorRegistry
    live: Callable[[], str | None]
    ready: Callable[[], str | None]
    note: Callable[[], str | None] = _nothing
    before_scrape: Callable[[], None] = _no_refresh


def probe_answer(problem: str | None, *, note: str | None = None) -> Response:
    """A probe's answer: 200 `ok`, or 503 with the problem; a note follows in brackets."""
    message = (problem or "ok") + (f" ({note})" if note else "")
    body = orjson.dumps({"status": "unavailable" if problem else "ok", "message": message})
    return Response(body + b"\n", 503 if problem else 200, media_type="application/json")


def health_routes(probes: Probes) -> list[Route]:
    """`/healthz`, `/readyz` and `/metrics` as Starlette routes (GET and HEAD), for either app."""

    async def healthz(_: Request) -> Response:
        return probe_answer(probes.live(), note=probes.note())

    async def readyz(_: Request) -> Response:
        return probe_answer(probes.ready())

    async def metrics(_: Request) -> Response:
        probes.before_scrape()
        return Response(generate_latest(probes.registry), media_type=CONTENT_TYPE_LATEST)

    return [
        Route(HEALTHZ, healthz, methods=["GET"]),
        Route(READYZ, readyz, methods=["GET"]),
        Route(METRICS, metrics, methods=["GET"]),
    ]


def health_app(probes: Probes) -> Starlette:
    """A Starlette app serving only :func:`health_routes` (the reconciler's whole HTTP surface),
    without redirects, as the webhook: a trailing slash is a 404, not a 307 whose `Location`
    would come from the client's `Host` header."""
    app = Starlette(routes=health_routes(probes))
    app.router.redirect_slashes = False
    return app


def server_config(
    app: ASGIApp,
    *,
    host: str,
    port: int,
    lifespan: bool = False,
    http: str = "h11",
    **tuning: Any,
) -> uvicorn.Config:
    """uvicorn's config as both binaries want it: no logging config of uvicorn's (the process's
    own JSON logging stays), no access log (no line per probe or scrape), no `server` header, no
    trust in proxy headers (nothing sits in front), lifespan only when asked; `tuning` passes any
    further `uvicorn.Config` keyword (the webhook's timeouts). The protocol is h11 unless asked:
    uvicorn's "auto" would take httptools, installed for the webhook, and uvicorn's httptools
    protocol has no header-size cap, while h11's bounds the reconciler's probe port."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=None,
        access_log=False,
        server_header=False,
        proxy_headers=False,
        lifespan="on" if lifespan else "off",
        http=http,
        **tuning,
    )


@dataclass(frozen=True)
class OwnerStops:
    """Signal policy: uvicorn installs no signal handler; the owner stops the server by setting
    `should_exit` (the reconciler, which must release its Lease first)."""


@dataclass(frozen=True)
class DrainOnSignal:
    """Signal policy: the first SIGTERM/SIGINT calls `on_drain` (readiness fails) and keeps
    serving for `seconds`; then, or at a second signal, or at once when `seconds` is 0, uvicorn's
    graceful shutdown runs. The signal is not re-raised, so a drained process exits 0."""

    seconds: float
    on_drain: Callable[[], None]


SignalPolicy: TypeAlias = OwnerStops | DrainOnSignal


class Server(uvicorn.Server):
    """uvicorn's server with one of the two signal policies (:data:`SignalPolicy`)."""

    drain_log: logging.Logger = _log  # where the drain is announced; a subclass may name its own

    def __init__(self, config: uvicorn.Config, *, signals: SignalPolicy) -> None:
        super().__init__(config)
        self.signals = signals
        self.drain_started: float | None = None
        self._drain_logged = False

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        """uvicorn's signal capture, a no-op under :class:`OwnerStops`: SIGTERM must reach the owner."""
        if isinstance(self.signals, OwnerStops):
            yield
            return
        with super().capture_signals():
            yield

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """uvicorn's signal hook: the first signal starts the drain; a second one, or any when
        there is no drain, stops as uvicorn does. The signal is not re-raised at exit."""
        # A signal handler: set flags only (no logging, no I/O); on_tick does the rest.
        policy = self.signals
        if (
            isinstance(policy, DrainOnSignal)
            and policy.seconds > 0
            and self.drain_started is None
            and not self.should_exit
        ):
            self.drain_started = time.monotonic()
            policy.on_drain()
        else:
            super().handle_exit(sig, frame)
        self._captured_signals.clear()

    async def on_tick(self, counter: int) -> bool:
        """uvicorn's periodic hook: log the drain once, and end it after its `seconds` by letting
        uvicorn's graceful shutdown begin."""
        policy = self.signals
        if self.drain_started is not None and isinstance(policy, DrainOnSignal):
            if not self._drain_logged:
                self._drain_logged = True
                self.drain_log.info(
                    "draining: readiness fails, requests are still answered",
                    extra={"fields": {"drain_seconds": policy.seconds}},
                )
            if time.monotonic() - self.drain_started >= policy.seconds:
                self.should_exit = True
        return await super().on_tick(counter)
