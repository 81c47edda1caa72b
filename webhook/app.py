"""The webhook's HTTP application: FastAPI for the app, raw Starlette routes for admission.

The three admission routes are the hot path: they read the body once (capped),
parse it with orjson, call `shared.review.decide` and write bytes rendered by
`shared.admission` — no per-request dependency injection or pydantic
re-validation of the whole object. Malformed input is a 400 with a JSON error,
an oversized body a 413, anything unexpected a 500 with a logged trace id (never
the payload). Health and metrics are ordinary FastAPI routes.
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
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import Response

from gpuclass.shared.admission import Denied, encode_response, render_response
from gpuclass.shared.review import GPUCLASS, POD, VMI, MalformedReview, decide
from gpuclass.webhook import paths
from gpuclass.webhook.metrics import WebhookMetrics
from gpuclass.webhook.state import CatalogState

log = logging.getLogger("gpuclass.webhook")

WEBHOOKS: dict[str, tuple[str, tuple[str, str]]] = {
    paths.VALIDATE_GPUCLASSES: ("gpuclasses", GPUCLASS),
    paths.MUTATE_VMIS: ("virtualmachineinstances", VMI),
    paths.MUTATE_PODS: ("pods", POD),
}
_OPERATIONS = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})


class TooLarge(Exception):
    pass


@dataclass
class AppContext:
    state: CatalogState
    metrics: WebhookMetrics
    max_body_bytes: int
    tls_ready: Callable[[], bool] = lambda: True
    background: list[Callable[[], Coroutine[Any, Any, None]]] = field(default_factory=list)


def _error(status: int, message: str, **extra: str) -> Response:
    return Response(
        orjson.dumps({"status": status, "error": message, **extra}) + b"\n",
        status,
        media_type="application/json",
    )


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise TooLarge
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise TooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def _admission_endpoint(
    ctx: AppContext, webhook: str, expect: tuple[str, str]
) -> Callable[[Request], Awaitable[Response]]:
    metrics = ctx.metrics
    duration = metrics.duration.labels(webhook)

    async def endpoint(request: Request) -> Response:
        started = time.perf_counter()
        metrics.in_flight.inc()
        try:
            return await _answer(request)
        finally:
            metrics.in_flight.dec()
            duration.observe(time.perf_counter() - started)

    async def _answer(request: Request) -> Response:
        started = time.perf_counter()
        content_type = request.headers.get("content-type", "")
        if content_type.split(";")[0].strip().lower() != "application/json":
            return _client_error(
                400, f"content type must be application/json (got {content_type[:60]!r})"
            )
        try:
            body = await _read_body(request, ctx.max_body_bytes)
        except TooLarge:
            return _client_error(413, f"request body larger than {ctx.max_body_bytes} bytes")
        try:
            parsed: Any = orjson.loads(body)
        except orjson.JSONDecodeError:
            return _client_error(400, "body is not JSON: expected an AdmissionReview")
        try:
            api_version, uid, decision, _ = decide(parsed, ctx.state.catalog, expect=expect)
            payload = encode_response(render_response(decision, uid=uid, api_version=api_version))
        except MalformedReview as exc:
            return _client_error(400, str(exc))
        except Exception:  # the process must never die on input; no payload in the log
            trace = uuid.uuid4().hex
            log.exception(
                "admission failed", extra={"fields": {"webhook": webhook, "trace_id": trace}}
            )
            metrics.requests.labels(webhook, "unknown", "error", "500").inc()
            return _error(500, "internal error", traceId=trace)
        _account(parsed["request"], uid, decision, started)
        return Response(payload, media_type="application/json")

    def _client_error(status: int, message: str) -> Response:
        metrics.requests.labels(webhook, "unknown", "error", str(status)).inc()
        log.info(
            "bad admission request",
            extra={"fields": {"webhook": webhook, "status": status, "error": message}},
        )
        return _error(status, message)

    def _account(req: dict[str, Any], uid: str, decision: Any, started: float) -> None:
        operation = req.get("operation") if req.get("operation") in _OPERATIONS else "other"
        allowed = not isinstance(decision, Denied)
        code = "200" if allowed else str(decision.code)
        metrics.requests.labels(webhook, operation, str(allowed).lower(), code).inc()
        causes = [c.code for c in decision.causes] if isinstance(decision, Denied) else []
        for cause in set(causes):
            metrics.denials.labels(webhook, cause).inc()
        obj = req.get("object") if isinstance(req.get("object"), dict) else req.get("oldObject")
        meta = _as_dict(obj.get("metadata")) if isinstance(obj, dict) else {}
        kind = _as_dict(req.get("kind"))
        log.info(
            "admission",
            extra={
                "fields": {
                    "uid": uid,
                    "webhook": webhook,
                    "operation": operation,
                    "kind": str(kind.get("kind", ""))[:64],
                    "namespace": str(req.get("namespace") or meta.get("namespace") or "")[:253],
                    "name": str(
                        req.get("name") or meta.get("name") or meta.get("generateName") or ""
                    )[:253],
                    "allowed": allowed,
                    "causes": causes[:20],
                    "patched": allowed and bool(decision.operations),
                    "duration_ms": round((time.perf_counter() - started) * 1000, 3),
                }
            },
        )

    return endpoint


def create_app(ctx: AppContext) -> FastAPI:
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
        title="gpuclass-webhook", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None
    )
    for path, (webhook, expect) in WEBHOOKS.items():
        app.add_route(path, _admission_endpoint(ctx, webhook, expect), methods=["POST"])

    @app.get(paths.HEALTHZ)
    def healthz() -> Response:
        alive = ctx.state.healthy()
        return _status(alive, "ok" if alive else "catalog watch tasks stopped")

    @app.get(paths.READYZ)
    def readyz() -> Response:
        if not ctx.state.synced:
            return _status(False, "catalog not synced yet")
        if not ctx.tls_ready():
            return _status(False, "TLS not loaded")
        return _status(True, "ok")

    @app.get(paths.METRICS)
    def metrics() -> Response:
        ctx.metrics.catalog_synced.set(1 if ctx.state.synced else 0)
        if ctx.state.updated_at:
            ctx.metrics.catalog_age.set(time.time() - ctx.state.updated_at)
        return Response(generate_latest(ctx.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app


def _as_dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _status(ok: bool, message: str) -> Response:
    return Response(
        orjson.dumps({"status": "ok" if ok else "unavailable", "message": message}) + b"\n",
        200 if ok else 503,
        media_type="application/json",
    )
