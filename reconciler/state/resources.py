"""The watched resources, in one table: name, kind, API path and selectors, and the store attribute each feeds.

Every part of the reconciler that needs to know what it watches reads :data:`SPECS`:
the store (:mod:`reconciler.state.store`) has one handler per resource name and keeps
its records in the attribute named by `store`; the HTTP adapter (:mod:`reconciler.api.client`) lists and watches `path` with the
selectors; the in-memory API (:mod:`reconciler.api.fake`) serves objects of `kind`
and filters them with :func:`selected`, the same selectors evaluated locally.

Server-side selectors keep what enters the process small, and nothing a tenant
creates can make it large: Pods only when bound and not finished; Secrets only the
license sources, by name (:attr:`Scope.license_secret_names`), never a tenant's; the
license copies the reconciler wrote are known from its own record, a ConfigMap read
by name (docs/decisions.md, "License copies"). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from gpuclass.shared.core.base import names
from gpuclass.shared.kube import apicollections as api

Resource = Literal[
    "gpuclasses",
    "nodes",
    "pods",
    "kubevirts",
    "licence-secrets",
    "copy-record",
    "namespaces",
    "vmis",
]
RESOURCES: tuple[Resource, ...] = get_args(Resource)

POD_FIELD_SELECTOR = api.BOUND_PODS_SELECTOR
RECORD_SELECTOR = f"metadata.name={names.COPY_RECORD_NAME}"


@dataclass(frozen=True, slots=True)
class Scope:
    """The namespaces and names the settings choose for the scoped resources."""

    license_namespace: str = names.DEFAULT_LICENSE_NAMESPACE
    kubevirt_namespace: str = names.DEFAULT_KUBEVIRT_NAMESPACE
    record_namespace: str = names.DEFAULT_LICENSE_NAMESPACE
    """Where the copy record lives: the reconciler's own namespace."""
    license_secret_names: frozenset[str] | None = None
    """The license source Secrets to read, by name; None: every Secret of the license
    namespace (offline files, or an install that grants that)."""

    def namespace(self, which: str) -> str | None:
        """The namespace a spec's `namespace` word stands for ("license", "kubevirt" or "record");
        None for "" (the whole cluster)."""
        return {
            "license": self.license_namespace,
            "kubevirt": self.kubevirt_namespace,
            "record": self.record_namespace,
        }.get(which)


@dataclass(frozen=True, slots=True)
class ResourceSpec:
    """One watched collection.

    `namespace` says which namespace the path is scoped to: "" for the whole cluster,
    "license", "kubevirt" or "record" for the namespace the settings name.
    """

    name: Resource
    collection: api.Collection
    """Kind, path and the collection's own field selector (shared/kube/apicollections.py)."""
    store: str
    """The `ClusterStore` attribute holding the resource's records."""
    cluster_scoped: bool = False
    """Cluster-scoped kinds are stored by name alone; the others by (namespace, name)."""
    namespace: Literal["", "license", "kubevirt", "record"] = ""
    field_selector: str = ""
    """A selector of this resource's own (`metadata.name=`); else the collection's."""
    label_selector: str = ""
    by_name: bool = False
    """Read one name at a time (`Scope.license_secret_names`), never the whole collection."""

    def __post_init__(self) -> None:
        if not self.field_selector and self.collection.field_selector:
            object.__setattr__(self, "field_selector", self.collection.field_selector)

    @property
    def kind(self) -> str:
        """The kind of the resource's objects."""
        return self.collection.kind

    def path(self, scope: Scope) -> str:
        """The collection path, in the namespace the scope gives this resource (quoted)."""
        return self.collection.at(scope.namespace(self.namespace) or "")

    def params(self) -> dict[str, str]:
        """Query parameters of its list and watch: the field and label selectors it has."""
        selectors = {"fieldSelector": self.field_selector, "labelSelector": self.label_selector}
        return {key: value for key, value in selectors.items() if value}


SPECS: Mapping[Resource, ResourceSpec] = {
    spec.name: spec
    for spec in (
        ResourceSpec("gpuclasses", api.GPUCLASSES, "classes", cluster_scoped=True),
        ResourceSpec("nodes", api.NODES, "nodes", cluster_scoped=True),
        ResourceSpec("pods", api.BOUND_PODS, "pods"),
        ResourceSpec("kubevirts", api.KUBEVIRTS, "kubevirts", namespace="kubevirt"),
        ResourceSpec(
            "licence-secrets", api.SECRETS, "license_secrets", namespace="license", by_name=True
        ),
        ResourceSpec(
            "copy-record",
            api.CONFIGMAPS,
            "copy_records",
            namespace="record",
            field_selector=RECORD_SELECTOR,
        ),
        ResourceSpec("namespaces", api.NAMESPACES, "namespaces", cluster_scoped=True),
        ResourceSpec("vmis", api.VMIS, "vmis"),
    )
}
assert tuple(SPECS) == RESOURCES, "one spec per resource, in the Resource order"


def collections(scope: Scope) -> dict[str, tuple[str, dict[str, str]]]:
    """Path and selectors of each watched collection, as the HTTP client takes them.

    A `by_name` resource's names are :meth:`Scope.license_secret_names`; the client reads
    each with a `metadata.name` field selector (:func:`name_selector`).
    """
    return {spec.name: (spec.path(scope), spec.params()) for spec in SPECS.values()}


def name_selector(name: str) -> dict[str, str]:
    """The field selector that reads one object of a collection: RBAC checks it by resourceNames."""
    return {"fieldSelector": f"metadata.name={name}"}


def selected(spec: ResourceSpec, obj: Mapping[str, Any], *, scope: Scope) -> bool:
    """Whether the server would return `obj` for the resource: its namespace scope and selectors.

    The field selectors are the Pods' one (bound, not finished) and `metadata.name`
    equalities; the label selector an equality; those are the only forms :data:`SPECS` uses.
    """
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    scoped = scope.namespace(spec.namespace)
    if scoped is not None and meta.get("namespace") != scoped:
        return False
    names_ = scope.license_secret_names
    if spec.by_name and names_ is not None and meta.get("name") not in names_:
        return False
    if spec.field_selector.startswith("metadata.name="):
        if meta.get("name") != spec.field_selector.removeprefix("metadata.name="):
            return False
    elif spec.field_selector:
        assert spec.field_selector == POD_FIELD_SELECTOR, spec.field_selector
        pod_spec, status = obj.get("spec") or {}, obj.get("status") or {}
        if not pod_spec.get("nodeName") or status.get("phase") in ("Succeeded", "Failed"):
            return False
    if spec.label_selector:
        key, _, value = spec.label_selector.partition("=")
        if (meta.get("labels") or {}).get(key) != value:
            return False
    return True
