"""The webhook's only kubernetes_asyncio adapter: list/watch sources for its cache.

The webhook caches GPUClasses, Namespaces (labels only matter) and the KubeVirt
CR; it never watches Pods and never calls the API server inside a request.
Objects come back as raw dicts (no model round trip).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from gpuclass.shared import names
from gpuclass.shared.runtime.listwatch import Expired, RawObject

WATCH_TIMEOUT_SECONDS = 290


class ApiSource:
    """List and watch one resource through a kubernetes_asyncio list function."""

    def __init__(
        self, name: str, kind: str, list_fn: Callable[..., Awaitable[Any]], **kwargs: Any
    ) -> None:
        self.name, self.kind, self._list_fn, self._kwargs = name, kind, list_fn, kwargs

    async def list(self) -> tuple[list[RawObject], str]:
        try:
            response = await self._list_fn(**self._kwargs, _preload_content=False)
            body = orjson.loads(await response.read())
        except ApiException as exc:
            raise _translate(exc) from exc
        items = body.get("items") or []
        for item in items:
            item.setdefault("kind", self.kind)
        return items, str(body.get("metadata", {}).get("resourceVersion", ""))

    async def watch(self, resource_version: str) -> AsyncIterator[tuple[str, RawObject]]:
        stream = watch.Watch()
        try:
            async for event in stream.stream(
                self._list_fn,
                **self._kwargs,
                resource_version=resource_version,
                timeout_seconds=WATCH_TIMEOUT_SECONDS,
                allow_watch_bookmarks=True,
            ):
                obj = event.get("raw_object")
                if isinstance(obj, dict):
                    obj.setdefault("kind", self.kind)
                    yield str(event.get("type")), obj
        except ApiException as exc:
            raise _translate(exc) from exc
        finally:
            await stream.close()


def _translate(exc: ApiException) -> Exception:
    return Expired(str(exc.reason)) if exc.status == 410 else exc


def webhook_sources(api: client.ApiClient, *, kubevirt_namespace: str) -> list[ApiSource]:
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    return [
        ApiSource(
            "gpuclasses",
            names.KIND,
            custom.list_cluster_custom_object,
            group=names.GROUP,
            version=names.VERSION,
            plural=names.PLURAL,
        ),
        ApiSource("namespaces", "Namespace", core.list_namespace),
        ApiSource(
            "kubevirts",
            "KubeVirt",
            custom.list_namespaced_custom_object,
            group="kubevirt.io",
            version="v1",
            namespace=kubevirt_namespace,
            plural="kubevirts",
        ),
    ]
