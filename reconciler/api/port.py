"""The seam between the loop and the API server: a small Protocol and the values that cross it.

Everything above this seam (informers, worker, leader election) takes a
:class:`KubeAPI`; `reconciler/api/client.py` implements it with kubernetes_asyncio,
`reconciler/api/fake.py` with a dict (the offline twin, and the tests' fake).
Objects cross as raw dicts; failures as :class:`ApiError` with the HTTP status
(0 for a transport failure), so callers branch on 403/404/409/410 without
knowing the client library.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from gpuclass.reconciler.state.resources import Resource
from gpuclass.shared.kube.errors import ApiError
from gpuclass.shared.kube.listwatch import ListPage, RawObject, WatchEvent

__all__ = ["ApiError", "KubeAPI", "ListPage", "RawObject", "WatchEvent"]


class KubeAPI(Protocol):
    """What the reconciler asks of the API server, and nothing more.

    A write returns the object as the server stored it; the caller keeps only its
    resourceVersion, to wait until the watch brings that version into its store (it never puts
    the object into the store itself). None means nothing was sent (the dry run).
    """

    def list_pages(self, resource: Resource) -> AsyncIterator[ListPage]:
        """Pages of the resource's collection (selectors applied), consistent at one version."""
        ...

    def watch(self, resource: Resource, resource_version: str) -> AsyncIterator[WatchEvent]:
        """Changes after `resource_version` until the server ends the stream."""
        ...

    async def get_class(self, name: str) -> RawObject:
        """The class as stored now (404 when gone). The loop does not read it (after a 409 the worker
        waits for the watch to bring the newer class); the adapters' contract tests read back
        through it."""
        ...

    async def patch_class_status(self, name: str, patch: RawObject) -> RawObject | None:
        """JSON merge patch of the status subresource (`patch` may pin metadata.resourceVersion)."""
        ...

    async def patch_class_finalizers(
        self, name: str, finalizers: list[str], *, resource_version: str
    ) -> RawObject | None:
        """Merge patch of the whole `metadata.finalizers` list, pinned to `resource_version` (409
        when stale, 422 when adding one to a deleting class)."""
        ...

    async def create_secret(self, namespace: str, body: RawObject) -> RawObject | None:
        """Create a license copy; 409 AlreadyExists when a Secret of that name exists."""
        ...

    async def patch_secret(
        self, namespace: str, name: str, *, patch: list[RawObject]
    ) -> RawObject | None:
        """JSON patch of a license copy (`reconciler.state.licenses.copy_patch`): 404 when it is gone,
        422 when its `test` fails (not labelled ours) or the Secret is immutable."""
        ...

    async def delete_secret(self, namespace: str, name: str) -> None:
        """Delete a license copy (the chart's policy refuses it unless the copy carries our label)."""
        ...

    async def create_config_map(self, namespace: str, body: RawObject) -> RawObject | None:
        """Create the copy record (409 AlreadyExists when it exists)."""
        ...

    async def replace_config_map(
        self, namespace: str, name: str, *, body: RawObject
    ) -> RawObject | None:
        """Replace the copy record, pinned to `metadata.resourceVersion` of `body` (409 if stale)."""
        ...

    async def create_event(self, namespace: str, body: RawObject) -> None:
        """Create a core/v1 Event; the caller treats a failure as best effort."""
        ...

    async def get_lease(self, namespace: str, name: str) -> RawObject | None:
        """The Lease, or None when it does not exist."""
        ...

    async def create_lease(self, namespace: str, body: RawObject) -> RawObject:
        """Create the Lease (409 AlreadyExists when another replica was first)."""
        ...

    async def replace_lease(self, namespace: str, name: str, *, body: RawObject) -> RawObject:
        """Replace the Lease, pinned to `metadata.resourceVersion` of `body` (409 when another
        replica wrote it since)."""
        ...

    async def close(self) -> None:
        """Release connections and end open watches; the Manager calls it last on shutdown."""
        ...
