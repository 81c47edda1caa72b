"""The webhook's HTTP application: FastAPI for the app, raw ASGI routes for admission.

The admission routes are the hot path: they read the body once from ASGI's `receive` (within
the limits of `webhook.limits`), parse it with orjson, call `shared.core.admission.review.decide`
and send the bytes rendered by `shared.core.admission.decisions` as two ASGI messages — no
Starlette request or response objects, no per-request dependency injection or pydantic
re-validation of the whole object. Every error body has the contract's
shape `{"status": N, "error": "..."}`: malformed input 400, unknown paths 404, wrong
methods 405, a body too slow 408, too large 413, no room 503 (the last three close
the connection, so an unread body is never drained), anything unexpected a 500
with a logged trace id (never the payload). There are no redirects. A client that
goes away mid-body is logged at debug. Health, readiness and metrics are the routes both
binaries share (`shared.process.http.health_routes`), added to the FastAPI router.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import orjson
from fastapi import FastAPI
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from gpuclass.shared.core.admission.decisions import Allowed, Decision, Denied, encode_response
from gpuclass.shared.core.admission.envelope import (
    AdmissionRequest,
    GroupKind,
    MalformedReview,
    too_many_values,
)
from gpuclass.shared.core.admission.review import ENDPOINTS, Review, decide
from gpuclass.shared.core.base.raw import dict_at
from gpuclass.shared.process.http import Probes, health_routes
from gpuclass.shared.process.logs import BoundedFields, log_fields
from gpuclass.webhook.catalogs import CatalogFeed
from gpuclass.webhook.limits import BODY_COMPLETE, BodyLimits, BodyRefused, read_body
from gpuclass.webhook.metrics import WebhookMetrics

log = logging.getLogger("gpuclass.webhook")

WEBHOOKS: dict[str, tuple[str, GroupKind]] = {
    path: (endpoint.webhook, endpoint.kind) for path, endpoint in ENDPOINTS.items()
}
"""Each route's webhook name and kind, from the one table of endpoints."""
LOGGED_STRING_CHARS = 128  # request-derived strings in decision lines (a uid is 36)


@dataclass
class AppContext:
    """What the routes share: the catalog feed, the metrics, the body limits, whether TLS is loaded
    (readiness), the background jobs the lifespan starts beside the catalog's, and `draining`,
    set on SIGTERM so /readyz fails and answers close their connection."""

    feed: CatalogFeed
    metrics: WebhookMetrics
    body: BodyLimits
    tls_ready: Callable[[], bool] = lambda: True
    background: list[Callable[[], Coroutine[Any, Any, None]]] = field(default_factory=list)
    draining: bool = False  # set on SIGTERM: readiness fails, answers close their connection


def _error(status: int, message: str, *, close: bool = False, **extra: str) -> Response:
    return Response(
        _error_body(status, message, **extra),
        status,
        headers={"connection": "close"} if close else None,
        media_type="application/json",
    )


def _error_body(status: int, message: str, **extra: str) -> bytes:
    return orjson.dumps({"status": status, "error": message, **extra}) + b"\n"


def _clip(value: object, limit: int = LOGGED_STRING_CHARS) -> str:
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= limit else text[:limit] + f"...({len(text) - limit} more)"


Answer = tuple[int, bytes, bool]  # status, JSON body, whether the connection closes after it
_JSON = (b"content-type", b"application/json")
_CLOSE = (b"connection", b"close")


class AdmissionRoute:
    """One admission path as a raw ASGI app; `shared.core.admission.review.ENDPOINTS[path]` names
    its admitter. It reads the two headers it needs from the scope, the body from `receive`, and
    answers with two ASGI messages: no Starlette request or response object on the hot path."""

    def __init__(self, ctx: AppContext, path: str) -> None:
        self.ctx, self.path = ctx, path
        self.webhook = WEBHOOKS[path][0]
        self.duration = ctx.metrics.duration.labels(self.webhook)
        self._requests: dict[tuple[str, str, str], Any] = {}  # label children, made once each

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:  # noqa: PLR0917 - ASGI's (scope, receive, send)
        """Answer one POST: 200 with the review's response, or an error in the contract's shape."""
        metrics = self.ctx.metrics
        started = time.perf_counter()
        metrics.answering += 1
        try:
            status, body, close = await self._answer(scope, receive)
        except ClientDisconnect:
            log.debug("client went away before its request was read", extra=_fields(self.webhook))
            self._count("unknown", "error", code="499")
            return  # nobody reads an answer
        except Exception:  # the process must never die on input; no payload in the log
            trace = uuid.uuid4().hex
            log.exception("admission failed", extra=_fields(self.webhook, trace_id=trace))
            self._count("unknown", "error", code="500")
            status, body, close = 500, _error_body(500, "internal error", traceId=trace), False
        finally:
            metrics.answering -= 1
            self.duration.observe(time.perf_counter() - started)
        headers = [_JSON, (b"content-length", b"%d" % len(body))]
        if close or self.ctx.draining:  # draining: let the client reconnect elsewhere
            headers.append(_CLOSE)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _answer(self, scope: Scope, receive: Receive) -> Answer:
        started = time.perf_counter()
        content_type = length = None
        for name, value in scope["headers"]:
            if name == b"content-type" and content_type is None:
                content_type = value.decode("latin-1")
            elif name == b"content-length" and length is None:
                length = value.decode("latin-1")
        content_type = content_type or ""
        if content_type.split(";")[0].strip().lower() != "application/json":
            message = f"content type must be application/json (got {content_type[:60]!r})"
            return self._client_error(400, message, close=True)
        try:
            arrived = scope.get(BODY_COMPLETE, False)
            body = await read_body(receive, length, limits=self.ctx.body, arrived=arrived)
        except BodyRefused as refused:
            return self._client_error(refused.status, refused.reason, close=True)
        if (too_many := too_many_values(body)) is not None:  # before the tree is built
            return self._client_error(413, too_many, close=True)
        try:
            parsed: Any = orjson.loads(body)
        except orjson.JSONDecodeError:
            return self._client_error(400, "body is not JSON: expected an AdmissionReview")
        try:
            answer = decide(parsed, self.ctx.feed.catalog, endpoint=self.path)
        except MalformedReview as exc:
            return self._client_error(400, str(exc))
        payload = encode_response(answer.response())
        self._account(answer, started)
        return 200, payload, False

    def _count(self, operation: str, allowed: str, *, code: str) -> None:
        key = (operation, allowed, code)
        child = self._requests.get(key)
        if child is None:  # operations are the envelope's four; codes and verdicts a few
            child = self._requests[key] = self.ctx.metrics.requests.labels(self.webhook, *key)
        child.inc()

    def _client_error(self, status: int, message: str, *, close: bool = False) -> Answer:
        self._count("unknown", "error", code=str(status))
        log.info(
            "bad admission request",
            extra=_fields(self.webhook, status=status, error=_clip(message, 200)),
        )
        return status, _error_body(status, message), close

    def _account(self, answer: Review, started: float) -> None:
        req, decision = answer.request, answer.decision
        denied = decision if isinstance(decision, Denied) else None
        self._count(
            req.operation, str(not denied).lower(), code=str(denied.code) if denied else "200"
        )
        causes = [str(c.code) for c in denied.causes] if denied else []
        for cause in set(causes):
            self.ctx.metrics.denials.labels(self.webhook, cause).inc()
        log_fields(
            log,
            "admission",
            fields=self._decision_fields(req, decision, causes=causes, started=started),
        )

    def _decision_fields(
        self, req: AdmissionRequest, decision: Decision, *, causes: list[str], started: float
    ) -> BoundedFields:
        obj = req.object if req.object is not None else req.old_object
        meta = dict_at(obj.get("metadata")) if obj is not None else {}
        # Every request-derived string is clipped here, so the log filter need not walk them.
        return BoundedFields(
            {
                "uid": _clip(req.uid),
                "webhook": self.webhook,
                "operation": req.operation,
                "kind": _clip(req.kind.kind, 64),
                "namespace": _clip(req.namespace or meta.get("namespace") or ""),
                "name": _clip(req.name or meta.get("name") or meta.get("generateName") or ""),
                "allowed": not isinstance(decision, Denied),
                "causes": causes[:20],
                "patched": isinstance(decision, Allowed) and bool(decision.operations),
                "duration_ms": round((time.perf_counter() - started) * 1000, 3),
            }
        )


def create_app(ctx: AppContext) -> ASGIApp:
    """The ASGI app: admission POSTs go straight to their routes, the rest through FastAPI.

    The admission routes are the hot path and catch everything themselves, so they skip
    FastAPI's middleware and router layers (their share of an answer's time, measured with
    `benchmarks/profile_webhook.py`, is in docs/performance.md); health,
    metrics, 404 and 405 keep the ordinary FastAPI handling.
    """
    admission = {path: AdmissionRoute(ctx, path) for path in WEBHOOKS}
    app = _fastapi_app(ctx, admission)

    async def dispatch(scope: Scope, receive: Receive, send: Send) -> None:  # noqa: PLR0917 - ASGI's (scope, receive, send)
        route = admission.get(scope["path"]) if scope["type"] == "http" else None
        if route is None or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        await route(scope, receive, send)

    return dispatch


def _fastapi_app(ctx: AppContext, admission: dict[str, AdmissionRoute]) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        jobs: list[Callable[[], Coroutine[Any, Any, None]]] = [ctx.feed.run, *ctx.background]
        tasks = [asyncio.create_task(job()) for job in jobs]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    app = FastAPI(
        title="gpuclass-webhook",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        redirect_slashes=False,  # a redirect's Location would come from the client's Host header
    )
    app.add_exception_handler(HTTPException, _http_error)
    for path, route in admission.items():  # POSTs never get here (see create_app): for 405s
        app.router.routes.append(Route(path, route, methods=["POST"]))

    app.router.routes.extend(health_routes(_probes(ctx)))
    return app


def _probes(ctx: AppContext) -> Probes:
    """What the shared probe routes ask the webhook: its catalog tasks, its sync and TLS, the drain."""

    def live() -> str | None:
        return None if ctx.feed.healthy() else "catalog watch tasks stopped"

    def ready() -> str | None:
        if ctx.draining:
            return "shutting down"
        if not ctx.feed.synced:
            return "catalog not synced yet"
        return None if ctx.tls_ready() else "TLS not loaded"

    def before_scrape() -> None:
        ctx.metrics.catalog_synced.set(1 if ctx.feed.synced else 0)
        if ctx.feed.updated_at:
            ctx.metrics.catalog_age.set(time.time() - ctx.feed.updated_at)

    return Probes(ctx.metrics.registry, live=live, ready=ready, before_scrape=before_scrape)


async def _http_error(_: Request, exc: Exception) -> Response:
    """404 and 405 from the router, in the contract's error shape."""
    assert isinstance(exc, HTTPException)
    response = _error(exc.status_code, exc.detail)
    response.headers.update(exc.headers or {})
    return response


def _fields(webhook: str, **extra: object) -> dict[str, Any]:
    return {"fields": {"webhook": webhook, **extra}}
