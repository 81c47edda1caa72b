"""The watched sources, in one table: name, kind, API path and selectors, and the cache store each feeds.

Every part of the reconciler that needs to know what it watches reads :data:`SPECS`:
the cache (:mod:`reconciler.cache`) dispatches an event to the store named by
`feeds`; the HTTP adapter (:mod:`reconciler.kube`) lists and watches `path` with the
selectors; the in-memory API (:mod:`reconciler.memory`) serves objects of `kind`
and filters them with :func:`selected`, the same selectors evaluated locally.

Server-side selectors keep what enters the process small: Pods only when bound and
not finished, Secrets only in the licence namespace or carrying our managed-by label.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args
from urllib.parse import quote

from gpuclass.shared import names

Source = Literal[
    "gpuclasses",
    "nodes",
    "pods",
    "kubevirts",
    "licence-secrets",
    "managed-secrets",
    "namespaces",
    "vmis",
]
SOURCES: tuple[Source, ...] = get_args(Source)

POD_FIELD_SELECTOR = "status.phase!=Succeeded,status.phase!=Failed,spec.nodeName!="
MANAGED_SELECTOR = f"{names.MANAGED_BY_LABEL}={names.MANAGED_BY_VALUE}"
CLASSES = f"/apis/{names.GROUP}/{names.VERSION}/{names.PLURAL}"


@dataclass(frozen=True, slots=True)
class SourceSpec:
    """One watched collection.

    `namespace` says which namespace the path is scoped to: "" for the whole cluster,
    "licence" or "kubevirt" for the namespace the settings name.
    """

    name: Source
    kind: str
    path: str
    """Collection path; `{namespace}` stands for the scoped namespace."""
    feeds: str
    """The cache handler the source's events go to (`ClusterCache._set_<feeds>`)."""
    store: str
    """The `ClusterCache` attribute holding the source's records."""
    cluster_scoped: bool = False
    """Cluster-scoped kinds are stored by name alone; the others by (namespace, name)."""
    namespace: Literal["", "licence", "kubevirt"] = ""
    field_selector: str = ""
    label_selector: str = ""

    def collection(self, *, license_namespace: str, kubevirt_namespace: str) -> str:
        scoped = {"licence": license_namespace, "kubevirt": kubevirt_namespace}.get(self.namespace)
        return self.path.format(namespace=quote(scoped or "", safe=""))

    def params(self) -> dict[str, str]:
        selectors = {"fieldSelector": self.field_selector, "labelSelector": self.label_selector}
        return {key: value for key, value in selectors.items() if value}


SPECS: Mapping[Source, SourceSpec] = {
    spec.name: spec
    for spec in (
        SourceSpec("gpuclasses", names.KIND, CLASSES, "class", "classes", cluster_scoped=True),
        SourceSpec("nodes", "Node", "/api/v1/nodes", "node", "nodes", cluster_scoped=True),
        SourceSpec("pods", "Pod", "/api/v1/pods", "pod", "pods", field_selector=POD_FIELD_SELECTOR),
        SourceSpec(
            "kubevirts",
            "KubeVirt",
            "/apis/kubevirt.io/v1/namespaces/{namespace}/kubevirts",
            "kubevirt",
            "kubevirts",
            namespace="kubevirt",
        ),
        SourceSpec(
            "licence-secrets",
            "Secret",
            "/api/v1/namespaces/{namespace}/secrets",
            "license_secret",
            "license_secrets",
            namespace="licence",
        ),
        SourceSpec(
            "managed-secrets",
            "Secret",
            "/api/v1/secrets",
            "managed_secret",
            "managed_secrets",
            label_selector=MANAGED_SELECTOR,
        ),
        SourceSpec(
            "namespaces",
            "Namespace",
            "/api/v1/namespaces",
            "namespace",
            "namespaces",
            cluster_scoped=True,
        ),
        SourceSpec(
            "vmis",
            "VirtualMachineInstance",
            "/apis/kubevirt.io/v1/virtualmachineinstances",
            "vmi",
            "vmis",
        ),
    )
}
assert tuple(SPECS) == SOURCES, "one spec per source, in the Source order"


def collections(
    *, license_namespace: str, kubevirt_namespace: str
) -> dict[str, tuple[str, dict[str, str]]]:
    """Path and selectors of each watched collection, as the HTTP client takes them."""
    return {
        spec.name: (
            spec.collection(
                license_namespace=license_namespace, kubevirt_namespace=kubevirt_namespace
            ),
            spec.params(),
        )
        for spec in SPECS.values()
    }


def selected(
    spec: SourceSpec, obj: Mapping[str, Any], *, license_namespace: str, kubevirt_namespace: str
) -> bool:
    """Whether the server would return `obj` for the source: its namespace scope and selectors.

    The field selector is the Pods' one (bound, not finished) and the label selector
    an equality; those are the only forms :data:`SPECS` uses.
    """
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    scoped = {"licence": license_namespace, "kubevirt": kubevirt_namespace}.get(spec.namespace)
    if scoped is not None and meta.get("namespace") != scoped:
        return False
    if spec.field_selector:
        assert spec.field_selector == POD_FIELD_SELECTOR, spec.field_selector
        pod_spec, status = obj.get("spec") or {}, obj.get("status") or {}
        if not pod_spec.get("nodeName") or status.get("phase") in ("Succeeded", "Failed"):
            return False
    if spec.label_selector:
        key, _, value = spec.label_selector.partition("=")
        if (meta.get("labels") or {}).get(key) != value:
            return False
    return True
