"""A small TLS proxy in front of kube-apiserver that injects faults, for the fault tests.

It terminates TLS with a serving certificate of the control plane's CA (so a
client's kubeconfig only needs another `server:`), and forwards every request
upstream as one user (that user's client certificate). Bodies and streams pass
through untouched (compressed bytes stay compressed). What it can do to the
traffic:

- hold matching requests for a while before forwarding them (a slow list);
- break the open watches that match (a dropped connection);
- answer matching requests itself with a Status (e.g. 410 Gone);
- while `outage` is set (the API server restarting), end client streams cleanly when the
  upstream dies (as a server-side watch timeout would) and hold new requests until it is
  cleared, so a client resumes its watches, from the versions it had, on the new server.

It records every request it forwarded — time, method, path, query, status — so a
test can say exactly what a client wrote while a fault lasted. It listens on
127.0.0.1 only, runs in its own thread and event loop, and stops with `stop()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web

HOP_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "keep-alive"}
WRITE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}
RELEASED_FINALIZER = "gpu.cozystack.io/in-use"
Match = Callable[[str, str, dict[str, str]], bool]
"""(method, path, query) -> whether a rule applies."""


@dataclass(slots=True)
class Entry:
    at: float
    method: str
    path: str
    query: dict[str, str]
    status: int = 0
    finalizers: list[str] | None = None
    """For a metadata patch of an object: the finalizer list it writes (Secret bodies are
    never kept: they hold tokens)."""

    @property
    def write(self) -> bool:
        return self.method in WRITE_METHODS and "/leases" not in self.path

    @property
    def deletion(self) -> bool:
        """A write that releases something: a DELETE, or a finalizer list without ours."""
        if self.method == "DELETE":
            return True
        return self.finalizers is not None and RELEASED_FINALIZER not in self.finalizers

    def __str__(self) -> str:
        query = "&".join(f"{k}={v}" for k, v in sorted(self.query.items()) if k != "fieldManager")
        return f"{self.method} {self.path}{'?' + query if query else ''} -> {self.status}"


@dataclass(slots=True)
class Rule:
    match: Match
    hold: float = 0.0
    status: int = 0
    times: int = 1
    used: int = 0


@dataclass(slots=True)
class FaultProxy:
    upstream: str
    ca_file: Path
    cert_file: Path
    key_file: Path
    serving: tuple[Path, Path]
    entries: list[Entry] = field(default_factory=list)
    rules: list[Rule] = field(default_factory=list)
    port: int = 0
    outage: bool = False
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _runner: web.AppRunner | None = None
    _session: aiohttp.ClientSession | None = None
    _watches: dict[asyncio.Task[Any], str] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # -- control (from the test's thread) -------------------------------------------------------

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> FaultProxy:
        ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(ready,), daemon=True)
        self._thread.start()
        if not ready.wait(15):
            raise RuntimeError("the fault proxy did not start")
        return self

    def stop(self) -> None:
        if self._loop is None:
            return
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(15)
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(15)
        self._loop = None

    def add(self, rule: Rule) -> Rule:
        with self._lock:
            self.rules.append(rule)
        return rule

    def break_watches(self, match: Callable[[str], bool]) -> int:
        """Cut every open watch whose path matches; returns how many were cut."""
        assert self._loop is not None

        def cut() -> int:
            tasks = [t for t, path in self._watches.items() if match(path)]
            for task in tasks:
                task.cancel()
            return len(tasks)

        return asyncio.run_coroutine_threadsafe(_call(cut), self._loop).result(5)

    def kubeconfig(self, source: Path, target: Path) -> Path:
        """`source` with its server replaced by this proxy."""
        config = yaml.safe_load(source.read_text())
        for cluster in config["clusters"]:
            cluster["cluster"]["server"] = self.url
        target.write_text(yaml.safe_dump(config))
        target.chmod(0o600)
        return target

    def writes(self, since: float = 0.0, until: float = float("inf")) -> list[Entry]:
        with self._lock:
            return [e for e in self.entries if e.write and since <= e.at <= until]

    def forwarded(self, match: Match, since: float = 0.0) -> list[Entry]:
        with self._lock:
            return [e for e in self.entries if e.at >= since and match(e.method, e.path, e.query)]

    # -- the server (its own thread and loop) ----------------------------------------------------

    def _serve(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        loop.run_until_complete(self._open())
        ready.set()
        loop.run_forever()
        loop.close()

    async def _open(self) -> None:
        upstream_tls = ssl.create_default_context(cafile=str(self.ca_file))
        upstream_tls.load_cert_chain(str(self.cert_file), str(self.key_file))
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=upstream_tls),
            auto_decompress=False,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
        )
        serving_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        serving_tls.load_cert_chain(str(self.serving[0]), str(self.serving[1]))
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=serving_tls)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def _close(self) -> None:
        for task in list(self._watches):
            task.cancel()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    def _rule(self, method: str, path: str, query: dict[str, str]) -> Rule | None:
        with self._lock:
            for rule in self.rules:
                if rule.used < rule.times and rule.match(method, path, query):
                    rule.used += 1
                    return rule
        return None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        query = dict(request.query)
        entry = Entry(time.monotonic(), request.method, request.path, query)
        rule = self._rule(request.method, request.path, query)
        if rule is not None and rule.hold:
            await asyncio.sleep(rule.hold)
            entry.at = time.monotonic()
        if rule is not None and rule.status:
            entry.status = rule.status
            self._record(entry)
            body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": rule.status}
            body["reason"] = "Expired" if rule.status == 410 else "InternalError"
            body["message"] = "injected by the fault proxy"
            return web.json_response(body, status=rule.status)
        return await self._forward(request, entry)

    async def _send(
        self, request: web.Request, body: bytes, headers: dict[str, str]
    ) -> aiohttp.ClientResponse:
        assert self._session is not None
        deadline = time.monotonic() + 60
        while self.outage and time.monotonic() < deadline:  # held until the server is back
            await asyncio.sleep(0.1)
        return await self._session.request(
            request.method, self.upstream + request.path_qs, data=body, headers=headers
        )

    def _record(self, entry: Entry) -> None:
        with self._lock:
            self.entries.append(entry)

    async def _forward(self, request: web.Request, entry: Entry) -> web.StreamResponse:
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS}
        body = await request.read()
        if request.method == "PATCH" and "/secrets" not in request.path:
            with contextlib.suppress(ValueError, AttributeError, TypeError):
                finalizers = json.loads(body).get("metadata", {}).get("finalizers")
                entry.finalizers = list(finalizers) if isinstance(finalizers, list) else None
        watch = request.query.get("watch") in ("true", "1")
        task = asyncio.current_task()
        if watch and task is not None:
            self._watches[task] = request.path
        response: web.StreamResponse | None = None
        try:
            async with await self._send(request, body, headers) as upstream:
                entry.status = upstream.status
                self._record(entry)
                response = web.StreamResponse(
                    status=upstream.status,
                    headers={
                        k: v for k, v in upstream.headers.items() if k.lower() not in HOP_HEADERS
                    },
                )
                await response.prepare(request)
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
                return response
        except aiohttp.ClientError as exc:
            if response is not None:  # mid-stream: the upstream died, so does the client's stream
                if self.outage:
                    with contextlib.suppress(ConnectionError, RuntimeError):
                        await response.write_eof()
                elif request.transport is not None:
                    request.transport.close()
                return response
            entry.status = 502
            self._record(entry)
            return web.Response(status=502, text=json.dumps({"message": str(exc)}))
        finally:
            if task is not None:
                self._watches.pop(task, None)


async def _call(function: Callable[[], int]) -> int:
    with contextlib.suppress(Exception):
        return function()
    return 0
