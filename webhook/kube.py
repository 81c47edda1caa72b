"""The webhook's only kubernetes_asyncio adapter: what its catalog store lists and watches.

The webhook keeps GPUClasses, Namespaces (labels only matter), the KubeVirt
CR and ResourceQuotas (their extended-resource request keys: VM admission's quota
warning); it never watches Pods and never calls the API server inside a request. The
HTTP lists and watches are the shared :class:`shared.kube.kubeclient.RawClient`
— the same code the reconciler runs — so a fix to paging, 410 handling or watch
reading reaches both binaries.
"""

from __future__ import annotations

from urllib.parse import quote

from kubernetes_asyncio import client

from gpuclass.shared.kube.apicollections import (
    ALL_RESOURCEQUOTAS,
    GPUCLASSES,
    KUBEVIRTS,
    NAMESPACES,
    SECRETS,
)
from gpuclass.shared.kube.kubeclient import RawClient
from gpuclass.shared.kube.listwatch import RawObject

FIELD_MANAGER = "gpuclass-webhook"


def webhook_client(api: client.ApiClient, *, kubevirt_namespace: str) -> RawClient:
    """The catalog store's client: the collections it watches (all GPUClasses, Namespaces and
    ResourceQuotas, the KubeVirt CRs of `kubevirt_namespace` only), under the webhook's field
    manager."""
    return RawClient(
        api,
        {
            "gpuclasses": (GPUCLASSES.at(), GPUCLASSES.params()),
            "namespaces": (NAMESPACES.at(), NAMESPACES.params()),
            "kubevirts": (KUBEVIRTS.at(kubevirt_namespace), KUBEVIRTS.params()),
            "resourcequotas": (ALL_RESOURCEQUOTAS.at(), ALL_RESOURCEQUOTAS.params()),
        },
        field_manager=FIELD_MANAGER,
    )


WEBHOOK_CONFIGURATIONS = "/apis/admissionregistration.k8s.io/v1"
KINDS = {
    "mutating": "mutatingwebhookconfigurations",
    "validating": "validatingwebhookconfigurations",
}


class CertAdapter(RawClient):
    """The reads and writes of the webhook's own certificates: one Secret, two configurations.

    Every write is an update carrying the resourceVersion that was read, so a replica that lost
    a race gets 409 and reads again (docs/operations.md, Certificates); the chart's RBAC allows
    these verbs on exactly these names.
    """

    def __init__(self, api: client.ApiClient) -> None:
        super().__init__(api, {}, field_manager=FIELD_MANAGER)

    @staticmethod
    def _secret(namespace: str, name: str) -> str:
        return SECRETS.item(name, namespace)

    @staticmethod
    def _configuration(kind: str, name: str) -> str:
        return f"{WEBHOOK_CONFIGURATIONS}/{KINDS[kind]}/{quote(name, safe='')}"

    async def get_secret(self, namespace: str, name: str) -> RawObject:
        """GET the certificate Secret (404 and 403 arrive as ApiError)."""
        return await self._json("GET", self._secret(namespace, name))

    async def replace_secret(self, namespace: str, name: str, *, body: RawObject) -> RawObject:
        """PUT the Secret whole; the body carries the resourceVersion read, so a lost race is a 409."""
        return await self._json("PUT", self._secret(namespace, name), body=body)

    async def get_configuration(self, kind: str, name: str) -> RawObject:
        """GET one webhook configuration; `kind` is `mutating` or `validating`."""
        return await self._json("GET", self._configuration(kind, name))

    async def replace_configuration(self, kind: str, name: str, *, body: RawObject) -> RawObject:
        """PUT one webhook configuration whole, pinned to the resourceVersion read."""
        return await self._json("PUT", self._configuration(kind, name), body=body)
