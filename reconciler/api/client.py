"""The reconciler's only kubernetes_asyncio adapter: :class:`reconciler.api.port.KubeAPI` over HTTP.

Lists, watches and raw requests are the shared :class:`shared.kube.kubeclient.RawClient`
(the webhook uses the same one); this module adds what the reconciler watches and
the few writes it makes (status and finalizer merge patches, license-copy Secrets,
Events, the Lease).

What it lists and watches, with which selectors, is :data:`reconciler.state.resources.SPECS`.
A `by_name` resource (the license source Secrets) is read one name at a time, each
with a `metadata.name` field selector, so the chart's Role can grant it by
`resourceNames` and nothing else in that namespace is readable: one list per name
makes the list, one watch per name merged into one stream makes the watch, each
name resuming from its own resourceVersion.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from kubernetes_asyncio import client

from gpuclass.reconciler.api.port import ApiError, RawObject
from gpuclass.reconciler.settings import ReconcilerSettings
from gpuclass.reconciler.state.resources import SPECS, Scope, collections, name_selector
from gpuclass.shared.kube.apicollections import (
    CONFIGMAPS,
    EVENTS,
    GPUCLASSES,
    LEASES,
    SECRETS,
)
from gpuclass.shared.kube.kubeclient import RawClient
from gpuclass.shared.kube.listwatch import ListPage, WatchEvent
from gpuclass.shared.kube.ratelimit import TokenBucket

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
FIELD_MANAGER = "gpuclass-reconciler"
"""Named on every write (managedFields show who owns what)."""


class KubeAdapter(RawClient):
    """The shared raw client (lists, watches, requests) plus the reconciler's few writes."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        scope: Scope,
        page_size: int = 500,
        watch_timeout: int = 290,
        request_timeout: float = 60.0,
        limiter: TokenBucket | None = None,
    ) -> None:
        self.scope = scope
        self._name_versions: dict[str, str] = {}
        """resourceVersion each named read has reached (its list, then its watch events)."""
        super().__init__(
            api,
            collections(scope),
            field_manager=FIELD_MANAGER,
            page_size=page_size,
            watch_timeout=watch_timeout,
            request_timeout=request_timeout,
            limiter=limiter,
        )

    @classmethod
    async def connect(cls, settings: ReconcilerSettings) -> KubeAdapter:
        """The adapter for these settings: the cluster configuration (`--kubeconfig`, `--context`,
        in-cluster), the page size, watch timeout and client-side rate limit; no usable
        configuration is an ApiError with status 0."""
        from gpuclass.shared.kube.clusterconfig import ClusterConfigError
        from gpuclass.shared.kube.kubeclient import api_client

        try:
            api = await api_client(
                settings.kubeconfig, binary=FIELD_MANAGER, context=settings.context
            )
        except ClusterConfigError as exc:
            raise ApiError(0, "ConfigError", message=f"no API client: {exc}") from exc
        return cls(
            api,
            scope=settings.scope(),
            page_size=settings.list_page_size,
            watch_timeout=settings.watch_timeout_seconds,
            limiter=TokenBucket(settings.kube_api_qps, settings.kube_api_burst),
        )

    # -- reads by name ----------------------------------------------------------------------------

    def _names(self, resource: str) -> list[str] | None:
        spec = SPECS.get(resource)  # type: ignore[call-overload]
        if spec is None or not spec.by_name or self.scope.license_secret_names is None:
            return None
        return sorted(self.scope.license_secret_names)

    def list_pages(self, resource: str) -> AsyncIterator[ListPage]:
        """As RawClient's, except a `by_name` resource with names configured: one list per name,
        folded into one page at the newest of their versions."""
        names = self._names(resource)
        return super().list_pages(resource) if names is None else self._list_named(resource, names)

    def watch(self, resource: str, resource_version: str) -> AsyncIterator[WatchEvent]:
        """As RawClient's, except a `by_name` resource with names configured: every name's watch
        merged, each from its own version (the `resource_version` given is not used)."""
        names = self._names(resource)
        if names is None:
            return super().watch(resource, resource_version)
        return self._watch_named(resource, names)

    async def _list_named(self, resource: str, names: list[str]) -> AsyncIterator[ListPage]:
        path, _ = self.paths[resource]
        items: list[RawObject] = []
        newest = 0
        for name in names:
            version = ""
            async for page in self.list_collection(path, name_selector(name)):
                items.extend(page.items)
                version = page.resource_version or version
            self._name_versions[name] = version
            newest = max(newest, int(version)) if version.isdecimal() else newest
        yield ListPage(items, str(newest) if newest else "", last=True)

    async def _watch_named(self, resource: str, names: list[str]) -> AsyncIterator[WatchEvent]:
        """One stream of every name's watch; it ends (or fails) when any of them does."""
        if not names:
            await asyncio.Event().wait()  # nothing to read: a watch that never ends
        path, _ = self.paths[resource]
        queue: asyncio.Queue[tuple[str, WatchEvent] | BaseException | None] = asyncio.Queue()

        async def pump(name: str) -> None:
            try:
                async for event in self.watch_collection(
                    path, name_selector(name), resource_version=self._name_versions.get(name, "")
                ):
                    await queue.put((name, event))
                await queue.put(None)
            except Exception as exc:  # handed to the reader, who raises it
                await queue.put(exc)

        tasks = [asyncio.create_task(pump(name)) for name in names]
        try:
            while True:
                item = await queue.get()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                name, event = item
                meta = event.object.get("metadata")
                version = meta.get("resourceVersion") if isinstance(meta, dict) else None
                if isinstance(version, str) and version:
                    self._name_versions[name] = version
                yield event
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    # -- writes -----------------------------------------------------------------------------------------

    async def get_class(self, name: str) -> RawObject:
        """GET of the GPUClass."""
        return await self._json("GET", GPUCLASSES.item(name))

    async def patch_class_status(self, name: str, patch: RawObject) -> RawObject | None:
        """Merge patch of the status subresource (`application/merge-patch+json`)."""
        return await self._json(
            "PATCH", f"{GPUCLASSES.item(name)}/status", body=patch, content_type=MERGE_PATCH
        )

    async def patch_class_finalizers(
        self, name: str, finalizers: list[str], *, resource_version: str
    ) -> RawObject | None:
        """Merge patch of the class's finalizers, with the resourceVersion in the body as the
        precondition."""
        body = {"metadata": {"finalizers": finalizers, "resourceVersion": resource_version}}
        return await self._json("PATCH", GPUCLASSES.item(name), body=body, content_type=MERGE_PATCH)

    async def create_secret(self, namespace: str, body: RawObject) -> RawObject | None:
        """POST of the copy Secret."""
        return await self._json("POST", SECRETS.at(namespace), body=body)

    async def patch_secret(
        self, namespace: str, name: str, *, patch: list[RawObject]
    ) -> RawObject | None:
        """JSON patch (`application/json-patch+json`) of the copy Secret, its label test first."""
        return await self._json(
            "PATCH",
            SECRETS.item(name, namespace),
            body=patch,
            content_type=JSON_PATCH,
        )

    async def delete_secret(self, namespace: str, name: str) -> None:
        """DELETE of the copy Secret; the Status the server answers with is not kept."""
        # The answer is a Status (Secrets do not return the deleted object): no payload read.
        await self._json("DELETE", SECRETS.item(name, namespace))

    async def create_config_map(self, namespace: str, body: RawObject) -> RawObject | None:
        """POST of the record ConfigMap."""
        return await self._json("POST", CONFIGMAPS.at(namespace), body=body)

    async def replace_config_map(
        self, namespace: str, name: str, *, body: RawObject
    ) -> RawObject | None:
        """PUT of the record ConfigMap, its body carrying the resourceVersion read."""
        return await self._json("PUT", CONFIGMAPS.item(name, namespace), body=body)

    async def create_event(self, namespace: str, body: RawObject) -> None:
        """POST of the Event; the answer is not kept."""
        await self._json("POST", EVENTS.at(namespace), body=body)

    def _lease(self, namespace: str, name: str = "") -> str:
        return LEASES.item(name, namespace) if name else LEASES.at(namespace)

    async def get_lease(self, namespace: str, name: str) -> RawObject | None:
        """GET of the Lease; 404 becomes None, any other failure is raised."""
        try:
            return await self._json("GET", self._lease(namespace, name))
        except ApiError as exc:
            if exc.not_found:
                return None
            raise

    async def create_lease(self, namespace: str, body: RawObject) -> RawObject:
        """POST of the Lease."""
        return await self._json("POST", self._lease(namespace), body=body)

    async def replace_lease(self, namespace: str, name: str, *, body: RawObject) -> RawObject:
        """PUT of the Lease, its body carrying the resourceVersion read."""
        return await self._json("PUT", self._lease(namespace, name), body=body)
