"""The webhook's only kubernetes_asyncio adapter: what its catalog cache lists and watches.

The webhook caches GPUClasses, Namespaces (labels only matter) and the KubeVirt
CR; it never watches Pods and never calls the API server inside a request. The
HTTP lists and watches are the shared :class:`shared.runtime.kubeclient.RawClient`
— the same code the reconciler runs — so a fix to paging, 410 handling or watch
reading reaches both binaries.
"""

from __future__ import annotations

from urllib.parse import quote

from kubernetes_asyncio import client

from gpuclass.shared import names
from gpuclass.shared.runtime.kubeclient import RawClient

FIELD_MANAGER = "gpuclass-webhook"


def webhook_client(api: client.ApiClient, *, kubevirt_namespace: str) -> RawClient:
    kv = quote(kubevirt_namespace, safe="")
    return RawClient(
        api,
        {
            "gpuclasses": (f"/apis/{names.GROUP}/{names.VERSION}/{names.PLURAL}", {}),
            "namespaces": ("/api/v1/namespaces", {}),
            "kubevirts": (f"/apis/kubevirt.io/v1/namespaces/{kv}/kubevirts", {}),
        },
        field_manager=FIELD_MANAGER,
    )
