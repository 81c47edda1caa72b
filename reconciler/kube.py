"""The reconciler's only kubernetes_asyncio adapter: :class:`reconciler.ports.KubeAPI` over HTTP.

kubernetes_asyncio supplies the configured client (kubeconfig or in-cluster, auth,
TLS); requests go through `ApiClient.call_api` with `_preload_content=False` and
bodies are parsed with orjson. Objects stay raw dicts: deserialising 150,000 Pods
into generated models would cost seconds and hundreds of MB, and we read a handful
of fields. Watches are read line by line here rather than through
`kubernetes_asyncio.watch.Watch`, which retries a 410 once with the same stale
version, caps a line at aiohttp's readline limit and builds models per event.

Server-side selectors keep what enters the process small: Pods only when bound and
not finished, Secrets only in the licence namespace or carrying our managed-by label.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import aiohttp
import orjson
from kubernetes_asyncio import client, config

from gpuclass.reconciler.ports import ApiError, ListPage, RawObject, WatchEvent
from gpuclass.reconciler.settings import ReconcilerSettings
from gpuclass.shared import names
from gpuclass.shared.clusterstate import Source

POD_FIELD_SELECTOR = "status.phase!=Succeeded,status.phase!=Failed,spec.nodeName!="
MANAGED_SELECTOR = f"{names.MANAGED_BY_LABEL}={names.MANAGED_BY_VALUE}"
MERGE_PATCH = "application/merge-patch+json"
CLASSES = f"/apis/{names.GROUP}/{names.VERSION}/{names.PLURAL}"


def collections(
    *, licence_namespace: str, kubevirt_namespace: str
) -> dict[Source, tuple[str, dict[str, str]]]:
    """Path and selectors of each watched collection."""
    lic, kv = quote(licence_namespace, safe=""), quote(kubevirt_namespace, safe="")
    return {
        "gpuclasses": (CLASSES, {}),
        "nodes": ("/api/v1/nodes", {}),
        "pods": ("/api/v1/pods", {"fieldSelector": POD_FIELD_SELECTOR}),
        "kubevirts": (f"/apis/kubevirt.io/v1/namespaces/{kv}/kubevirts", {}),
        "licence-secrets": (f"/api/v1/namespaces/{lic}/secrets", {}),
        "managed-secrets": ("/api/v1/secrets", {"labelSelector": MANAGED_SELECTOR}),
        "namespaces": ("/api/v1/namespaces", {}),
        "vmis": ("/apis/kubevirt.io/v1/virtualmachineinstances", {}),
    }


def _q(value: str) -> str:
    return quote(value, safe="")


async def _error(response: aiohttp.ClientResponse) -> ApiError:
    try:
        status = orjson.loads(await response.read())
    except (orjson.JSONDecodeError, aiohttp.ClientError):
        status = {}
    if not isinstance(status, dict):
        status = {}
    return ApiError(
        response.status,
        str(status.get("reason") or response.reason or ""),
        str(status.get("message") or ""),
    )


class KubeAdapter:
    def __init__(
        self,
        api: client.ApiClient,
        *,
        licence_namespace: str,
        kubevirt_namespace: str,
        page_size: int = 500,
        watch_timeout: int = 290,
        request_timeout: float = 60.0,
    ) -> None:
        self.api = api
        self.paths = collections(
            licence_namespace=licence_namespace, kubevirt_namespace=kubevirt_namespace
        )
        self.page_size, self.watch_timeout, self.request_timeout = (
            page_size,
            watch_timeout,
            request_timeout,
        )

    @classmethod
    async def connect(cls, settings: ReconcilerSettings) -> KubeAdapter:
        from gpuclass.shared.runtime.kubeclient import api_client

        try:
            api = await api_client(settings.kubeconfig)
        except (config.ConfigException, OSError) as exc:
            where = settings.kubeconfig or "the in-cluster service account"
            raise ApiError(0, "ConfigError", f"no API client from {where}: {exc}") from exc
        return cls(
            api,
            licence_namespace=settings.licence_namespace,
            kubevirt_namespace=settings.kubevirt_namespace,
            page_size=settings.list_page_size,
            watch_timeout=settings.watch_timeout_seconds,
        )

    async def _open(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: Any = None,
    ) -> aiohttp.ClientResponse:
        """Send a request; a non-2xx answer or a transport failure becomes an ApiError."""
        try:
            response: aiohttp.ClientResponse = await self.api.call_api(
                path,
                method,
                query_params=list((query or {}).items()),
                header_params={"Content-Type": content_type, "Accept": "application/json"},
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=timeout or self.request_timeout,
            )
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise ApiError(0, type(exc).__name__, str(exc)) from exc
        if not 200 <= response.status < 300:
            error = await _error(response)
            response.release()
            raise error
        return response

    async def _json(self, method: str, path: str, **kwargs: Any) -> RawObject:
        response = await self._open(method, path, **kwargs)
        try:
            data = orjson.loads(await response.read())
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ApiError(0, type(exc).__name__, str(exc)) from exc
        finally:
            response.release()
        return data if isinstance(data, dict) else {}

    # -- list and watch ------------------------------------------------------------------------------

    async def list_pages(self, source: Source) -> AsyncIterator[ListPage]:
        path, selectors = self.paths[source]
        token = ""
        while True:
            query = {**selectors, "limit": str(self.page_size)}
            if token:
                query["continue"] = token
            body = await self._json("GET", path, query=query)
            meta = body.get("metadata") or {}
            token = str(meta.get("continue") or "")
            items = body.get("items") or []
            yield ListPage(items, str(meta.get("resourceVersion") or ""), last=not token)
            if not token:
                return

    async def watch(self, source: Source, resource_version: str) -> AsyncIterator[WatchEvent]:
        path, selectors = self.paths[source]
        query = {
            **selectors,
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(self.watch_timeout),
        }
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=30, sock_read=self.watch_timeout + 30
        )
        response = await self._open("GET", path, query=query, timeout=timeout)
        buffer = bytearray()
        try:
            async for chunk in response.content.iter_any():
                buffer += chunk
                while (end := buffer.find(b"\n")) >= 0:
                    line = bytes(buffer[:end])
                    del buffer[: end + 1]
                    if line.strip():
                        yield _event(line)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ApiError(0, type(exc).__name__, str(exc) or "watch dropped") from exc
        finally:
            response.release()

    # -- writes -----------------------------------------------------------------------------------------

    async def get_class(self, name: str) -> RawObject:
        return await self._json("GET", f"{CLASSES}/{_q(name)}")

    async def patch_class_status(self, name: str, patch: RawObject) -> RawObject | None:
        return await self._json(
            "PATCH", f"{CLASSES}/{_q(name)}/status", body=patch, content_type=MERGE_PATCH
        )

    async def patch_class_finalizers(
        self, name: str, finalizers: list[str], resource_version: str
    ) -> RawObject | None:
        body = {"metadata": {"finalizers": finalizers, "resourceVersion": resource_version}}
        return await self._json(
            "PATCH", f"{CLASSES}/{_q(name)}", body=body, content_type=MERGE_PATCH
        )

    async def create_secret(self, namespace: str, body: RawObject) -> RawObject | None:
        return await self._json("POST", f"/api/v1/namespaces/{_q(namespace)}/secrets", body=body)

    async def replace_secret(self, namespace: str, name: str, body: RawObject) -> RawObject | None:
        return await self._json(
            "PUT", f"/api/v1/namespaces/{_q(namespace)}/secrets/{_q(name)}", body=body
        )

    async def delete_secret(self, namespace: str, name: str, resource_version: str) -> None:
        options = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "preconditions": {"resourceVersion": resource_version},
        }
        await self._json(
            "DELETE", f"/api/v1/namespaces/{_q(namespace)}/secrets/{_q(name)}", body=options
        )

    async def create_event(self, namespace: str, body: RawObject) -> None:
        await self._json("POST", f"/api/v1/namespaces/{_q(namespace)}/events", body=body)

    def _lease(self, namespace: str, name: str = "") -> str:
        path = f"/apis/coordination.k8s.io/v1/namespaces/{_q(namespace)}/leases"
        return f"{path}/{_q(name)}" if name else path

    async def get_lease(self, namespace: str, name: str) -> RawObject | None:
        try:
            return await self._json("GET", self._lease(namespace, name))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def create_lease(self, namespace: str, body: RawObject) -> RawObject:
        return await self._json("POST", self._lease(namespace), body=body)

    async def replace_lease(self, namespace: str, name: str, body: RawObject) -> RawObject:
        return await self._json("PUT", self._lease(namespace, name), body=body)

    async def close(self) -> None:
        await self.api.close()


def _event(line: bytes) -> WatchEvent:
    try:
        event = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise ApiError(0, "BadWatchEvent", f"not JSON: {exc}") from exc
    obj = event.get("object") if isinstance(event, dict) else None
    kind = event.get("type") if isinstance(event, dict) else None
    if not isinstance(obj, dict) or not isinstance(kind, str):
        raise ApiError(0, "BadWatchEvent", "a watch event needs type and object")
    if kind == "ERROR":
        raise ApiError(
            int(obj.get("code") or 500), str(obj.get("reason") or ""), str(obj.get("message") or "")
        )
    return WatchEvent(kind, obj)
