"""The probes and the server both binaries share (shared/process/http.py).

The health app is asked over ASGI (every answer, byte for byte), the server is started for real on
127.0.0.1 under each signal policy, and the two binaries are asked the same probes: the webhook as
a process over HTTPS, the reconciler over HTTP in process.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import ssl
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
import pytest
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Gauge
from starlette.types import ASGIApp

from gpuclass.reconciler.offline import file_reconciler
from gpuclass.reconciler.settings import ReconcilerSettings
from gpuclass.shared.core.status.catalog import Catalog, Policy
from gpuclass.shared.process.http import (
    HEALTHZ,
    METRICS,
    READYZ,
    DrainOnSignal,
    OwnerStops,
    Probes,
    Server,
    health_app,
    server_config,
)
from gpuclass.webhook.app import AppContext, create_app
from gpuclass.webhook.limits import BodyBudget, BodyLimits
from gpuclass.webhook.metrics import WebhookMetrics
from tests.webhook_process import WebhookProcess

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"
JSON = "application/json"


def ok(message: str = "ok") -> bytes:
    return json.dumps({"status": "ok", "message": message}, separators=(",", ":")).encode() + b"\n"


def unavailable(message: str) -> bytes:
    body = {"status": "unavailable", "message": message}
    return json.dumps(body, separators=(",", ":")).encode() + b"\n"


def probes(
    *,
    live: str | None = None,
    ready: str | None = None,
    note: str | None = None,
    registry: CollectorRegistry | None = None,
    before_scrape: Callable[[], None] = lambda: None,
) -> Probes:
    return Probes(
        registry or CollectorRegistry(),
        live=lambda: live,
        ready=lambda: ready,
        note=lambda: note,
        before_scrape=before_scrape,
    )


def ask(app: ASGIApp, method: str, path: str) -> httpx.Response:
    async def request() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://probe") as client:
            return await client.request(method, path)

    return asyncio.run(request())


# -- the health app ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "path", "status", "body"),
    [
        pytest.param({}, HEALTHZ, 200, ok(), id="alive"),
        pytest.param({}, READYZ, 200, ok(), id="ready"),
        pytest.param(
            {"live": "loop stopped"}, HEALTHZ, 503, unavailable("loop stopped"), id="dead"
        ),
        pytest.param({"note": "stale: x.yaml"}, HEALTHZ, 200, ok("ok (stale: x.yaml)"), id="note"),
        pytest.param(
            {"live": "loop stopped", "note": "stale: x"},
            HEALTHZ,
            503,
            unavailable("loop stopped (stale: x)"),
            id="dead-with-note",
        ),
        pytest.param({"note": "stale: x"}, READYZ, 200, ok(), id="readiness-has-no-note"),
        pytest.param(
            {"ready": "TLS not loaded"}, READYZ, 503, unavailable("TLS not loaded"), id="unready"
        ),
        pytest.param({"ready": "TLS not loaded"}, HEALTHZ, 200, ok(), id="unready-but-alive"),
        pytest.param({"ready": ""}, READYZ, 200, ok(), id="empty-reason-is-ready"),
    ],
)
def test_probe_answers(state: dict[str, str], path: str, status: int, body: bytes) -> None:
    response = ask(health_app(probes(**state)), "GET", path)
    assert (response.status_code, response.content) == (status, body)
    assert response.headers["content-type"] == JSON


def test_metrics_are_refreshed_before_the_exposition() -> None:
    registry = CollectorRegistry()
    age = Gauge("catalog_age_seconds", "age", registry=registry)
    response = ask(
        health_app(probes(registry=registry, before_scrape=lambda: age.set(42))), "GET", METRICS
    )
    assert response.status_code == 200
    assert response.headers["content-type"] == CONTENT_TYPE_LATEST
    assert "catalog_age_seconds 42.0" in response.text.splitlines()


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        pytest.param("HEAD", HEALTHZ, 200, id="head"),
        pytest.param("POST", HEALTHZ, 405, id="post"),
        pytest.param("PUT", METRICS, 405, id="put-on-metrics"),
        pytest.param("GET", HEALTHZ + "/", 404, id="trailing-slash"),
        pytest.param("GET", "/", 404, id="root"),
    ],
)
def test_only_get_on_the_three_paths(method: str, path: str, status: int) -> None:
    assert ask(health_app(probes()), method, path).status_code == status


# -- the server ----------------------------------------------------------------------------------


def test_server_config_is_quiet_and_trusts_no_proxy() -> None:
    config = server_config(health_app(probes()), host="127.0.0.1", port=0)
    assert (config.log_config, config.access_log, config.server_header) == (None, False, False)
    assert (config.proxy_headers, config.lifespan) == (False, "off")
    assert config.http == "h11", "not uvicorn's auto: its httptools protocol has no header cap"
    tuned = server_config(health_app(probes()), host="::1", port=1, lifespan=True, http="httptools")
    assert (tuned.host, tuned.port, tuned.lifespan, tuned.http) == ("::1", 1, "on", "httptools")


def policy_server(policy: DrainOnSignal | OwnerStops) -> Server:
    return Server(server_config(health_app(probes()), host="127.0.0.1", port=0), signals=policy)


@pytest.mark.parametrize(
    ("seconds", "signals", "draining", "should_exit"),
    [
        pytest.param(5.0, 1, True, False, id="first-signal-drains"),
        pytest.param(5.0, 2, True, True, id="second-signal-stops"),
        pytest.param(0.0, 1, False, True, id="no-drain-stops-at-once"),
    ],
)
def test_drain_on_signal(seconds: float, signals: int, draining: bool, should_exit: bool) -> None:
    drained: list[bool] = []
    server = policy_server(DrainOnSignal(seconds, lambda: drained.append(True)))
    for _ in range(signals):
        server.handle_exit(signal.SIGTERM, None)
    assert (server.drain_started is not None, bool(drained)) == (draining, draining)
    assert server.should_exit is should_exit
    assert drained.count(True) <= 1
    assert not server._captured_signals, "a drained signal is never re-raised: the exit is 0"


def test_the_drain_ends_after_its_seconds() -> None:
    server = policy_server(DrainOnSignal(0.05, lambda: None))
    server.handle_exit(signal.SIGTERM, None)
    assert asyncio.run(server.on_tick(1)) is False
    time.sleep(0.06)
    assert asyncio.run(server.on_tick(1)) is True


def in_main_thread() -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers can only be installed from the main thread")


class SignalRecorder:
    """A SIGTERM handler of the test's own: a signal uvicorn re-raised lands here, not in pytest."""

    def __init__(self) -> None:
        self.seen: list[int] = []
        self.previous: Any = None

    def __call__(self, sig: int, frame: FrameType | None) -> None:
        self.seen.append(sig)

    def __enter__(self) -> SignalRecorder:
        self.previous = signal.signal(signal.SIGTERM, self)
        return self

    def __exit__(self, *exc: object) -> None:
        signal.signal(signal.SIGTERM, self.previous)


def port_of(server: Server) -> int:
    return int(server.servers[0].sockets[0].getsockname()[1])


def test_a_real_sigterm_is_drained_then_the_server_stops_without_reraising() -> None:
    in_main_thread()
    draining: list[bool] = []
    app = health_app(
        Probes(
            CollectorRegistry(),
            live=lambda: None,
            ready=lambda: "shutting down" if draining else None,
        )
    )
    config = server_config(app, host="127.0.0.1", port=0)
    server = Server(config, signals=DrainOnSignal(0.5, lambda: draining.append(True)))

    async def scenario() -> tuple[list[tuple[int, bytes]], float]:
        serving = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.01)
        assert signal.getsignal(signal.SIGTERM) == server.handle_exit
        answers = []
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port_of(server)}") as http:
            answers.append(await http.get(READYZ))
            os.kill(os.getpid(), signal.SIGTERM)
            signalled = time.monotonic()
            while not draining:
                await asyncio.sleep(0.01)
            answers.append(await http.get(READYZ))
            answers.append(await http.get(HEALTHZ))
        await asyncio.wait_for(serving, 10)
        return [(a.status_code, a.content) for a in answers], time.monotonic() - signalled

    with SignalRecorder() as recorder:
        answers, took = asyncio.run(scenario())
        assert signal.getsignal(signal.SIGTERM) is recorder, "uvicorn put the handler back"
    assert answers == [(200, ok()), (503, unavailable("shutting down")), (200, ok())]
    assert took >= 0.5, "the server kept serving for the drain"
    assert recorder.seen == [], "the signal was not re-raised"


def test_under_owner_stops_uvicorn_installs_no_signal_handler() -> None:
    in_main_thread()
    server = policy_server(OwnerStops())

    async def scenario() -> None:
        serving = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.01)
        assert signal.getsignal(signal.SIGTERM) is recorder, "SIGTERM stays the owner's"
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port_of(server)}") as http:
            assert (await http.get(HEALTHZ)).content == ok()
        server.should_exit = True  # how the owner stops it
        await asyncio.wait_for(serving, 10)

    with SignalRecorder() as recorder:
        asyncio.run(scenario())
    assert recorder.seen == []


# -- both binaries -------------------------------------------------------------------------------


class StubCatalogFeed:
    """The webhook's `CatalogFeed`, with the two answers its probes read set by hand."""

    def __init__(self, *, synced: bool, healthy: bool) -> None:
        self.catalog = Catalog(policy=Policy())
        self.synced, self.updated_at, self._healthy = synced, 0.0, healthy

    async def run(self) -> None:
        return None

    def healthy(self) -> bool:
        return self._healthy


def webhook_app(*, synced: bool, healthy: bool) -> ASGIApp:
    ctx = AppContext(
        StubCatalogFeed(synced=synced, healthy=healthy),
        WebhookMetrics(),
        BodyLimits(1024, 1.0, BodyBudget(4096, small_bytes=1024, reserve=512)),
    )
    return create_app(ctx)


def test_before_they_are_ready_both_binaries_answer_in_one_shape() -> None:
    """Each says its own reason; status, content type and shape are one."""
    settings = ReconcilerSettings(objects=[EXAMPLES], port=0, bind_address="127.0.0.1")
    reconciler, _ = file_reconciler(settings)  # built, never run: nothing listed, no task
    apps = {
        "webhook": webhook_app(synced=False, healthy=False),
        "reconciler": health_app(reconciler.probes()),
    }
    expected = {
        ("webhook", HEALTHZ): unavailable("catalog watch tasks stopped"),
        ("webhook", READYZ): unavailable("catalog not synced yet"),
        ("reconciler", HEALTHZ): unavailable("loop stopped"),
    }
    for (binary, path), body in expected.items():
        response = ask(apps[binary], "GET", path)
        assert (response.status_code, response.content) == (503, body)
        assert response.headers["content-type"] == JSON
    readyz = ask(apps["reconciler"], "GET", READYZ)
    assert readyz.status_code == 503 and readyz.json()["status"] == "unavailable"
    assert readyz.json()["message"].startswith("not synced yet: ")


def test_the_webhook_drain_fails_its_readiness_only() -> None:
    ctx = AppContext(
        StubCatalogFeed(synced=True, healthy=True),
        WebhookMetrics(),
        BodyLimits(1024, 1.0, BodyBudget(4096, small_bytes=1024, reserve=512)),
        draining=True,
    )
    app = create_app(ctx)
    assert ask(app, "GET", READYZ).content == unavailable("shutting down")
    assert ask(app, "GET", HEALTHZ).content == ok()


PROBES = [
    ("GET", HEALTHZ),
    ("GET", READYZ),
    ("GET", METRICS),
    ("HEAD", HEALTHZ),
    ("HEAD", READYZ),
    ("POST", HEALTHZ),
    ("GET", HEALTHZ + "/"),
]


def answer(response: httpx.Response, path: str) -> tuple[int, str, bytes]:
    """What must be equal: status, content type and body; of the metrics their content type only
    (the figures are each binary's), of a 404 or 405 the status only (the webhook's error bodies
    have the admission contract's JSON shape)."""
    if response.status_code >= 400:
        return response.status_code, "", b""
    body = b"" if path == METRICS else response.content
    return response.status_code, response.headers.get("content-type", ""), body


def test_both_binaries_answer_the_probes_alike(tmp_path: Path) -> None:
    """Ready, the webhook (HTTPS, a process) and the reconciler (HTTP, in process) answer every
    probe with the same status, content type and body (the metrics' figures and the 404 and 405
    bodies aside: the webhook's errors have the admission contract's shape)."""
    webhook = WebhookProcess(["--objects", str(EXAMPLES)], tls_dir=tmp_path)
    try:
        verify = ssl.create_default_context(cafile=webhook.ca)
        with httpx.Client(verify=verify, timeout=10) as client:
            webhook_answers = [
                answer(client.request(method, webhook.url + path), path) for method, path in PROBES
            ]
    finally:
        assert webhook.stop() == 0
    settings = ReconcilerSettings(objects=[EXAMPLES], port=0, bind_address="127.0.0.1")

    async def reconciler_answers() -> list[tuple[int, str, bytes]]:
        reconciler, _ = file_reconciler(settings)
        running = asyncio.create_task(reconciler.run())
        try:
            while not reconciler.ready or reconciler.bound_port() is None:
                await asyncio.sleep(0.02)
            base = f"http://127.0.0.1:{reconciler.bound_port()}"
            async with httpx.AsyncClient(base_url=base, timeout=10) as http:
                return [answer(await http.request(m, p), p) for m, p in PROBES]
        finally:
            reconciler.stop()
            await asyncio.wait_for(running, 10)

    reconciled = asyncio.run(asyncio.wait_for(reconciler_answers(), 30))
    assert reconciled == webhook_answers
    assert [a[0] for a in webhook_answers] == [200, 200, 200, 200, 200, 405, 404]
    assert webhook_answers[0] == (200, JSON, ok()) == webhook_answers[1]
    assert webhook_answers[2][1] == CONTENT_TYPE_LATEST
