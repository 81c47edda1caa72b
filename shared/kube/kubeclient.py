"""The Kubernetes API client both binaries (and `gpuclass explain` against a cluster) use: the
factory, and raw requests, lists and watches.

`api_client` builds a kubernetes_asyncio ApiClient from a kubeconfig or the
in-cluster service account (the order: :func:`choose_cluster_config`), naming the
binary and version in its User-Agent.
:class:`RawClient` is the one HTTP list/watch implementation under
:class:`shared.kube.listwatch.Reflector` for both binaries: requests go through
`ApiClient.call_api` with `_preload_content=False`, bodies are parsed with orjson
into raw dicts (no generated models: 150,000 Pods would cost seconds and hundreds
of MB), lists are paged (`limit`/`continue`), and watches are read line by line
here rather than through `kubernetes_asyncio.watch.Watch`, which retries a 410
once with the same stale version, caps a line at aiohttp's readline limit and
builds models per event. Every request passes a client-side token bucket; every
write names the binary's field manager.

Only this module and the two adapters (`webhook/kube.py`, `reconciler/api/client.py`)
import kubernetes_asyncio.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from kubernetes_asyncio import client, config

from gpuclass.shared.core.base.jsonsize import values_over
from gpuclass.shared.kube.clusterconfig import (
    ClusterConfigError,
    choose_cluster_config,
    first_current_context,
)
from gpuclass.shared.kube.errors import ApiError
from gpuclass.shared.kube.listwatch import ListPage, RawObject, WatchEvent
from gpuclass.shared.kube.ratelimit import TokenBucket
from gpuclass.shared.process.version import package_version

WRITE_METHODS = frozenset({"PATCH", "POST", "PUT"})
MAX_PAGE_BYTES = 32 * 1024 * 1024
"""A list page larger than this is asked for again with fewer objects (RawClient.list_collection)."""
MAX_PAGE_VALUES = 2**20
"""A list page holding more JSON values than this (counted from its bytes, an over-count:
:func:`shared.core.base.jsonsize.json_values`) is asked for again with fewer objects too: it
would parse into up to about 100 MB. Honest pages of 500 objects hold a few hundred thousand."""
Collections = Mapping[str, tuple[str, Mapping[str, str]]]
"""Resource name -> (collection path, selectors such as fieldSelector/labelSelector)."""


def user_agent(binary: str) -> str:
    """`gpuclass-reconciler/<version>`: what the API server's audit log and metrics show."""
    return f"{binary}/{package_version()}"


async def api_client(
    kubeconfig: Path | None,
    *,
    binary: str,
    context: str | None = None,
    environ: Mapping[str, str] | None = None,
    home: Path | None = None,
) -> client.ApiClient:
    """An ApiClient configured as :func:`choose_cluster_config` finds, whose every request
    names `binary` and the installed version in its User-Agent.

    Raises :class:`ClusterConfigError` (naming the source) when that configuration is
    missing or unusable, or names no such context.
    """
    chosen = choose_cluster_config(
        kubeconfig,
        context=context,
        environ=os.environ if environ is None else environ,
        home=Path.home() if home is None else home,
    )
    configuration = client.Configuration()
    try:
        if chosen.kubeconfig is not None:
            if context is None and os.pathsep in chosen.kubeconfig:
                context = first_current_context(chosen.kubeconfig)
            await config.load_kube_config(
                config_file=chosen.kubeconfig, context=context, client_configuration=configuration
            )
        else:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except (config.ConfigException, OSError, ValueError, KeyError) as exc:
        raise ClusterConfigError(f"cannot use {chosen.describe()}: {exc}") from exc
    api = client.ApiClient(configuration)
    api.user_agent = user_agent(binary)
    return api


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
        message=str(status.get("message") or ""),
    )


class RawClient:
    """Raw requests, paged lists and line-read watches of the `collections` it is given."""

    def __init__(
        self,
        api: client.ApiClient,
        collections: Collections,
        *,
        field_manager: str,
        page_size: int = 500,
        watch_timeout: int = 290,
        request_timeout: float = 60.0,
        limiter: TokenBucket | None = None,
        max_page_bytes: int = MAX_PAGE_BYTES,
        max_page_values: int = MAX_PAGE_VALUES,
    ) -> None:
        self.api, self.paths, self.field_manager = api, collections, field_manager
        self.max_page_bytes = max_page_bytes
        self.max_page_values = max_page_values
        self.page_size, self.watch_timeout, self.request_timeout = (
            page_size,
            watch_timeout,
            request_timeout,
        )
        self.limiter = limiter or TokenBucket(0, 1)

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
        """Send a request; a non-2xx answer or a transport failure becomes an ApiError.

        Every request waits for the rate limiter; every write names our field manager.
        """
        await self.limiter.acquire()
        params = dict(query or {})
        if method in WRITE_METHODS:
            params["fieldManager"] = self.field_manager
        try:
            response: aiohttp.ClientResponse = await self.api.call_api(
                path,
                method,
                query_params=list(params.items()),
                header_params={"Content-Type": content_type, "Accept": "application/json"},
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=timeout or self.request_timeout,
            )
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise ApiError(0, type(exc).__name__, message=str(exc)) from exc
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
            raise ApiError(0, type(exc).__name__, message=str(exc)) from exc
        finally:
            response.release()
        return data if isinstance(data, dict) else {}

    async def _page(self, path: str, query: dict[str, str]) -> RawObject | None:
        """One list page, or None when its body is larger than :data:`MAX_PAGE_BYTES` or holds
        more than :data:`MAX_PAGE_VALUES` values (and the limit allows fewer objects: a single
        object is read whatever it weighs)."""
        response = await self._open("GET", path, query=query)
        try:
            body = bytearray()
            async for chunk in response.content.iter_any():
                body += chunk
                if len(body) > self.max_page_bytes and query.get("limit") != "1":
                    return None
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ApiError(0, type(exc).__name__, message=str(exc)) from exc
        finally:
            response.release()
        if values_over(body, self.max_page_values) is not None and query.get("limit") != "1":
            return None  # small as bytes, large as a tree: fewer objects, before parsing
        try:
            data = orjson.loads(body) if body else {}
        except orjson.JSONDecodeError as exc:
            raise ApiError(0, "BadListBody", message=f"not JSON: {exc}") from exc
        return data if isinstance(data, dict) else {}

    async def get(self, path: str) -> RawObject:
        """One object by its path; a 404 or 403 is an ApiError like any other failure."""
        return await self._json("GET", path)

    # -- list and watch ------------------------------------------------------------------------------

    def list_pages(self, resource: str) -> AsyncIterator[ListPage]:
        """The :class:`ListerWatcher` side: pages of the collection named `resource`, with the
        selectors it was given."""
        path, selectors = self.paths[resource]
        return self.list_collection(path, selectors)

    def watch(self, resource: str, resource_version: str) -> AsyncIterator[WatchEvent]:
        """The :class:`ListerWatcher` side: the watch of the collection named `resource` from
        `resource_version`."""
        path, selectors = self.paths[resource]
        return self.watch_collection(path, selectors, resource_version=resource_version)

    async def list_collection(
        self, path: str, selectors: Mapping[str, str]
    ) -> AsyncIterator[ListPage]:
        """Pages of one collection with its selectors, consistent at one version.

        A page's body is read up to :data:`MAX_PAGE_BYTES`: a larger one (objects a tenant
        made as large as the API server allows) is dropped unread and asked for again with
        half the `limit` from the same `continue` token, down to one object a page, so what
        one page costs stays bounded whatever the objects weigh. The next page asks for the
        full `limit` again.
        """
        token = ""
        limit = self.page_size
        while True:
            query = {**selectors, "limit": str(limit)}
            if token:
                query["continue"] = token
            body = await self._page(path, query)
            if body is None:  # too large: the same page, fewer objects
                limit = max(1, limit // 2)
                continue
            limit = self.page_size
            meta = body.get("metadata") or {}
            token = str(meta.get("continue") or "")
            items = body.get("items") or []
            yield ListPage(items, str(meta.get("resourceVersion") or ""), last=not token)
            if not token:
                return

    async def watch_collection(
        self, path: str, selectors: Mapping[str, str], *, resource_version: str
    ) -> AsyncIterator[WatchEvent]:
        """Changes of one collection after `resource_version`, until the server ends the stream."""
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
            raise ApiError(0, type(exc).__name__, message=str(exc) or "watch dropped") from exc
        finally:
            response.release()

    async def close(self) -> None:
        """Close the underlying ApiClient's connections (its aiohttp session)."""
        await self.api.close()


def _event(line: bytes) -> WatchEvent:
    try:
        event = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise ApiError(0, "BadWatchEvent", message=f"not JSON: {exc}") from exc
    obj = event.get("object") if isinstance(event, dict) else None
    kind = event.get("type") if isinstance(event, dict) else None
    if not isinstance(obj, dict) or not isinstance(kind, str):
        raise ApiError(0, "BadWatchEvent", message="a watch event needs type and object")
    if kind == "ERROR":
        raise ApiError(
            int(obj.get("code") or 500),
            str(obj.get("reason") or ""),
            message=str(obj.get("message") or ""),
        )
    return WatchEvent(kind, obj)
