"""A typed, compact view of the cluster: only the fields the rules read.

Raw API objects go in through :class:`SnapshotBuilder.add`; what stays is a few
small records per object, so a 150,000-pod cluster fits in a fraction of its
JSON. The builder is pure (dicts in, records out); reading files or watches is
the caller's business. What a Pod holds is :mod:`shared.core.model.podrequests`; Secrets,
their payloads never printed, :mod:`shared.core.model.secrets`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from gpuclass.shared.core.base.k8s import Taint
from gpuclass.shared.core.base.meta import Key
from gpuclass.shared.core.base.raw import dict_at, list_at, metadata, str_map
from gpuclass.shared.core.model.detail import (
    ClusterDetail,
    Quota,
    compact_quota,
    group_quotas,
    node_detail,
    read_compute,
)
from gpuclass.shared.core.model.kubevirt import (
    Handler,
    KubeVirtConfig,
    handler_state,
    read_kubevirt,
)
from gpuclass.shared.core.model.models import GPUClassSpec, GPUClassStatus
from gpuclass.shared.core.model.podrequests import (
    ACTIVE_POD_PHASES,
    PodRecord,
    add_amounts,
    compact_pod,
    extended_units,
    pod_requests,
)
from gpuclass.shared.core.model.secrets import SecretRecord, compact_secret
from gpuclass.shared.core.model.validation import validate_class
from gpuclass.shared.core.model.vmiuse import VMIUse, compact_vmi_use


@dataclass(frozen=True, slots=True)
class ClassRecord:
    """A GPUClass as the rules read it: the validated spec (None when invalid, with `problems`
    saying why), the raw spec kept so an invalid class still holds its resourceName claim, the
    stored status and the metadata the finalizer and conflict rules need."""

    name: str
    raw_spec: Mapping[str, Any]
    spec: GPUClassSpec | None
    status: GPUClassStatus | None
    created: str = ""
    deleting: bool = False
    generation: int = 0
    finalizers: tuple[str, ...] = ()
    uid: str = ""
    problems: tuple[str, ...] = ()
    """Why the stored spec is invalid (each cause with its path); empty when `spec` is set."""

    @property
    def resource_name(self) -> str | None:
        """The resource the class claims; for an invalid spec, its raw resourceName if a string.

        An invalid class offers nothing (zero units, not selectable) but keeps its claim in
        resource-name conflicts and the in-use finalizer, so that a broken edit neither hands
        its pool to a younger class nor releases a class that VMs still use.
        """
        if self.spec is not None:
            return self.spec.resource_name
        source = self.raw_spec.get("source")
        plugin = source.get("devicePlugin") if isinstance(source, dict) else None
        name = plugin.get("resourceName") if isinstance(plugin, dict) else None
        return name if isinstance(name, str) and name else None

    @property
    def mode(self) -> str | None:
        """`passthrough` or `vgpu`, read from the raw spec when the spec is invalid (so a broken
        vGPU class still counts as a vGPU for entitlement); None when not a string."""
        mode = self.spec.mode if self.spec else self.raw_spec.get("mode")
        return mode if isinstance(mode, str) else None

    @property
    def tolerations(self) -> tuple[Mapping[str, Any], ...]:
        """The raw spec's tolerations that are objects, copied onto launcher Pods and matched
        against node taints; read raw so an invalid class keeps its placement rules."""
        raw = self.raw_spec.get("tolerations")
        return tuple(t for t in raw if isinstance(t, dict)) if isinstance(raw, list) else ()


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """A node as capacity reads it (contract 6.1): Ready, cordoned, its taints, its extended
    resources' allocatable in whole units (KubeVirt's devices among them), and virt-handler's
    state from the `kubevirt.io/schedulable` label (:mod:`shared.core.model.kubevirt`)."""

    name: str
    ready: bool
    unschedulable: bool
    taints: tuple[Taint, ...]
    allocatable: Mapping[str, int]
    handler: Handler = "ready"


@dataclass(slots=True)
class Snapshot:
    """The cluster as the pure rules see it, one value for the CLI, the webhook and the reconciler.

    What KubeVirt configures is held once, in `kubevirt`; `permitted`, `mediated`,
    `launcher_devices` and `kubevirt_problem` are read from it. `secrets` are keyed by
    (namespace, name).
    """

    classes: dict[str, ClassRecord] = field(default_factory=dict)
    nodes: list[NodeRecord] = field(default_factory=list)
    pods: list[PodRecord] = field(default_factory=list)
    namespaces: dict[str, Mapping[str, str]] = field(default_factory=dict)
    secrets: dict[tuple[str, str], SecretRecord] = field(default_factory=dict)
    vmis: list[VMIUse] = field(default_factory=list)
    kubevirt: KubeVirtConfig = field(default_factory=KubeVirtConfig)
    """The deployed KubeVirt CR's configuration as a whole (what one VM's launcher asks)."""
    detail: ClusterDetail | None = None
    """Node labels, CPU and memory: only when built with `detail=True` (explain)."""
    quotas: dict[str, list[Quota]] = field(default_factory=dict)
    """Each namespace's ResourceQuotas (at most MAX_QUOTAS): explain's headroom, and VM
    admission's quota warning."""

    def use_kubevirt(self, config: KubeVirtConfig) -> None:
        """Take the KubeVirt configuration KubeVirt reads from the CRs of its namespace
        (:func:`read_kubevirt`): the deployed CR's; none deployed: nothing permitted."""
        self.kubevirt = config

    @property
    def permitted(self) -> frozenset[str] | None:
        """The deployed KubeVirt CR's permittedHostDevices, None when no CR is deployed (the
        classes then say NoKubeVirt, with :attr:`kubevirt_problem`'s words)."""
        config = self.kubevirt
        return config.permitted if config.deployed is not None else None

    @property
    def mediated(self) -> frozenset[str]:
        """The KubeVirt CR's mediated-device resourceNames: every one is a vGPU, class or not."""
        return self.kubevirt.mediated

    @property
    def launcher_devices(self) -> tuple[str, ...]:
        """The KubeVirt devices its launcher Pods request (:func:`read_kubevirt`)."""
        return self.kubevirt.launcher_devices

    @property
    def kubevirt_problem(self) -> str | None:
        """Why KubeVirt permits nothing, None when a CR is deployed (:meth:`KubeVirtConfig.problem`)."""
        return self.kubevirt.problem()


def compact_class(
    obj: Mapping[str, Any], *, previous: ClassRecord | None = None
) -> ClassRecord | None:
    """A GPUClass's record, validated once by :func:`validate_class` (admission, status and lint
    share that verdict); an invalid spec is kept with its problems, an unreadable status dropped.
    None when the object has no name.

    `previous`, the record the caller holds for the same object: when its name and raw spec
    equal this object's, its verdict is kept (`validate_class` reads nothing else), so a status
    or metadata change (the reconciler's own status writes coming back) is not validated again.
    """
    meta = metadata(obj)
    name = meta.get("name")
    if not isinstance(name, str):
        return None
    raw_spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    if previous is not None and previous.name == name and previous.raw_spec == raw_spec:
        spec, problems = previous.spec, previous.problems
    else:
        verdict = validate_class(obj)  # the one verdict: admission, status and lint agree
        spec, problems = verdict.model, tuple(cause.render() for cause in verdict.causes)
    try:
        status = (
            GPUClassStatus.model_validate(obj["status"])
            if isinstance(obj.get("status"), dict)
            else None
        )
    except ValidationError:
        status = None
    finalizers = meta.get("finalizers")
    generation = meta.get("generation")
    return ClassRecord(
        name=name,
        raw_spec=raw_spec,  # type: ignore[arg-type]
        spec=spec,
        status=status,
        created=str(meta.get("creationTimestamp") or ""),
        deleting=bool(meta.get("deletionTimestamp")),
        generation=generation if isinstance(generation, int) else 0,
        finalizers=tuple(f for f in finalizers if isinstance(f, str))
        if isinstance(finalizers, list)
        else (),
        uid=str(meta.get("uid") or ""),
        problems=problems,
    )


def compact_node(obj: Mapping[str, Any]) -> NodeRecord | None:
    """A node's record: Ready condition, unschedulable flag, taints, extended allocatable and
    virt-handler's label. None when the object has no name."""
    name = metadata(obj).get("name")
    if not isinstance(name, str):
        return None
    spec = dict_at(obj, "spec")
    status = dict_at(obj, "status")
    ready = any(
        isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True"
        for c in list_at(status.get("conditions"))
    )
    taints = tuple(
        Taint(str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or ""))
        for t in list_at(spec.get("taints"))
        if isinstance(t, dict)
    )
    return NodeRecord(
        name=name,
        ready=ready,
        unschedulable=bool(spec.get("unschedulable")),
        taints=taints,
        allocatable=extended_units(status.get("allocatable")),
        handler=handler_state(metadata(obj).get("labels")),
    )


def _object_key(obj: Mapping[str, Any], *, namespaced: bool) -> Key | None:
    meta = metadata(obj)
    name, namespace = meta.get("name"), meta.get("namespace")
    if not isinstance(name, str) or not name:
        return None
    return (namespace if namespaced and isinstance(namespace, str) else "", name)


class SnapshotBuilder:
    """Folds raw objects of any supported kind into a Snapshot, one at a time.

    Objects are keyed by (kind, namespace, name) as an API server keys them: the same
    object given twice (two files, a file given twice) counts once, the later one
    winning. Cluster-scoped kinds are keyed by name alone. A nameless object cannot
    collide and always counts.
    """

    KINDS = frozenset(
        {
            "GPUClass",
            "Node",
            "Pod",
            "KubeVirt",
            "Secret",
            "Namespace",
            "VirtualMachineInstance",
            "ResourceQuota",
        }
    )

    def __init__(self, *, detail: bool = False) -> None:
        """`detail`: also keep what one VM's start needs (:mod:`shared.core.model.detail`): node
        labels, CPU and memory allocatable and requested (`gpuclass explain`)."""
        self._snapshot = Snapshot()
        self._detail = ClusterDetail() if detail else None
        self._pod_compute: dict[object, tuple[str, dict[str, int]]] = {}
        self._quotas: dict[object, tuple[str, Quota]] = {}
        self.skipped: list[str] = []
        self._nodes: dict[object, NodeRecord] = {}
        self._pods: dict[object, PodRecord | None] = {}
        self._vmis: dict[object, VMIUse | None] = {}
        self._kubevirts: dict[object, Mapping[str, Any]] = {}
        self._anonymous = 0

    @property
    def snapshot(self) -> Snapshot:
        """The snapshot of what was added so far; the lists and the KubeVirt configuration are
        rebuilt from the keyed maps on each read, so read it once after the adds."""
        snap = self._snapshot
        snap.nodes = list(self._nodes.values())
        snap.pods = [p for p in self._pods.values() if p is not None]
        snap.vmis = [v for v in self._vmis.values() if v is not None]
        snap.use_kubevirt(read_kubevirt(self._kubevirts.values()))
        if self._detail is not None:
            used: dict[str, dict[str, int]] = {}
            for node, amounts in self._pod_compute.values():
                add_amounts(used.setdefault(node, {}), amounts)
            self._detail.used = used
            snap.detail = self._detail
        snap.quotas = group_quotas(self._quotas.values())
        return snap

    def _key(self, obj: Mapping[str, Any], *, namespaced: bool) -> object:
        key = _object_key(obj, namespaced=namespaced)
        if key is None:
            self._anonymous += 1
            return ("", self._anonymous)
        return key

    def add(self, obj: Mapping[str, Any]) -> None:
        """Fold one raw object in by its `kind`; a kind the rules do not read is noted in `skipped`,
        never refused."""
        kind = obj.get("kind")
        if kind == "Pod":  # most objects of a cluster
            key = self._key(obj, namespaced=True)
            self._pods[key] = compact_pod(obj)
            if self._detail is not None:
                self._add_pod_compute(key, obj)
            return
        snap = self._snapshot
        if kind == "GPUClass":
            record = compact_class(obj)
            if record:
                snap.classes[record.name] = record
        elif kind == "Node":
            node = compact_node(obj)
            if node:
                self._nodes[node.name] = node
                if self._detail is not None:
                    self._detail.nodes[node.name] = node_detail(obj)
        elif kind == "KubeVirt":
            self._kubevirts[self._key(obj, namespaced=True)] = obj
        elif kind == "Secret":
            secret = compact_secret(obj)
            if secret:
                snap.secrets[(secret.namespace, secret.name)] = secret
        elif kind == "Namespace":
            name = metadata(obj).get("name")
            if isinstance(name, str):
                snap.namespaces[name] = str_map(metadata(obj).get("labels"))
        elif kind == "VirtualMachineInstance":
            self._vmis[self._key(obj, namespaced=True)] = compact_vmi_use(obj)
        elif kind == "ResourceQuota":
            quota = compact_quota(obj)
            if quota is not None:
                self._quotas[self._key(obj, namespaced=True)] = quota
        else:
            self.skipped.append(str(kind))

    def _add_pod_compute(self, key: object, obj: Mapping[str, Any]) -> None:
        """CPU, memory and ephemeral storage a bound Pending or Running Pod holds on its node."""
        self._pod_compute.pop(key, None)
        spec, status = obj.get("spec"), obj.get("status")
        if not isinstance(spec, dict) or not isinstance(status, dict):
            return
        node = spec.get("nodeName")
        if isinstance(node, str) and node and status.get("phase") in ACTIVE_POD_PHASES:
            self._pod_compute[key] = (node, pod_requests(spec, read_compute))

    def add_all(self, objects: Iterable[Mapping[str, Any]]) -> Snapshot:
        """Add every object, then return the snapshot (files and one-shot lists, read whole)."""
        for obj in objects:
            self.add(obj)
        return self.snapshot
