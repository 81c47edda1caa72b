"""The webhook's HTTP application: FastAPI for the app, raw Starlette routes for admission.

The admission routes are the hot path: they read the body once (within the
limits of `webhook.limits`), parse it with orjson, call `shared.core.admission.review.decide` and
write bytes rendered by `shared.core.admission.decisions` — no per-request dependency injection or
pydantic re-validation of the whole object. Every error body has the contract's
shape `{"status": N, "error": "..."}`: malformed input 400, unknown paths 404, wrong
methods 405, a body too slow 408, too large 413, no room 503 (the last three close
the connection, so an unread body is never drained), anything unexpected a 500
with a logged trace id (never the payload). There are no redirects. A client that
goes away mid-body is logged at debug. Health, readiness and metrics are the routes both
binaries share (`shared.kube.http.health_routes`), added to the FastAPI router.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import orjson
from fastapi import FastAPI
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from gpuclass.shared.core.admission.decisions import Allowed, Decision, Denied, encode_response
from gpuclass.shared.core.admission.envelope import (
    GPUCLASS,
    POD,
    VM,
    VMI,
    AdmissionRequest,
    GroupKind,
    MalformedReview,
)
from gpuclass.shared.core.admission.review import Review, decide
from gpuclass.shared.kube.http import Probes, health_routes
from gpuclass.webhook import paths
from gpuclass.webhook.limits import BodyLimits, BodyRefused, read_body
from gpuclass.webhook.metrics import WebhookMetrics
from gpuclass.webhook.state import CatalogState

log = logging.getLogger("gpuclass.webhook")

WEBHOOKS: dict[str, tuple[str, GroupKind]] = {
    paths.VALIDATE_GPUCLASSES: ("gpuclasses", GPUCLASS),
    paths.MUTATE_VMIS: ("virtualmachineinstances", VMI),
    paths.MUTATE_PODS: ("pods", POD),
    paths.VALIDATE_VMS: ("virtualmachines", VM),
    paths.VALIDATE_PODS: ("vgpu-pods", POD),
    paths.VALIDATE_VMIS: ("final-virtualmachineinstances", VMI),
}
LOGGED_STRING_CHARS = 128  # request-derived strings in decision lines (a uid is 36)


@dataclass
class AppContext:
    """What the routes share: the catalog state, the metrics, the body limits, whether TLS is loaded
    (readiness), the background jobs the lifespan starts beside the catalog's, and `draining`,
    set on SIGTERM so /readyz fails and answers close their connection."""

    state: CatalogState
    metrics: WebhookMetrics
    body: BodyLimits
    tls_ready: Callable[[], bool] = lambda: True
    background: list[Callable[[], Coroutine[Any, Any, None]]] = field(default_factory=list)
    draining: bool = False  # set on SIGTERM: readiness fails, answers close their connection


def _error(status: int, message: str, *, close: bool = False, **extra: str) -> Response:
    return Response(
        orjson.dumps({"status": status, "error": message, **extra}) + b"\n",
        status,
        headers={"connection": "close"} if close else None,
        media_type="application/json",
    )


def _clip(value: object, limit: int = LOGGED_STRING_CHARS) -> str:
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= limit else text[:limit] + f"...({len(text) - limit} more)"


def _admission_endpoint(ctx: AppContext, path: str) -> Callable[[Request], Awaitable[Response]]:
    """The route of one admission path; `shared.core.admission.review.ENDPOINTS[path]` names its admitter."""
    webhook = WEBHOOKS[path][0]
    metrics = ctx.metrics
    duration = metrics.duration.labels(webhook)

    async def endpoint(request: Request) -> Response:
        started = time.perf_counter()
        metrics.in_flight.inc()
        try:
            response = await _answer(request)
        except ClientDisconnect:
            log.debug("client went away before its request was read", extra=_fields(webhook))
            metrics.requests.labels(webhook, "unknown", "error", "499").inc()
            return Response(status_code=499)  # nobody reads it
        except Exception:  # the process must never die on input; no payload in the log
            trace = uuid.uuid4().hex
            log.exception("admission failed", extra=_fields(webhook, trace_id=trace))
            metrics.requests.labels(webhook, "unknown", "error", "500").inc()
            return _error(500, "internal error", traceId=trace)
        finally:
            metrics.in_flight.dec()
            duration.observe(time.perf_counter() - started)
        if ctx.draining:
            response.headers["connection"] = "close"  # let the client reconnect elsewhere
        return response

    async def _answer(request: Request) -> Response:
        started = time.perf_counter()
        content_type = request.headers.get("content-type", "")
        if content_type.split(";")[0].strip().lower() != "application/json":
            return _client_error(
                400, f"content type must be application/json (got {content_type[:60]!r})", True
            )
        try:
            body = await read_body(request, ctx.body)
        except BodyRefused as refused:
            return _client_error(refused.status, refused.reason, True)
        try:
            parsed: Any = orjson.loads(body)
        except orjson.JSONDecodeError:
            return _client_error(400, "body is not JSON: expected an AdmissionReview")
        try:
            answer = decide(parsed, ctx.state.catalog, endpoint=path)
        except MalformedReview as exc:
            return _client_error(400, str(exc))
        payload = encode_response(answer.response())
        _account(answer, started)
        return Response(payload, media_type="application/json")

    def _client_error(status: int, message: str, close: bool = False) -> Response:
        metrics.requests.labels(webhook, "unknown", "error", str(status)).inc()
        log.info(
            "bad admission request",
            extra=_fields(webhook, status=status, error=_clip(message, 200)),
        )
        return _error(status, message, close=close)

    def _account(answer: Review, started: float) -> None:
        req, decision = answer.request, answer.decision
        denied = decision if isinstance(decision, Denied) else None
        code = str(denied.code) if denied else "200"
        metrics.requests.labels(webhook, req.operation, str(not denied).lower(), code).inc()
        causes = [str(c.code) for c in denied.causes] if denied else []
        for cause in set(causes):
            metrics.denials.labels(webhook, cause).inc()
        log.info("admission", extra={"fields": _decision_fields(req, decision, causes, started)})

    def _decision_fields(
        req: AdmissionRequest, decision: Decision, causes: list[str], started: float
    ) -> dict[str, object]:
        obj = req.object if req.object is not None else req.old_object
        meta = _as_dict(obj.get("metadata")) if obj is not None else {}
        return {
            "uid": _clip(req.uid),
            "webhook": webhook,
            "operation": req.operation,
            "kind": _clip(req.kind.kind, 64),
            "namespace": _clip(req.namespace or meta.get("namespace") or ""),
            "name": _clip(req.name or meta.get("name") or meta.get("generateName") or ""),
            "allowed": not isinstance(decision, Denied),
            "causes": causes[:20],
            "patched": isinstance(decision, Allowed) and bool(decision.operations),
            "duration_ms": round((time.perf_counter() - started) * 1000, 3),
        }

    return endpoint


def create_app(ctx: AppContext) -> ASGIApp:
    """The ASGI app: admission POSTs go straight to their endpoints, the rest through FastAPI.

    The admission routes are the hot path and catch everything themselves, so they skip
    FastAPI's middleware and router layers (a third of the time an answer took); health,
    metrics, 404 and 405 keep the ordinary FastAPI handling.
    """
    app = _fastapi_app(ctx)
    admission = {path: _admission_endpoint(ctx, path) for path in WEBHOOKS}

    async def dispatch(scope: Scope, receive: Receive, send: Send) -> None:
        endpoint = admission.get(scope["path"]) if scope["type"] == "http" else None
        if endpoint is None or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        response = await endpoint(Request(scope, receive))
        await response(scope, receive, send)

    return dispatch


def _fastapi_app(ctx: AppContext) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        jobs: list[Callable[[], Coroutine[Any, Any, None]]] = [ctx.state.run, *ctx.background]
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
    for path in WEBHOOKS:  # POSTs never get here (see create_app)
        app.add_route(path, _admission_endpoint(ctx, path), methods=["POST"])

    app.router.routes.extend(health_routes(_probes(ctx)))
    return app


def _probes(ctx: AppContext) -> Probes:
    """What the shared probe routes ask the webhook: its catalog tasks, its sync and TLS, the drain."""

    def live() -> str | None:
        return None if ctx.state.healthy() else "catalog watch tasks stopped"

    def ready() -> str | None:
        if ctx.draining:
            return "shutting down"
        if not ctx.state.synced:
            return "catalog not synced yet"
        return None if ctx.tls_ready() else "TLS not loaded"

    def before_scrape() -> None:
        ctx.metrics.catalog_synced.set(1 if ctx.state.synced else 0)
        if ctx.state.updated_at:
            ctx.metrics.catalog_age.set(time.time() - ctx.state.updated_at)

    return Probes(ctx.metrics.registry, live=live, ready=ready, before_scrape=before_scrape)


async def _http_error(_: Request, exc: Exception) -> Response:
    """404 and 405 from the router, in the contract's error shape."""
    assert isinstance(exc, HTTPException)
    response = _error(exc.status_code, exc.detail)
    response.headers.update(exc.headers or {})
    return response


def _fields(webhook: str, **extra: object) -> dict[str, Any]:
    return {"fields": {"webhook": webhook, **extra}}


def _as_dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
