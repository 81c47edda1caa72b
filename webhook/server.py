"""The webhook's HTTP server: uvicorn's httptools protocol with per-connection limits, over TLS.

httptools (llhttp) parses in C; uvicorn's h11 protocol parsed requests and framed responses in
Python (docs/webhook.md, Performance, has what that cost). uvicorn bounds idle keep-alive time, but not the size of the headers (its
httptools protocol has no cap), the number of connections, the time a client may take to send
its headers, nor the TLS handshake; and its SIGTERM stops accepting at once.
`GuardedProtocol` adds, per connection: a header-size cap (431), counted both on the bytes read
while a request's headers are incomplete, which bounds what httptools buffers, and on the
header block as parsed, which catches a whole block arriving in one read; a header deadline
(armed when the connection opens and when the next request's first bytes arrive, so neither an
idle-before-first-request nor a slowloris client lives longer than `header_timeout`); a cap on
connections and on requests in flight that sheds the longest-idle connection or the slowest
body rather than the newcomer (a client that sends a whole request at once — the API server —
always gets in); JSON errors for malformed requests. Its transport is wrapped in
`JoinedWrites`, so a response's head and body go out as one TLS record and one system call.
`WebhookServer` listens with a TLS handshake timeout; the drain on the first SIGTERM
(`drain_seconds` of serving with readiness failing and answers saying `Connection: close`, then
uvicorn's own graceful shutdown) is the shared server's (`shared.process.http`). Body limits live
in `webhook.limits`. docs/webhook.md lists every limit and its default.

Why one module of about 400 lines: the protocol's states, its write joining and the server's
listener share one connection table and one set of counters; split, each part would read the
others' private state.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

import orjson
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from gpuclass.shared.process.http import DrainOnSignal, Server
from gpuclass.webhook.limits import BODY_COMPLETE

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
    of connections reading a body or being answered; `phases` lists the open connections of each
    phase, longest in it first (the protocol keeps both), so a limit finds whom to cut in constant
    time however many connections are open."""

    max_connections: int
    max_in_flight: int
    max_header_bytes: int
    header_timeout: float
    handshake_timeout: float
    on_close: Callable[[str], None] = lambda reason: None  # metrics: why a connection was cut
    busy: int = 0  # connections whose request is being read or answered (kept by the protocol)
    phases: dict[str, dict[Any, None]] = field(
        default_factory=lambda: {phase: {} for phase in ("idle", "headers", "body", "answering")}
    )


class _QuietLogger(logging.Logger):
    """uvicorn logs every malformed request at warning; under attack that is a flood."""

    def warning(self, msg: object, *args: Any, **kwargs: Any) -> None:
        self.debug(msg, *args, **kwargs)


_HTTP_LOG = _QuietLogger("gpuclass.webhook.http")
_HTTP_LOG.parent = log


class JoinedWrites(asyncio.Transport):
    """A connection's TLS transport whose writes in one event-loop turn go out as one.

    uvicorn writes a response's head and its body in two calls; over TLS each write is its own
    record and its own `send` system call. Held until the turn ends (`call_soon`), they are one
    of each, and the responses decided in one turn leave together after it: more throughput, a
    longer tail when the core is shared (docs/decisions.md, "httptools under the webhook").
    Closing sends what is held first; aborting drops it. Everything else is the wrapped
    transport's."""

    def __init__(self, inner: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self.inner, self.loop = inner, loop
        self.held: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Hold `data` until the end of this turn of the event loop."""
        if not self.held:
            self.loop.call_soon(self.flush)
        self.held.append(bytes(data))

    def flush(self) -> None:
        """Write what is held, as one piece."""
        if self.held:
            data = self.held[0] if len(self.held) == 1 else b"".join(self.held)
            self.held = []
            self.inner.write(data)

    def close(self) -> None:
        """Send what is held, then close as the wrapped transport does."""
        self.flush()
        self.inner.close()

    def abort(self) -> None:
        """Drop what is held and the connection."""
        self.held = []
        self.inner.abort()

    def is_closing(self) -> bool:
        """The wrapped transport's."""
        return self.inner.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        """The wrapped transport's (socket, peer and TLS details)."""
        return self.inner.get_extra_info(name, default)

    def pause_reading(self) -> None:
        """The wrapped transport's."""
        self.inner.pause_reading()

    def resume_reading(self) -> None:
        """The wrapped transport's."""
        self.inner.resume_reading()

    def is_reading(self) -> bool:
        """The wrapped transport's."""
        return self.inner.is_reading()

    def get_write_buffer_size(self) -> int:
        """The wrapped transport's buffer and what is held."""
        return self.inner.get_write_buffer_size() + sum(len(piece) for piece in self.held)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        """The wrapped transport's."""
        self.inner.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        """The wrapped transport's."""
        return self.inner.get_protocol()


_IDLE, _HEADERS, _BODY, _ANSWERING = "idle", "headers", "body", "answering"
_BUSY = (_BODY, _ANSWERING)


class _HeadersTooLarge(Exception):
    """Raised inside httptools' callback to stop the parse; `send_400_response` answers 431."""


class GuardedProtocol(HttpToolsProtocol):
    """One HTTP/1.1 connection, parsed by httptools, with the limits of `ConnectionLimits`.

    Phases: `headers` from the connection's start, or from the first bytes of a later request,
    until its headers are complete; then `body`, then `answering` until the response is sent,
    then `idle`. A pipelined request parsed while an earlier one is answered (uvicorn queues it)
    leaves the phase as it is: one connection is one request in flight.
    """

    def __init__(  # noqa: PLR0917 - uvicorn's HTTP protocol signature
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
        self._listed = False  # in `limits.phases`, from its connection until it is gone
        self._deadline: asyncio.TimerHandle | None = None
        self._awaiting_headers = True  # no request's headers are complete since the last one ended
        self._begun = False  # bytes of the awaited request have been read
        self._header_bytes = 0  # bytes read while the awaited headers were incomplete
        self._ended_in_read = False  # a request ended inside the read being parsed
        self._too_large = False

    # -- connection life -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """uvicorn's hook for a new connection: at the cap, the longest-idle connection is cut to
        make room, or this one is refused when none is idle; then its header deadline starts."""
        if len(self.connections) >= self.limits.max_connections:
            victim = self._oldest((_IDLE, _HEADERS))
            if victim is None:
                self.transport = transport
                self.limits.on_close("connection_limit")
                transport.abort()
                return
            victim.cut("idle_evicted")
        super().connection_made(JoinedWrites(transport, self.loop))
        self._enter(_HEADERS)
        self._arm(self.limits.header_timeout, "header_timeout")

    def connection_lost(self, exc: Exception | None) -> None:
        """Stop its deadline and leave the busy count and the phase lists before uvicorn forgets
        the connection."""
        self._disarm()
        self._enter(_IDLE)
        self.limits.phases[_IDLE].pop(self, None)
        self._listed = False
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        """Parse (httptools calls the hooks below), then bound headers still incomplete: the
        bytes read while they are count against the cap (431 past it), and the first bytes of a
        request on an idle connection start its header deadline."""
        self._ended_in_read = False
        super().data_received(data)
        if not self._awaiting_headers or self.transport.is_closing():
            return
        if not self._ended_in_read:  # all of this read is the awaited request's
            self._begun = True
            self._header_bytes += len(data)
            if self._header_bytes > self.limits.max_header_bytes:
                self._refuse(431, "request headers too large", reason="headers_too_large")
                return
        if self.phase == _IDLE and self._begun:  # the next request's first bytes: headers due
            self._enter(_HEADERS)
            self._arm(self.limits.header_timeout, "header_timeout")

    def on_message_begin(self) -> None:
        """httptools: a request starts (for a pipelined one, possibly mid-read)."""
        super().on_message_begin()
        self._begun = True

    def on_headers_complete(self) -> None:
        """httptools: the headers are in. Over the cap (counted as parsed: a whole block can come
        in one read) the parse stops with 431; else the request counts as in flight."""
        size = len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)
        if size > self.limits.max_header_bytes:
            self._too_large = True
            raise _HeadersTooLarge
        super().on_headers_complete()
        self._awaiting_headers = self._begun = False
        self._header_bytes = 0
        if self.phase in (_IDLE, _HEADERS):
            self._disarm()
            self._enter(_BODY)
            self._limit_in_flight()

    def on_message_complete(self) -> None:
        """httptools: the body is in; what follows in the connection is the next request's. The
        request's scope says so, and the route reads it without a deadline (`webhook.limits`)."""
        self.scope[BODY_COMPLETE] = True  # type: ignore[literal-required]
        super().on_message_complete()
        self._awaiting_headers, self._ended_in_read = True, True
        if self.phase == _BODY:
            self._enter(_ANSWERING)

    def on_response_complete(self) -> None:
        """The answer is sent: the next queued (pipelined) request is answered, or the next
        request's headers are due if its first bytes are in, or the connection is idle (uvicorn
        arms its keep-alive timer) and no longer counts as in flight."""
        queued = self.pipeline[-1][0] if self.pipeline else None
        if queued is not None:
            self._enter(_BODY if queued.more_body else _ANSWERING)
        elif self._begun:
            self._enter(_HEADERS)
            self._arm(self.limits.header_timeout, "header_timeout")
        else:
            self._enter(_IDLE)
        super().on_response_complete()

    def send_400_response(self, msg: str) -> None:
        """uvicorn's hook for a request httptools refused: the contract's JSON error, 431 for
        headers over the cap, else 400; the connection closes."""
        if self._too_large:
            self._refuse(431, "request headers too large", reason="headers_too_large")
        else:
            self._refuse(400, "malformed HTTP request", reason="malformed")

    def _refuse(self, status: int, message: str, *, reason: str) -> None:
        """Answer `status` in the contract's JSON and close; only close when a response is
        still owed on this connection (an error written now would land inside it)."""
        self._disarm()
        self.limits.on_close(reason)
        if self.cycle is None or self.cycle.response_complete:
            body = orjson.dumps({"status": status, "error": message}) + b"\n"
            self.transport.write(
                b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\nconnection: close\r\n\r\n%s"
                % (status, HTTPStatus(status).phrase.encode(), len(body), body)
            )
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
        victim = self._oldest((_BODY,))
        (victim or self).cut("slow_body_evicted" if victim else "in_flight_limit")

    def _oldest(self, phases: tuple[str, ...]) -> GuardedProtocol | None:
        """The open connection longest in one of `phases`, other than this one and those a limit
        has already cut (they stay listed until their transport is gone)."""
        oldest: GuardedProtocol | None = None
        for phase in phases:
            for candidate in self.limits.phases[phase]:  # longest in the phase first
                if candidate is self or candidate.transport.is_closing():
                    continue
                if oldest is None or candidate.phase_since < oldest.phase_since:
                    oldest = candidate
                break
        return oldest

    def _enter(self, phase: str) -> None:
        limits = self.limits
        limits.busy += (phase in _BUSY) - (self.phase in _BUSY)
        if self._listed:
            del limits.phases[self.phase][self]
        limits.phases[phase][self] = None  # at the end: the latest to enter it
        self._listed = True
        self.phase, self.phase_since = phase, time.monotonic()

    def _arm(self, seconds: float, reason: str) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self.cut, reason)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None


class WebhookServer(Server):
    """The shared :class:`~gpuclass.shared.process.http.Server` (drain on SIGTERM, exit 0) with our
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
