"""Which watched resources a store is complete for, and how fresh each one is.

A write is only as good as the view it was decided on. This module keeps, per
resource (list/watch stream), what client-go's reflector keeps in its `HasSynced`
flag and last-sync resourceVersion:

- *listed once*: the first full list has arrived. Until every resource has, the
  worker writes nothing at all (`WaitForCacheSync`).
- *synced now*: the resource is not in the middle of a re-list. A re-list (410,
  dropped watch, API server restart) makes it unsynced again until the whole list
  is in; deletions that depend on it wait (a half-done list must never look like
  "everything was deleted").
- *version*: the newest resourceVersion the resource has reached (list, event or
  bookmark). A deletion that depends on a resource also needs that resource to have
  reached the version of the object being released: the class whose finalizer is
  removed, the copy that is deleted. Any VMI that could hold either was created
  before that object's version, so a view at or past it has seen that VMI.
- *unsynced since*: when a resource lost sync (or started), so `/readyz` can drop
  once a re-list has failed for longer than a bounded time.
- *lists*: how many lists have begun. A resource that is synced now with more lists
  begun than at some moment has completed a list begun after it: a consistent read
  of the server, so its view holds nothing older than that moment (the reconciler's
  read-your-writes, `reconciler.state.expect`, ends a wait with it).

resourceVersions are compared by :func:`shared.core.base.meta.version_reached`.

No I/O: the reflector (shared.kube.listwatch) reports; the reconciler's worker,
the webhook's catalog store and both binaries' probes ask; the clock is passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from gpuclass.shared.core.base.meta import version_reached

__all__ = ["ResourceSync", "SyncView", "version_reached"]

R = TypeVar("R", bound=str)


@dataclass(slots=True)
class ResourceSync:
    """One resource's entry: listed at least once, synced now, the newest version seen, since when
    (clock seconds) it has been without a complete view, how many lists have begun, and when
    (clock seconds) a watch event or bookmark last moved it on."""

    listed_once: bool = False
    synced: bool = False
    version: str = ""
    unsynced_since: float | None = None
    lists: int = 0
    moved_at: float | None = None


@dataclass(slots=True)
class SyncView(Generic[R]):
    """The sync state of every resource, written by the reflector and read by the write gates and
    probes.

    `stale_after` is in seconds of `clock`; `on_change` is called with the resource on each change
    of its state (the reconciler wakes its worker, whose deletions may wait on it).
    """

    resources: tuple[R, ...]
    clock: Callable[[], float]
    stale_after: float = 120.0
    on_change: Callable[[R], None] = lambda resource: None
    state: dict[R, ResourceSync] = field(default_factory=dict)

    def __post_init__(self) -> None:
        now = self.clock()
        for resource in self.resources:
            self.state.setdefault(resource, ResourceSync(unsynced_since=now))

    # -- reported by the streams ----------------------------------------------------------------

    def relisting(self, resource: R) -> None:
        """A (re-)list started: the resource is not synced until it completes."""
        entry = self.state[resource]
        if entry.synced or entry.unsynced_since is None:
            entry.unsynced_since = self.clock()
        entry.synced = False
        entry.moved_at = None
        entry.lists += 1
        self.on_change(resource)

    def listed(self, resource: R, version: str) -> None:
        """The whole list is in; the view of this resource is complete at `version`."""
        entry = self.state[resource]
        entry.listed_once = entry.synced = True
        entry.unsynced_since = None
        entry.version = version or entry.version
        self.on_change(resource)

    def progressed(self, resource: R, version: str) -> None:
        """A watch event or bookmark: the view of this resource has reached `version`."""
        entry = self.state[resource]
        if version and version_reached(version, entry.version):
            entry.version = version
            if entry.synced:
                entry.moved_at = self.clock()
                self.on_change(resource)

    # -- asked by the worker and the probes -------------------------------------------------------

    def all_listed(self) -> bool:
        """Every resource has completed its first list: writes may start."""
        return all(entry.listed_once for entry in self.state.values())

    def synced(self, resource: R) -> bool:
        """The resource's view is complete now (listed, and no re-list under way since)."""
        return self.state[resource].synced

    def behind(self, resources: Iterable[R], required: str) -> tuple[R, ...]:
        """The resources that keep a deletion of an object at `required` waiting (none: go)."""
        return tuple(
            s
            for s in resources
            if not self.state[s].synced or not version_reached(self.state[s].version, required)
        )

    def moving(self, resource: R, *, within: float) -> bool:
        """Synced, and its watch moved it on in the last `within` seconds: a busy watch, which
        will soon bring a version a little ahead of it without a re-list."""
        entry = self.state[resource]
        return (
            entry.synced and entry.moved_at is not None and self.clock() - entry.moved_at <= within
        )

    def stale(self) -> tuple[R, ...]:
        """Resources that have been without a complete list for longer than `stale_after`."""
        now = self.clock()
        return tuple(
            s
            for s, e in self.state.items()
            if e.unsynced_since is not None and now - e.unsynced_since > self.stale_after
        )
