"""A typed, compact view of the cluster: only the fields the rules read.

Raw API objects go in through :class:`SnapshotBuilder.add`; what stays is a few
small records per object, so a 150,000-pod cluster fits in a fraction of its
JSON. The builder is pure (dicts in, records out); reading files or watches is
the caller's business. Secret payloads are wrapped in :class:`Redacted` so that
no repr, log line or traceback can print a token.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from gpuclass.shared.core.base.k8s import Taint, quantity_units
from gpuclass.shared.core.base.meta import Key
from gpuclass.shared.core.model.detail import (
    ClusterDetail,
    Quota,
    compact_quota,
    group_quotas,
    node_detail,
    read_compute,
)
from gpuclass.shared.core.model.kubevirt import (
    DEFAULT_LAUNCHER_DEVICES,
    Handler,
    KubeVirtConfig,
    handler_state,
    read_kubevirt,
)
from gpuclass.shared.core.model.models import GPUClassSpec, GPUClassStatus
from gpuclass.shared.core.model.validation import validate_class
from gpuclass.shared.core.model.vmiuse import VMIUse, compact_vmi_use

ACTIVE_POD_PHASES = frozenset({"Pending", "Running"})


class Redacted:
    """A secret value that never shows itself in repr or str."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The secret itself, for the few places that must use it (the licence check, the copy's
        body and fingerprint); never for a message or a log."""
        return self._value

    def __repr__(self) -> str:
        return "<redacted>"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Redacted) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


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


@dataclass(frozen=True, slots=True)
class PodRecord:
    """A Pod that holds units: its node and its effective request per extended resource
    (:func:`pod_requests`), nothing else."""

    node: str
    requests: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class SecretRecord:
    """A Secret as a record: its labels and every data value wrapped in :class:`Redacted`."""

    namespace: str
    name: str
    labels: Mapping[str, str]
    data: Mapping[str, Redacted]


@dataclass(slots=True)
class Snapshot:
    """The cluster as the pure rules see it, one value for the CLI, the webhook and the reconciler.

    `permitted` is the deployed KubeVirt CR's permittedHostDevices, None when no CR is deployed
    (the classes then say NoKubeVirt, with `kubevirt_problem`'s words);
    `launcher_devices` the KubeVirt devices its launcher Pods request
    (:func:`shared.core.model.kubevirt.read_kubevirt`); `secrets` are keyed by (namespace, name).
    """

    classes: dict[str, ClassRecord] = field(default_factory=dict)
    nodes: list[NodeRecord] = field(default_factory=list)
    pods: list[PodRecord] = field(default_factory=list)
    permitted: frozenset[str] | None = None
    mediated: frozenset[str] = frozenset()
    """The KubeVirt CR's mediated-device resourceNames: every one is a vGPU, class or not."""
    namespaces: dict[str, Mapping[str, str]] = field(default_factory=dict)
    secrets: dict[tuple[str, str], SecretRecord] = field(default_factory=dict)
    vmis: list[VMIUse] = field(default_factory=list)
    launcher_devices: tuple[str, ...] = DEFAULT_LAUNCHER_DEVICES
    kubevirt_problem: str | None = None
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
        self.permitted = config.permitted if config.deployed is not None else None
        self.mediated = config.mediated
        self.launcher_devices = config.launcher_devices
        self.kubevirt_problem = config.problem()
        self.kubevirt = config


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _items(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    return _dict(obj.get("metadata"))


def _str_map(value: object) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


def _extended(resources: object) -> dict[str, int]:
    """Extended resources (names with a '/') as whole units."""
    if not isinstance(resources, dict):
        return {}
    try:  # most maps name only cpu and memory: one C-speed look at all their keys at once
        if "/" not in "".join(resources):
            return {}
    except TypeError:  # a key that is not a string: look at each
        pass
    return {k: quantity_units(v) for k, v in resources.items() if isinstance(k, str) and "/" in k}


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
    meta = _meta(obj)
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
    name = _meta(obj).get("name")
    if not isinstance(name, str):
        return None
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
    ready = any(
        isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True"
        for c in _items(status.get("conditions"))  # type: ignore[union-attr]
    )
    taints = tuple(
        Taint(str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or ""))
        for t in _items(spec.get("taints"))  # type: ignore[union-attr]
        if isinstance(t, dict)
    )
    return NodeRecord(
        name=name,
        ready=ready,
        unschedulable=bool(spec.get("unschedulable")),  # type: ignore[union-attr]
        taints=taints,
        allocatable=_extended(status.get("allocatable")),  # type: ignore[union-attr]
        handler=handler_state(_meta(obj).get("labels")),
    )


def pod_requests(
    spec: Mapping[str, Any], read: Callable[[object], dict[str, int]] | None = None
) -> dict[str, int]:
    """Effective Pod request per extended resource, exactly as the kube-scheduler counts it.

    The rule of k8s.io/component-helpers `resource.PodRequests` (docs/decisions.md, "Status"):
    sidecars (init containers with `restartPolicy: Always`) keep running beside the regular
    containers, so they add to their sum; an ordinary init container runs alone beside the
    sidecars started before it. The Pod holds the larger of the two, plus `spec.overhead`:

        max(sum(containers) + sum(sidecars), max_i(init_i + sum(sidecars before i))) + overhead

    `read` turns a resource list into amounts: extended resources as whole units by default
    (`gpuclass explain` passes one that reads CPU and memory, :mod:`shared.core.model.detail`).
    """
    read = read or _extended
    containers = spec.get("containers")
    if (  # most pods: one container, no init containers, no overhead
        "initContainers" not in spec
        and "overhead" not in spec
        and isinstance(containers, list)
        and len(containers) == 1
        and isinstance(containers[0], dict)
    ):
        only = _container_requests(containers[0], read)
        return {k: v for k, v in only.items() if v > 0} if only else only
    total: dict[str, int] = {}
    for container in _items(containers):
        if isinstance(container, dict):
            _add(total, _container_requests(container, read))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for container in _items(spec.get("initContainers")):
        if not isinstance(container, dict):
            continue
        own = _container_requests(container, read)
        if container.get("restartPolicy") == "Always":
            _add(total, own)
            _add(sidecars, own)
            # While a sidecar starts, the sidecars so far run: never more than `total`, which
            # holds them all and the containers too (units are never negative).
            continue
        # An init container runs beside the sidecars started before it. Only its own resources
        # can peak above `total` (any other is a sidecar sum): one pass over them, not a copy of
        # every sidecar resource per init container (a tenant's Pod of thousands was quadratic).
        for key, units in own.items():
            peak = units + sidecars.get(key, 0)
            if peak > init_peak.get(key, 0):
                init_peak[key] = peak
    for key, units in init_peak.items():
        total[key] = max(total.get(key, 0), units)
    _add(total, read(spec.get("overhead")))
    return {k: v for k, v in total.items() if v > 0}


def _add(total: dict[str, int], more: Mapping[str, int]) -> None:
    for key, units in more.items():
        total[key] = total.get(key, 0) + units


def _container_requests(
    container: Mapping[str, Any], read: Callable[[object], dict[str, int]]
) -> dict[str, int]:
    resources = container.get("resources")
    if not isinstance(resources, dict):
        return {}
    # A limit alone implies an equal request (extended resources cannot be overcommitted; for
    # CPU and memory the API server defaults the request to the limit).
    merged = read(resources.get("limits"))
    merged.update(read(resources.get("requests")))
    return merged


def compact_pod(obj: Mapping[str, Any]) -> PodRecord | None:
    """A pod that holds units: bound to a node, Pending or Running, requesting any extended resource."""
    spec = obj.get("spec")
    status = obj.get("status")
    if not isinstance(spec, dict):
        return None
    node = spec.get("nodeName")
    phase = status.get("phase") if isinstance(status, dict) else None
    if not isinstance(node, str) or not node or not isinstance(phase, str):
        return None
    if phase not in ACTIVE_POD_PHASES:
        return None
    requests = pod_requests(spec)
    return PodRecord(node, requests) if requests else None


def compact_secret(obj: Mapping[str, Any]) -> SecretRecord | None:
    """A Secret's record, values wrapped in :class:`Redacted`; `stringData` (only hand-written files
    carry it) is folded into `data` as the API server would. None without a name and a namespace."""
    meta = _meta(obj)
    name, namespace = meta.get("name"), meta.get("namespace")
    if not isinstance(name, str) or not isinstance(namespace, str):
        return None
    data = {k: Redacted(v) for k, v in _str_map(obj.get("data")).items()}
    # stringData is write-only in the API (merged into data); hand-written files may still use it.
    for key, text in _str_map(obj.get("stringData")).items():
        data[key] = Redacted(base64.b64encode(text.encode()).decode())
    return SecretRecord(namespace, name, _str_map(meta.get("labels")), data)


def _object_key(obj: Mapping[str, Any], *, namespaced: bool) -> Key | None:
    meta = _meta(obj)
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
                _add(used.setdefault(node, {}), amounts)
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
            name = _meta(obj).get("name")
            if isinstance(name, str):
                snap.namespaces[name] = _str_map(_meta(obj).get("labels"))
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
