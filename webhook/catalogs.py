"""Where the webhook's catalog comes from: files (`--objects`) or a store kept by list+watch.

Both feeds expose the same thing to the routes (:class:`CatalogFeed`): the current `Catalog` (built
once per change, never per request), whether the first full sync is done, when
the catalog last changed, and whether their background tasks are alive.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from gpuclass.shared.core.base import names
from gpuclass.shared.core.base.meta import Key, object_key
from gpuclass.shared.core.model.detail import Quota, extended_quota, group_quotas
from gpuclass.shared.core.model.kubevirt import read_kubevirt
from gpuclass.shared.core.model.snapshot import ClassRecord, Snapshot, compact_class
from gpuclass.shared.core.status.catalog import Catalog, Policy, build_catalog
from gpuclass.shared.files.filesource import FileSource
from gpuclass.shared.kube.listwatch import ListerWatcher, RawObject, Reflector
from gpuclass.shared.kube.syncview import SyncView

RESOURCES = ("gpuclasses", "namespaces", "kubevirts", "resourcequotas")
Compact = RawObject | ClassRecord | tuple[str, Quota]
"""What the store keeps of one object (:meth:`CatalogStore._compact`)."""

log = logging.getLogger(__name__)


class CatalogFeed(Protocol):
    """What the routes and probes read, whichever feed it is: `catalog` for every review,
    `synced` for /readyz, `updated_at` (epoch seconds, 0 before the first build) for the
    catalog-age metric."""

    catalog: Catalog
    synced: bool
    updated_at: float

    async def run(self) -> None:
        """The background work that keeps the catalog current, started in the app's lifespan and
        meant to run until the app cancels it."""
        ...

    def healthy(self) -> bool:
        """Whether that background work is still running: /healthz fails when it has stopped, so the
        kubelet restarts the Pod."""
        ...


class FileCatalog:
    """The catalog from files, with capacity figures computed from their nodes and pods."""

    def __init__(
        self,
        paths: Sequence[Path],
        policy: Policy,
        *,
        poll_seconds: float = 1.0,
        kubevirt_namespace: str = names.DEFAULT_KUBEVIRT_NAMESPACE,
    ) -> None:
        self._source = FileSource(paths, kubevirt_namespace=kubevirt_namespace)
        self._policy = policy
        self._poll = poll_seconds
        self.catalog = Catalog(policy=policy)
        self.synced = False
        self.updated_at = 0.0
        self._task_alive = True
        self.load()

    def load(self) -> None:
        """Rebuild the catalog when the files changed (computed figures); on a bad file the last
        good catalog stays (only the first load may raise)."""
        if self._source.refresh():
            self.catalog = build_catalog(self._source.snapshot, self._policy, figures="computed")
            self.updated_at = time.time()
            self.synced = True
            log.info(
                "catalog loaded from files", extra={"fields": {"classes": len(self.catalog.offers)}}
            )

    async def run(self) -> None:
        """Poll the files every `poll_seconds` for as long as the server runs."""
        try:
            while True:
                await asyncio.sleep(self._poll)
                self.load()
        finally:
            self._task_alive = False

    def healthy(self) -> bool:
        """False once the poll loop has ended (it only ends by an error or cancellation)."""
        return self._task_alive


class CatalogStore:
    """The catalog from a store of GPUClasses, Namespaces, KubeVirt CRs and ResourceQuotas
    kept by list+watch.

    The store is a :class:`shared.kube.listwatch.Store` kept by the shared reflector,
    the loop the reconciler's informers run too, and nothing else writes it. A (re-)list
    goes in page by page, and what the list no longer holds is swept only after its last
    page, so mid-re-list the store holds the previous view plus what the new list has
    shown, never less. 410 Gone re-lists at once, other failures after a backoff with
    jitter; each resource has its own sync state. The catalog is rebuilt once every
    resource has completed its first list, then after each page and each event.
    Capacity figures are the reconciler's stored status; the webhook does not watch Pods.
    """

    def __init__(
        self,
        lister_watcher: ListerWatcher[str],
        policy: Policy,
        *,
        on_restart: Callable[[str, str], None] = lambda resource, reason: None,
        on_store_error: Callable[[str], None] = lambda resource: None,
        resources: Sequence[str] = RESOURCES,
    ) -> None:
        self._resources = tuple(resources)
        self._policy = policy
        self._objects: dict[str, dict[Key, Compact]] = {r: {} for r in self._resources}
        self._sync: SyncView[str] = SyncView(self._resources, clock=time.monotonic)
        self._reflector: Reflector[str] = Reflector(
            lister_watcher,
            self,
            sync=self._sync,
            on_change=self._rebuild,
            on_restart=on_restart,
            on_store_error=on_store_error,
        )
        self._tasks: list[asyncio.Task[None]] = []
        self.catalog = Catalog(policy=policy)
        self.synced = False
        self.updated_at = 0.0

    @staticmethod
    def _compact(name: str, obj: Mapping[str, Any]) -> Compact | None:
        """Keep what the catalog needs: class records, namespace labels, KubeVirt CRs as they are,
        and of a ResourceQuota only its extended-resource request keys (VM admission's quota
        warning reads nothing else)."""
        if name == "gpuclasses":
            return compact_class(obj)
        if name == "resourcequotas":
            return extended_quota(obj)
        if name == "namespaces":
            meta = obj.get("metadata") or {}
            labels = meta.get("labels") or {}
            return {
                "name": meta.get("name"),
                "labels": {k: v for k, v in labels.items() if isinstance(v, str)},
            }
        return dict(obj)

    # -- the Store the reflector keeps ---------------------------------------------------------

    def upsert(self, resource: str, obj: Mapping[str, Any]) -> None:
        """Keep the compact form of a listed or watched object; an object without a name, or a class
        record that cannot be made, is not kept."""
        key = object_key(obj)
        compact = self._compact(resource, obj) if key is not None else None
        if key is not None and compact is not None:
            self._objects[resource][key] = compact

    def delete(self, resource: str, obj: Mapping[str, Any]) -> None:
        """Forget a deleted object."""
        key = object_key(obj)
        if key is not None:
            self._objects[resource].pop(key, None)

    def sweep(self, resource: str, seen: set[Key]) -> None:
        """After a complete list of `resource`: forget every object it did not hold."""
        store = self._objects[resource]
        for key in [k for k in store if k not in seen]:
            del store[key]

    # -- the catalog -----------------------------------------------------------------------------

    def _rebuild(self) -> None:
        if not self._sync.all_listed():
            return
        snapshot = Snapshot()
        for record in self._objects.get("gpuclasses", {}).values():
            if isinstance(record, ClassRecord):
                snapshot.classes[record.name] = record
        for entry in self._objects.get("namespaces", {}).values():
            if isinstance(entry, dict):
                snapshot.namespaces[str(entry["name"])] = entry["labels"]
        kubevirts = self._objects.get("kubevirts", {}).values()
        snapshot.use_kubevirt(read_kubevirt(obj for obj in kubevirts if isinstance(obj, dict)))
        quotas = self._objects.get("resourcequotas", {}).values()
        snapshot.quotas = group_quotas(q for q in quotas if isinstance(q, tuple))
        self.catalog = build_catalog(snapshot, self._policy, figures="stored")
        self.updated_at = time.time()
        if not self.synced:
            log.info(
                "catalog cache synced", extra={"fields": {"classes": len(self.catalog.offers)}}
            )
        self.synced = True

    async def run(self) -> None:
        """One reflector task per resource until cancelled; cancelling this cancels them all."""
        self._tasks = [
            asyncio.create_task(self._reflector.run(resource), name=f"watch-{resource}")
            for resource in self._resources
        ]
        try:
            await asyncio.gather(*self._tasks)
        finally:
            for task in self._tasks:
                task.cancel()

    def healthy(self) -> bool:
        """Every watch task has started and none has ended (a reflector only ends on a bug or
        cancellation)."""
        return bool(self._tasks) and not any(t.done() for t in self._tasks)
