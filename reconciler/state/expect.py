"""Read-your-writes: what the store must show before the worker acts on an object it wrote.

The reconciler's store (:class:`reconciler.state.store.ClusterStore`) has one writer, the
reflector. A write's response is not put into it; as controller-runtime's controllers do,
the worker waits for its informer instead. Per object (resource and key) it records here the
resourceVersion the store must show before the object is acted on again:

- after a write the server took, the version the write returned: the store must reach it;
- after a 409, the version the write was pinned to: the store must move past it (the
  server holds a newer object, whose version the 409 does not say).

Until then the worker leaves that object alone. An expectation is met when the store's
copy of the object shows it; when the object has left the store after its resource reached
the version (it came and was deleted); or when a list of the resource begun after the
expectation has completed (a list is a consistent read of the server, so nothing older
than the expectation is left in the store, whatever the object's version says).

Pure: versions, the resource's sync state and the time (`now`, in seconds of the caller's
clock) come in as arguments.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuclass.reconciler.state.resources import Resource
from gpuclass.shared.core.base.meta import Key, version_reached
from gpuclass.shared.kube.syncview import ResourceSync


@dataclass(frozen=True, slots=True)
class Expectation:
    """What the store must show of one object: `version`, or past it when `newer` (a 409).

    `since` is when it was recorded (the caller's clock, for the re-list deadline) and `lists`
    the number of lists of its resource begun by then (:attr:`ResourceSync.lists`).
    """

    version: str
    newer: bool
    since: float
    lists: int

    def met(self, *, held: str, sync: ResourceSync) -> bool:
        """Whether a store holding the object at `held` ("" when it holds none), with its resource's
        sync state `sync`, shows what this expectation asks."""
        if sync.synced and sync.lists > self.lists:
            return True  # a list begun after the write is in: the store is as new as the server was
        if held:
            return version_reached(held, self.version) and not (self.newer and held == self.version)
        if not self.version:
            return not self.newer  # a create's 409 names no version: wait until the object shows
        return version_reached(sync.version, self.version)  # the object came and was deleted


class Expectations:
    """The expectations of the objects the worker wrote, at most one per object: the newest write
    or conflict replaces the one before."""

    def __init__(self) -> None:
        self._by_object: dict[tuple[Resource, Key], Expectation] = {}

    def __len__(self) -> int:
        return len(self._by_object)

    def written(
        self, resource: Resource, key: Key, *, version: str, now: float, lists: int
    ) -> None:
        """A write the server took returned the object at `version`: the store must reach it."""
        self._by_object[(resource, key)] = Expectation(version, False, now, lists)

    def conflicted(
        self, resource: Resource, key: Key, *, stale: str, now: float, lists: int
    ) -> None:
        """A write pinned to `stale` met a 409 (or a create met AlreadyExists, `stale` ""): the
        store must move past it."""
        self._by_object[(resource, key)] = Expectation(stale, True, now, lists)

    def unmet(
        self, resource: Resource, key: Key, *, held: str, sync: ResourceSync
    ) -> Expectation | None:
        """The object's expectation while the store does not yet show it; None when there is none
        (one that is met now is dropped)."""
        expectation = self._by_object.get((resource, key))
        if expectation is None:
            return None
        if expectation.met(held=held, sync=sync):
            del self._by_object[(resource, key)]
            return None
        return expectation

    def drop(self, resource: Resource, key: Key) -> None:
        """Forget the object's expectation: the object is gone from the store."""
        self._by_object.pop((resource, key), None)
