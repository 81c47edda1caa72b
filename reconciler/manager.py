"""The reconciler's manager: `await Manager(settings).run()` until cancelled or stopped.

As controller-runtime's manager, it wires the pieces — one informer (list/watch
loop, :class:`~shared.kube.listwatch.Reflector`) per resource of
:data:`~reconciler.state.resources.SPECS` into the :class:`~reconciler.state.store.ClusterStore`,
the :class:`~reconciler.worker.Worker`, the Lease, and the HTTP endpoints, each a
task by name — and tears them down in order: on
cancellation or :meth:`Manager.stop` it stops writing, releases the Lease and
closes the API client. The API comes from `--kubeconfig` (or in-cluster config)
unless a :class:`~reconciler.api.port.KubeAPI` is passed in (the offline twin, tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from gpuclass.reconciler.api.dryrun import RecordingKube
from gpuclass.reconciler.api.port import KubeAPI
from gpuclass.reconciler.events import EventRecorder
from gpuclass.reconciler.leader import AlwaysLeader, LeaderElector, Leadership, LeaseSettings
from gpuclass.reconciler.metrics import ReconcilerMetrics
from gpuclass.reconciler.outcomes import WriterDeps
from gpuclass.reconciler.settings import ReconcilerSettings
from gpuclass.reconciler.state.resources import RESOURCES, Resource
from gpuclass.reconciler.state.store import ClusterStore
from gpuclass.reconciler.worker import Worker, WorkerDeps
from gpuclass.shared.kube.listwatch import Reflector
from gpuclass.shared.kube.syncview import SyncView
from gpuclass.shared.process.clock import now_rfc3339
from gpuclass.shared.process.http import OwnerStops, Probes, Server, health_app, server_config
from gpuclass.shared.process.memory import keep_returning_memory

log = logging.getLogger("gpuclass.reconciler")


class Manager:
    """One reconciler: the store and its sync view, the worker, one informer per resource, the Lease, the
    probes and the resync, run by :meth:`run` and stopped in order. `api` and `leadership` are
    injected by the offline twin and tests; `serve_http=False` for in-process use."""

    def __init__(
        self,
        settings: ReconcilerSettings,
        *,
        api: KubeAPI | None = None,
        leadership: Leadership | None = None,
        serve_http: bool = True,
        now: Callable[[], str] = now_rfc3339,
    ) -> None:
        self.settings, self.now, self.serve_http = settings, now, serve_http
        self.metrics = ReconcilerMetrics()
        self.store = ClusterStore(license_namespace=settings.license_namespace)
        self.api: KubeAPI | None = api
        self.leadership: Leadership | None = leadership
        self.elector: LeaderElector | None = None
        self.worker: Worker | None = None
        self.http: Server | None = None
        self.sync: SyncView[Resource] = SyncView(
            RESOURCES,
            clock=time.monotonic,
            stale_after=settings.relist_deadline_seconds,
            on_change=self._sync_changed,
        )
        self.passed = False
        self._complete = False
        self.stale_reason: str | None = None
        """Set by the `--objects` reload while the files cannot be read (last good state served)."""
        self.informers: Reflector[Resource] | None = None
        self.metrics.ready.set_function(lambda: 1 if self.ready else 0)
        for resource in RESOURCES:
            self.metrics.synced.labels(resource).set_function(
                lambda resource=resource: 1 if self.sync.synced(resource) else 0  # type: ignore[misc]
            )
        self._tasks: dict[str, asyncio.Task[None]] = {}
        """Running tasks by name: `informer/<resource>`, `worker`, `resync`, `leader`, `http`."""
        self._stop = asyncio.Event()

    # -- assembly ---------------------------------------------------------------------------------

    async def _connect(self) -> KubeAPI:
        if self.api is None:
            from gpuclass.reconciler.api.client import (
                KubeAdapter,  # the only kubernetes_asyncio import
            )

            self.api = await KubeAdapter.connect(self.settings)
        if self.settings.dry_run and not isinstance(self.api, RecordingKube):
            self.api = RecordingKube(self.api, forward=False)
        return self.api

    def _build(self, api: KubeAPI) -> Worker:
        s = self.settings
        if self.leadership is None:
            if s.leader_elect and not s.dry_run:
                lease = LeaseSettings(
                    namespace=s.lease_namespace(),
                    name=s.leader_election_name,
                    identity=s.identity(),
                    lease_duration=s.lease_duration_seconds,
                    renew_deadline=s.renew_deadline_seconds,
                    retry_period=s.retry_period_seconds,
                )
                self.elector = LeaderElector(api, lease, on_change=self._leadership_changed)
                self.leadership = self.elector
            else:
                self.leadership = AlwaysLeader()
        if self.elector is None:
            self.metrics.leader.set(1 if self.leadership.is_leader() else 0)
        events = EventRecorder(api, self.store, now=self.now, instance=s.identity())
        deps = WorkerDeps(
            store=self.store,
            writers=WriterDeps(api=api, events=events, metrics=self.metrics, dry_run=s.dry_run),
            leadership=self.leadership,
            sync=self.sync,
            request_relist=self._request_relist,
            now=self.now,
            on_pass=self._pass_done,
        )
        self.worker = Worker(deps, s.worker_settings())
        return self.worker

    def _informers(self, api: KubeAPI, worker: Worker) -> Reflector[Resource]:
        self.informers = Reflector(
            api,
            self.store,
            sync=self.sync,
            on_change=worker.wake,
            on_restart=lambda resource, reason: self.metrics.watch_restarts.labels(resource).inc(),
            on_store_error=lambda resource: self.metrics.store_errors.labels(resource).inc(),
        )
        return self.informers

    def _request_relist(self, resource: Resource) -> None:
        if self.informers is not None:
            self.informers.request_relist(resource)

    def _sync_changed(self, resource: Resource) -> None:
        if self.worker is None:
            return
        self.worker.sync_changed()
        if not self._complete and self.sync.all_listed():
            self._complete = True
            log.info("every resource listed; writes start")
            self.worker.wake()  # the marks gathered while listing are worked off now

    def _leadership_changed(self, leading: bool) -> None:
        self.metrics.leader.set(1 if leading else 0)
        if leading and self.worker is not None:
            self.store.mark_all()  # writes held back while following must happen now
            self.worker.wake()

    def _pass_done(self) -> None:
        if self.sync.all_listed():
            self.passed = True
            # a follower computes but writes nothing: the timestamp says when writes were made
            if self.leadership is not None and self.leadership.is_leader():
                self.metrics.last_sync.set(time.time())

    @property
    def ready(self) -> bool:
        """/readyz: every resource listed, a pass done, and no resource without a list for too long."""
        return self.passed and self.sync.all_listed() and not self.sync.stale()

    # -- probes -----------------------------------------------------------------------------------

    def bound_port(self) -> int | None:
        """The HTTP port actually listened on (useful with `--port 0`)."""
        servers = getattr(self.http, "servers", None) or []
        for srv in servers:
            for sock in srv.sockets:
                return int(sock.getsockname()[1])
        return None

    def readiness_problem(self) -> str | None:
        """Why /readyz fails, or None when ready."""
        if self.stale_reason is not None:
            return f"objects not reloaded, serving the last good state: {self.stale_reason}"
        waiting = [s for s in RESOURCES if not self.sync.state[s].listed_once]
        if waiting:
            return "not synced yet: " + ", ".join(waiting)
        stale = self.sync.stale()
        if stale:
            return "re-list failing for longer than the deadline: " + ", ".join(stale)
        return None if self.passed else "no reconcile pass yet"

    def healthy(self) -> bool:
        """Every loop task is still running."""
        return bool(self._tasks) and not any(task.done() for task in self._tasks.values())

    def liveness_problem(self) -> str | None:
        """Why /healthz fails (a loop task has ended), or None while alive."""
        return None if self.healthy() else "loop stopped"

    def liveness_note(self) -> str | None:
        """What /healthz adds to its 200: the stale `--objects` files it still serves."""
        return f"stale: {self.stale_reason}" if self.stale_reason else None

    def probes(self) -> Probes:
        """What the shared probe routes ask this reconciler (`shared.process.http.Probes`)."""
        return Probes(
            self.metrics.registry,
            live=self.liveness_problem,
            ready=self.readiness_problem,
            note=self.liveness_note,
        )

    # -- running ----------------------------------------------------------------------------------

    async def run(self) -> None:
        """Watch and reconcile until cancelled or :meth:`stop`; then release the Lease and close."""
        api = await self._connect()
        worker = self._build(api)
        informers = self._informers(api, worker)
        coroutines = {f"informer/{resource}": informers.run(resource) for resource in RESOURCES}
        coroutines |= {
            "worker": worker.run(),
            "resync": self._resync(),
            "memory": keep_returning_memory(self.settings.memory_return_seconds),
        }
        if self.elector is not None:
            coroutines["leader"] = self.elector.run()
        if self.serve_http:
            # uvicorn handles no signal: SIGTERM is ours (the Lease is released before the stop)
            app = health_app(self.probes())
            host, port = self.settings.bind_address, self.settings.port
            self.http = Server(server_config(app, host=host, port=port), signals=OwnerStops())
            coroutines["http"] = self._serve(self.http)
        self._tasks = {name: asyncio.create_task(c, name=name) for name, c in coroutines.items()}
        try:
            await self._wait()
        finally:
            await self._shutdown()

    async def _resync(self) -> None:
        """Every `--resync-seconds`, look at every class and copy again, changed or not.

        Marks only ever come from events; a periodic full pass repairs anything a missed
        mark or a bug left behind (controller-runtime's SyncPeriod). Unchanged objects cost
        a comparison, no write.
        """
        while True:
            await asyncio.sleep(self.settings.resync_seconds)
            self.store.mark_all()
            if self.worker is not None:
                self.worker.wake()

    async def _serve(self, http: Server) -> None:
        """uvicorn exits the process when it cannot listen; make that an ordinary error."""
        try:
            await http.serve()
        except SystemExit as exc:
            where = f"{self.settings.bind_address}:{self.settings.port}"
            raise OSError(f"cannot serve /metrics on {where} (uvicorn exit {exc.code})") from None

    async def _wait(self) -> None:
        stop = asyncio.create_task(self._stop.wait())
        try:
            done, _ = await asyncio.wait(
                [*self._tasks.values(), stop], return_when=asyncio.FIRST_COMPLETED
            )
            for task in done:
                error = None if task is stop else task.exception()
                if error is not None:
                    raise error
        finally:
            stop.cancel()

    def stop(self) -> None:
        """Ask :meth:`run` to return (the SIGTERM/SIGINT handler): it then stops writing, releases
        the Lease and closes the API client."""
        self._stop.set()

    async def _shutdown(self) -> None:
        http_task = self._tasks.get("http")
        for task in self._tasks.values():
            if task is not http_task:
                task.cancel()
        if self.http is not None and http_task is not None:
            self.http.should_exit = True
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(http_task), timeout=5)
            http_task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        if self.elector is not None:
            await self.elector.release()
        if self.api is not None:
            await self.api.close()
        log.info("reconciler stopped")

    async def sync_once(self) -> None:
        """List every resource once and reconcile until nothing is dirty (`--once`)."""
        await self.load()
        if self.elector is not None:
            timeout = 2 * self.elector.lease_duration + self.elector.retry_period
            if not await self.elector.acquire(timeout=timeout):
                raise TimeoutError(
                    "another replica holds the Lease; run --once with --dry-run, or stop it"
                )
        try:
            await self.reconcile_pending()
        finally:
            if self.elector is not None:
                await self.elector.release()

    async def load(self) -> None:
        """Connect and list every resource once into the store (no watch): `--once` and the benchmark."""
        api = await self._connect()
        worker = self.worker or self._build(api)
        informers = self._informers(api, worker)
        for resource in RESOURCES:
            await informers.relist(resource)

    async def reconcile_pending(self, passes: int = 5) -> None:
        """Reconcile until nothing is dirty or waits. With no watch to bring the worker's own writes
        into the store, the resources it waits on (`Worker.resources_behind`) are listed again between
        passes, through the reflector like every change, and the work that waited runs then."""
        assert self.worker is not None and self.informers is not None, "load() first"
        for _ in range(passes):
            for resource in sorted(self.worker.resources_behind()):
                await self.informers.relist(resource)
            self.worker.store_arrived()
            if not self.store.dirty:
                break
            await self.worker.reconcile_once()
