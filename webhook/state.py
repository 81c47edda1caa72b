"""Where the webhook's catalog comes from: files (`--objects`) or a live API cache.

Both sources expose the same thing to the routes: the current `Catalog` (built
once per change, never per request), whether the first full sync is done, when
the catalog last changed, and whether their background tasks are alive.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from gpuclass.shared.catalog import Catalog, Policy, build_catalog
from gpuclass.shared.runtime.filesource import FileSource
from gpuclass.shared.runtime.listwatch import ListWatchSource, RawObject, list_watch
from gpuclass.shared.snapshot import ClassRecord, Snapshot, compact_class, permitted_resources

log = logging.getLogger(__name__)


class CatalogState(Protocol):
    catalog: Catalog
    synced: bool
    updated_at: float

    async def run(self) -> None: ...

    def healthy(self) -> bool: ...


class FileState:
    """The catalog from files, with capacity figures computed from their nodes and pods."""

    def __init__(self, paths: Sequence[Path], policy: Policy, *, poll_seconds: float = 1.0) -> None:
        self._source = FileSource(paths)
        self._policy = policy
        self._poll = poll_seconds
        self.catalog = Catalog(policy=policy)
        self.synced = False
        self.updated_at = 0.0
        self._task_alive = True
        self.load()

    def load(self) -> None:
        if self._source.refresh():
            self.catalog = build_catalog(self._source.snapshot, self._policy, figures="computed")
            self.updated_at = time.time()
            self.synced = True
            log.info(
                "catalog loaded from files", extra={"fields": {"classes": len(self.catalog.offers)}}
            )

    async def run(self) -> None:
        try:
            while True:
                await asyncio.sleep(self._poll)
                self.load()
        finally:
            self._task_alive = False

    def healthy(self) -> bool:
        return self._task_alive


class ClusterState:
    """The catalog from list+watch caches of GPUClasses, Namespaces and the KubeVirt CR.

    Capacity figures are the reconciler's stored status; the webhook does not watch Pods.
    """

    def __init__(
        self,
        sources: Sequence[ListWatchSource],
        policy: Policy,
        on_restart: Callable[[str, str], None] = lambda resource, reason: None,
    ) -> None:
        self._sources = list(sources)
        self._policy = policy
        self._on_restart = on_restart
        self._objects: dict[str, dict[str, RawObject | ClassRecord]] = {
            s.name: {} for s in self._sources
        }
        self._listed: set[str] = set()
        self._tasks: list[asyncio.Task[None]] = []
        self.catalog = Catalog(policy=policy)
        self.synced = False
        self.updated_at = 0.0

    @staticmethod
    def _key(obj: RawObject) -> str:
        meta = obj.get("metadata") or {}
        return f"{meta.get('namespace', '')}/{meta.get('name', '')}"

    @staticmethod
    def _compact(name: str, obj: RawObject) -> RawObject | ClassRecord | None:
        """Keep what the catalog needs: class records, namespace labels, KubeVirt CRs as they are."""
        if name == "gpuclasses":
            return compact_class(obj)
        if name == "namespaces":
            meta = obj.get("metadata") or {}
            labels = meta.get("labels") or {}
            return {
                "name": meta.get("name"),
                "labels": {k: v for k, v in labels.items() if isinstance(v, str)},
            }
        return obj

    def _reset(self, name: str, items: list[RawObject]) -> None:
        self._objects[name] = {
            self._key(o): c for o in items if (c := self._compact(name, o)) is not None
        }
        self._listed.add(name)
        self._rebuild()

    def _event(self, name: str, event_type: str, obj: RawObject) -> None:
        if event_type == "DELETED":
            self._objects[name].pop(self._key(obj), None)
        elif (compact := self._compact(name, obj)) is not None:
            self._objects[name][self._key(obj)] = compact
        self._rebuild()

    def _rebuild(self) -> None:
        if len(self._listed) < len(self._sources):
            return
        snapshot = Snapshot()
        for record in self._objects.get("gpuclasses", {}).values():
            if isinstance(record, ClassRecord):
                snapshot.classes[record.name] = record
        for entry in self._objects.get("namespaces", {}).values():
            if isinstance(entry, dict):
                snapshot.namespaces[str(entry["name"])] = entry["labels"]
        kubevirts = list(self._objects.get("kubevirts", {}).values())
        if kubevirts:
            permitted: frozenset[str] = frozenset()
            for obj in kubevirts:
                if isinstance(obj, dict):
                    permitted |= permitted_resources(obj)
            snapshot.permitted = permitted
        self.catalog = build_catalog(snapshot, self._policy, figures="stored")
        self.updated_at = time.time()
        if not self.synced:
            log.info(
                "catalog cache synced", extra={"fields": {"classes": len(self.catalog.offers)}}
            )
        self.synced = True

    async def run(self) -> None:
        self._tasks = [
            asyncio.create_task(self._watch(source), name=f"watch-{source.name}")
            for source in self._sources
        ]
        try:
            await asyncio.gather(*self._tasks)
        finally:
            for task in self._tasks:
                task.cancel()

    async def _watch(self, source: ListWatchSource) -> None:
        name = source.name
        await list_watch(
            source,
            on_reset=lambda items: self._reset(name, items),
            on_event=lambda event_type, obj: self._event(name, event_type, obj),
            on_restart=lambda reason: self._on_restart(name, reason),
        )

    def healthy(self) -> bool:
        return bool(self._tasks) and not any(t.done() for t in self._tasks)
