"""The reconciler's only kubernetes_asyncio adapter: :class:`reconciler.ports.KubeAPI` over HTTP.

Lists, watches and raw requests are the shared :class:`shared.runtime.kubeclient.RawClient`
(the webhook uses the same one); this module adds what the reconciler watches and
the few writes it makes (status and finalizer merge patches, licence-copy Secrets,
Events, the Lease).

What it lists and watches, with which selectors, is :data:`reconciler.sources.SPECS`.
"""

from __future__ import annotations

from urllib.parse import quote

from kubernetes_asyncio import client

from gpuclass.reconciler.ports import ApiError, RawObject
from gpuclass.reconciler.settings import ReconcilerSettings
from gpuclass.reconciler.sources import CLASSES, collections
from gpuclass.shared.runtime.kubeclient import RawClient
from gpuclass.shared.runtime.ratelimit import TokenBucket

MERGE_PATCH = "application/merge-patch+json"
FIELD_MANAGER = "gpuclass-reconciler"
"""Named on every write (managedFields show who owns what)."""


def _q(value: str) -> str:
    return quote(value, safe="")


class KubeAdapter(RawClient):
    """The shared raw client (lists, watches, requests) plus the reconciler's few writes."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        license_namespace: str,
        kubevirt_namespace: str,
        page_size: int = 500,
        watch_timeout: int = 290,
        request_timeout: float = 60.0,
        limiter: TokenBucket | None = None,
    ) -> None:
        super().__init__(
            api,
            collections(license_namespace=license_namespace, kubevirt_namespace=kubevirt_namespace),
            field_manager=FIELD_MANAGER,
            page_size=page_size,
            watch_timeout=watch_timeout,
            request_timeout=request_timeout,
            limiter=limiter,
        )

    @classmethod
    async def connect(cls, settings: ReconcilerSettings) -> KubeAdapter:
        from gpuclass.shared.runtime.clusterconfig import ClusterConfigError
        from gpuclass.shared.runtime.kubeclient import api_client

        try:
            api = await api_client(
                settings.kubeconfig, binary=FIELD_MANAGER, context=settings.context
            )
        except ClusterConfigError as exc:
            raise ApiError(0, "ConfigError", f"no API client: {exc}") from exc
        return cls(
            api,
            license_namespace=settings.license_namespace,
            kubevirt_namespace=settings.kubevirt_namespace,
            page_size=settings.list_page_size,
            watch_timeout=settings.watch_timeout_seconds,
            limiter=TokenBucket(settings.kube_api_qps, settings.kube_api_burst),
        )

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
