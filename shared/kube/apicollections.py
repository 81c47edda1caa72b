"""The API collections gpuclass reads, in one table: kind, path and server-side selector.

The reconciler's watched resources (`reconciler/state/resources.py`), the webhook's catalog store
(`webhook/kube.py`) and `gpuclass explain --context` (`shared/cli/explaincmd.py`) all
take their paths from here, so a selector (the bound-Pods one) is written once and every
namespace and name in a path is quoted the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from gpuclass.shared.core.base import names

BOUND_PODS_SELECTOR = "status.phase!=Succeeded,status.phase!=Failed,spec.nodeName!="
"""Pods bound to a node and not finished: the only Pods that hold devices."""


@dataclass(frozen=True, slots=True)
class Collection:
    """One collection: its kind, its path (`{namespace}` where it is namespaced) and selector."""

    kind: str
    path: str
    field_selector: str = ""

    @property
    def namespaced(self) -> bool:
        """Whether the path names one namespace (`{namespace}` in it)."""
        return "{namespace}" in self.path

    def at(self, namespace: str = "") -> str:
        """The collection's path, with `namespace` quoted into it when it is namespaced."""
        return self.path.format(namespace=quote(namespace, safe=""))

    def item(self, name: str, namespace: str = "") -> str:
        """The path of one object of the collection, its name quoted."""
        return f"{self.at(namespace)}/{quote(name, safe='')}"

    def params(self) -> dict[str, str]:
        """Query parameters of a list or watch: the field selector, when there is one."""
        return {"fieldSelector": self.field_selector} if self.field_selector else {}


GPUCLASSES = Collection(names.KIND, f"/apis/{names.GROUP}/{names.VERSION}/{names.PLURAL}")
NODES = Collection("Node", "/api/v1/nodes")
BOUND_PODS = Collection("Pod", "/api/v1/pods", BOUND_PODS_SELECTOR)
NAMESPACES = Collection("Namespace", "/api/v1/namespaces")
KUBEVIRTS = Collection("KubeVirt", "/apis/kubevirt.io/v1/namespaces/{namespace}/kubevirts")
VMIS = Collection("VirtualMachineInstance", "/apis/kubevirt.io/v1/virtualmachineinstances")
VMS = Collection("VirtualMachine", "/apis/kubevirt.io/v1/virtualmachines")
SECRETS = Collection("Secret", "/api/v1/namespaces/{namespace}/secrets")
RESOURCEQUOTAS = Collection("ResourceQuota", "/api/v1/namespaces/{namespace}/resourcequotas")
ALL_RESOURCEQUOTAS = Collection("ResourceQuota", "/api/v1/resourcequotas")
CONFIGMAPS = Collection("ConfigMap", "/api/v1/namespaces/{namespace}/configmaps")
EVENTS = Collection("Event", "/api/v1/namespaces/{namespace}/events")
LEASES = Collection("Lease", "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases")
