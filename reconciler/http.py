"""`/metrics`, `/healthz` and `/readyz` on a minimal Starlette app, served by uvicorn.

The reconciler owns signal handling (it must release its Lease on SIGTERM), so
uvicorn's own signal capture is switched off and the server is stopped by the
reconciler through `should_exit`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator

import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route


def create_app(
    registry: CollectorRegistry,
    *,
    healthy: Callable[[], bool],
    ready: Callable[[], str | None],
    note: Callable[[], str | None] = lambda: None,
) -> Starlette:
    """`ready` returns None when ready, else the reason /readyz gives with its 503.

    `note` is a warning /healthz adds to its 200 (stale `--objects` files: the process
    is alive and serving its last good state, so a liveness probe must not restart it).
    """

    async def metrics(_: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    async def healthz(_: Request) -> Response:
        ok, warning = healthy(), note()
        text = "ok" if ok else "loop stopped"
        text += f" (stale: {warning})" if warning else ""
        return PlainTextResponse(text + "\n", status_code=200 if ok else 503)

    async def readyz(_: Request) -> Response:
        problem = ready()
        return PlainTextResponse(
            f"{problem}\n" if problem else "ok\n", status_code=503 if problem else 200
        )

    return Starlette(
        routes=[
            Route("/metrics", metrics),
            Route("/healthz", healthz),
            Route("/readyz", readyz),
        ]
    )


class Server(uvicorn.Server):
    """uvicorn without its signal handlers: the reconciler decides when to stop."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        """uvicorn's signal capture, made a no-op: SIGTERM must reach the reconciler, which releases
        its Lease before it sets `should_exit` here."""
        yield


def server(app: Starlette, *, host: str, port: int) -> Server:
    """The probe and metrics server on `host:port`: no uvicorn logging config, access log or
    lifespan of its own, so it neither replaces the reconciler's logging nor adds a line per
    scrape."""
    config = uvicorn.Config(
        app, host=host, port=port, log_config=None, access_log=False, lifespan="off"
    )
    return Server(config)
