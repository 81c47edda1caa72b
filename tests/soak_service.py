"""A Service in front of the webhook replicas, for the soak (benchmarks/soak.py).

The test control plane has no kube-proxy and no endpoints controller: the API server calls the
webhook by URL. This balancer stands in for the chart's webhook Service the way those two act on
it: a TCP port that spreads new connections round-robin over the replicas that are *ready*
(their `/readyz` answers 200, polled as the chart's readinessProbe polls, but every second), and a
replica taken out of the endpoints (a Pod being deleted) gets no new connection after a short
propagation delay while its open connections live on, as conntrack keeps them. Whatever a
rolling update does to admissions through a real Service, it does here: a connection the API
server pooled to a replica that then exits breaks, unless the replica's drain closes it first.

Bytes pass untouched (TLS is end to end, API server to replica).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import threading
import time
from dataclasses import dataclass, field

import httpx

from tests.controlplane.cluster import free_port


@dataclass
class Endpoint:
    """One replica behind the Service."""

    name: str
    port: int
    listed: bool = True  # in the endpoints (False once its Pod is being deleted)
    ready: bool = False  # its last readiness probe passed
    connections: int = 0
    opened_at: float = field(default_factory=time.monotonic)


class ServiceBalancer:
    """127.0.0.1:`port`, round-robin over the listed, ready endpoints."""

    def __init__(self, *, probe_period: float = 1.0, propagation: float = 1.0) -> None:
        self.port = free_port()
        self.probe_period = probe_period
        self.propagation = propagation
        self.endpoints: dict[str, Endpoint] = {}
        self.refused = 0  # connections that found no ready endpoint
        self._turn = 0
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.AbstractServer | None = None
        self._stopping = threading.Event()
        started = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(started,), daemon=True)
        self._thread.start()
        started.wait(10)
        self._prober = threading.Thread(target=self._probe_loop, daemon=True)
        self._prober.start()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    # -- endpoints --------------------------------------------------------------------------------

    def add(self, name: str, port: int) -> None:
        with self._lock:
            self.endpoints[name] = Endpoint(name, port)

    def remove(self, name: str) -> None:
        """The Pod is being deleted: after `propagation` seconds no new connection reaches it."""

        def unlist() -> None:
            time.sleep(self.propagation)
            with self._lock:
                if name in self.endpoints:
                    self.endpoints[name].listed = False

        threading.Thread(target=unlist, daemon=True).start()

    def forget(self, name: str) -> None:
        with self._lock:
            self.endpoints.pop(name, None)

    def ready_names(self) -> list[str]:
        with self._lock:
            return [e.name for e in self.endpoints.values() if e.listed and e.ready]

    def _probe_loop(self) -> None:
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        with httpx.Client(verify=context, timeout=3.0) as client:
            while not self._stopping.wait(self.probe_period):
                with self._lock:
                    targets = [(e.name, e.port) for e in self.endpoints.values()]
                for name, port in targets:
                    try:
                        ok = client.get(f"https://127.0.0.1:{port}/readyz").status_code == 200
                    except httpx.HTTPError:
                        ok = False
                    with self._lock:
                        if name in self.endpoints:
                            self.endpoints[name].ready = ok

    def _pick(self) -> Endpoint | None:
        with self._lock:
            ready = [e for e in self.endpoints.values() if e.listed and e.ready]
            if not ready:
                return None
            self._turn += 1
            return ready[self._turn % len(ready)]

    # -- the byte pump ----------------------------------------------------------------------------

    def _serve(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)

        async def open_server() -> None:
            self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)

        self._loop.run_until_complete(open_server())
        started.set()
        self._loop.run_forever()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        endpoint = self._pick()
        if endpoint is None:
            self.refused += 1
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", endpoint.port)
        except OSError:
            self.refused += 1
            writer.close()
            return
        endpoint.connections += 1
        await asyncio.gather(_pump(reader, up_writer), _pump(up_reader, writer))

    def stop(self) -> None:
        self._stopping.set()

        async def close() -> None:
            if self._server is not None:
                self._server.close()

        with contextlib.suppress(RuntimeError):
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(5)
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


async def _pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    try:
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            sink.close()
