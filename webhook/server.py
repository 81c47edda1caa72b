"""The webhook's HTTP server: uvicorn's h11 protocol with per-connection limits, over TLS.

uvicorn bounds header size (`h11_max_incomplete_event_size`) and idle keep-alive time, but
not the number of connections, the time a client may take to send its headers, nor the
TLS handshake; and its SIGTERM stops accepting at once. `GuardedProtocol` adds, per
connection: a header deadline (armed when the connection opens and when the next request's
first bytes arrive, so neither an idle-before-first-request nor a slowloris client lives
longer than `header_timeout`); a cap on connections and on requests in flight that sheds the
longest-idle connection or the slowest body rather than the newcomer (a client that sends
a whole request at once — the API server — always gets in); JSON errors for malformed
requests. `WebhookServer` listens with a TLS handshake timeout; the drain on the first SIGTERM
(`drain_seconds` of serving with readiness failing and answers saying `Connection: close`, then
uvicorn's own graceful shutdown) is the shared server's (`shared.kube.http`). Body limits live
in `webhook.limits`. docs/webhook.md lists every limit and its default.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import h11
import orjson
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from gpuclass.shared.kube.http import DrainOnSignal, Server

log = logging.getLogger("gpuclass.webhook.server")

# asyncio's TLS transport gives every connection a 256 KiB read buffer (Python 3.11+'s
# sslproto), allocated at accept, before the handshake: 1,000 connections cost 256 MB, the
# chart's whole memory limit. It only stages ciphertext for OpenSSL, which reassembles records
# itself: 8 KiB costs a few more reads on large bodies (no measurable change in bench_webhook.py's CPU per request).
TLS_READ_BUFFER_BYTES = 8 * 1024
TLS_SHUTDOWN_SECONDS = 1.0  # how long a closing connection waits for the peer's close_notify


def shrink_tls_buffers() -> None:
    """Lower asyncio's per-connection TLS buffer (a class attribute of the stdlib transport)."""
    from asyncio import sslproto

    if getattr(sslproto.SSLProtocol, "max_size", 0) > TLS_READ_BUFFER_BYTES:
        sslproto.SSLProtocol.max_size = TLS_READ_BUFFER_BYTES


@dataclass
class ConnectionLimits:
    """The limits every connection of one server shares: connection and in-flight caps, the header
    block's size, and the header and TLS handshake timeouts in seconds. `busy` is the live count
    of connections reading a body or being answered."""

    max_connections: int
    max_in_flight: int
    max_header_bytes: int
    header_timeout: float
    handshake_timeout: float
    on_close: Callable[[str], None] = lambda reason: None  # metrics: why a connection was cut
    busy: int = 0  # connections whose request is being read or answered (kept by the protocol)


class _QuietLogger(logging.Logger):
    """uvicorn logs every malformed request at warning; under attack that is a flood."""

    def warning(self, msg: object, *args: Any, **kwargs: Any) -> None:
        self.debug(msg, *args, **kwargs)


_HTTP_LOG = _QuietLogger("gpuclass.webhook.http")
_HTTP_LOG.parent = log


_IDLE, _HEADERS, _BODY, _ANSWERING = "idle", "headers", "body", "answering"
_BUSY = (_BODY, _ANSWERING)


class GuardedProtocol(H11Protocol):
    """One HTTP/1.1 connection, with the limits of `ConnectionLimits`."""

    def __init__(
        self,
        config: uvicorn.Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
        *,
        limits: ConnectionLimits,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.limits = limits
        self.logger = _HTTP_LOG
        self.phase = _IDLE
        self.phase_since = time.monotonic()
        self._deadline: asyncio.TimerHandle | None = None

    # -- connection life -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """uvicorn's hook for a new connection: at the cap, the longest-idle connection is cut to
        make room, or this one is refused when none is idle; then its header deadline starts."""
        if len(self.connections) >= self.limits.max_connections:
            victim = self._oldest(self.connections, (_IDLE, _HEADERS))
            if victim is None:
                self.transport = transport
                self.limits.on_close("connection_limit")
                transport.abort()
                return
            victim.cut("idle_evicted")
        super().connection_made(transport)
        self._enter(_HEADERS)
        self._arm(self.limits.header_timeout, "header_timeout")

    def connection_lost(self, exc: Exception | None) -> None:
        """Stop its deadline and leave the busy count before uvicorn forgets the connection."""
        self._disarm()
        self._enter(_IDLE)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        """Refuse a header block over the cap before h11 parses it, then follow h11's state: a
        header deadline for each new request, the in-flight count once its headers are in."""
        if self.conn.their_state is h11.IDLE and self._headers_too_large(data):
            self._refuse(431, "request headers too large", "headers_too_large")
            return
        super().data_received(data)
        state = self.conn.their_state
        if state is h11.IDLE and self.phase == _IDLE:
            self._enter(_HEADERS)  # the next request's first bytes: its headers are due
            self._arm(self.limits.header_timeout, "header_timeout")
        elif state in (h11.SEND_BODY, h11.DONE) and self.phase in (_IDLE, _HEADERS):
            self._disarm()
            self._enter(_BODY if state is h11.SEND_BODY else _ANSWERING)
            self._limit_in_flight()
        elif state is h11.DONE and self.phase == _BODY:
            self._enter(_ANSWERING)

    def on_response_complete(self) -> None:
        """The answer is sent: the connection is idle again and no longer counts as in flight."""
        self._enter(_IDLE)  # uvicorn arms its keep-alive timer for the idle time
        super().on_response_complete()

    def _headers_too_large(self, data: bytes) -> bool:
        """h11 caps only an *incomplete* header block; one read can bring a complete larger one."""
        cap = self.limits.max_header_bytes
        buffered = self.conn.trailing_data[0]
        if len(buffered) + len(data) <= cap:
            return False
        return b"\r\n\r\n" not in (bytes(buffered) + data)[: cap + 4]

    def send_400_response(self, msg: str) -> None:
        """A malformed request (uvicorn's hook): the contract's JSON error; the connection closes."""
        self._refuse(400, "malformed HTTP request", "malformed")

    def _refuse(self, status: int, message: str, reason: str) -> None:
        self._disarm()
        self.limits.on_close(reason)
        body = orjson.dumps({"status": status, "error": message}) + b"\n"
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        try:
            self.transport.write(self.conn.send(h11.Response(status_code=status, headers=headers)))
            self.transport.write(self.conn.send(h11.Data(data=body)))
            self.transport.write(self.conn.send(h11.EndOfMessage()))
        except h11.LocalProtocolError:  # h11 cannot answer in this state: just close
            pass
        self.transport.close()

    def cut(self, reason: str) -> None:
        """Drop the connection at once (no TLS goodbye): a limit chose it."""
        self._disarm()
        self.limits.on_close(reason)
        log.debug("connection closed by a limit", extra={"fields": {"reason": reason}})
        if self.transport is not None and not self.transport.is_closing():
            self.transport.abort()

    # -- limits ----------------------------------------------------------------------------

    def _limit_in_flight(self) -> None:
        if self.limits.busy <= self.limits.max_in_flight:
            return
        victim = self._oldest(self.connections, (_BODY,), exclude=self)
        (victim or self).cut("slow_body_evicted" if victim else "in_flight_limit")

    @staticmethod
    def _oldest(
        connections: set[Any], phases: tuple[str, ...], *, exclude: object = None
    ) -> GuardedProtocol | None:
        candidates = [
            c
            for c in connections
            if isinstance(c, GuardedProtocol) and c.phase in phases and c is not exclude
        ]
        return min(candidates, key=lambda c: c.phase_since, default=None)

    def _enter(self, phase: str) -> None:
        self.limits.busy += (phase in _BUSY) - (self.phase in _BUSY)
        self.phase, self.phase_since = phase, time.monotonic()

    def _arm(self, seconds: float, reason: str) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self.cut, reason)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None


class WebhookServer(Server):
    """The shared :class:`~gpuclass.shared.kube.http.Server` (drain on SIGTERM, exit 0) with our
    protocol and a TLS handshake timeout: uvicorn's `startup`, re-implemented to listen with them."""

    drain_log = log

    def __init__(
        self,
        config: uvicorn.Config,
        *,
        tls: ssl.SSLContext,
        limits: ConnectionLimits,
        drain_seconds: float,
        on_drain: Callable[[], None],
    ) -> None:
        super().__init__(config, signals=DrainOnSignal(drain_seconds, on_drain))
        self.tls, self.limits = tls, limits

    async def startup(self, sockets: list[Any] | None = None) -> None:
        """Listen as uvicorn's startup does, but with :class:`GuardedProtocol`, our TLS context and
        the handshake and TLS shutdown timeouts; a failed lifespan startup or listen exits 2."""
        await self.lifespan.startup()
        if self.lifespan.should_exit:
            raise SystemExit(2)
        config = self.config

        def create_protocol(_loop: asyncio.AbstractEventLoop | None = None) -> asyncio.Protocol:
            return GuardedProtocol(
                config, self.server_state, self.lifespan.state, _loop, limits=self.limits
            )

        loop = asyncio.get_running_loop()
        try:
            server = await loop.create_server(
                create_protocol,
                host=config.host,
                port=config.port,
                ssl=self.tls,
                backlog=config.backlog,
                ssl_handshake_timeout=self.limits.handshake_timeout,
                ssl_shutdown_timeout=TLS_SHUTDOWN_SECONDS,
            )
        except OSError as exc:
            log.error("cannot listen", extra={"fields": {"error": str(exc)}})
            await self.lifespan.shutdown()
            raise SystemExit(2) from exc
        self.servers = [server]
        self.started = True
