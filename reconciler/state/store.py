"""The reconciler's store (client-go's word): compact records of the cluster, indexed, and the
marks of what each change dirties.

Raw objects go in one at a time, by the watched *resource* (:data:`reconciler.state.resources.SPECS`)
they came from: `upsert` for an ADDED/MODIFIED object, `delete` for a DELETED one, `sweep`
after a re-list to drop what the list no longer holds. What stays are the small
records of :mod:`shared.core.model.snapshot` (pods keyed by namespace/name so updates and
deletes land), :class:`shared.core.model.vmiuse.VMIUse` records, usage counters and the
indexes the decisions read (:mod:`reconciler.state.decisions` says what the classes and
copies should be; this module only stores).

The reflector (`shared.kube.listwatch`) is the only caller of those three: the
reconciler's own writes reach the store through the watch like any other change, never
from a write's response, so a late response cannot roll the store back. The worker
waits for its writes to come back instead (:mod:`reconciler.state.expect`).

Each change marks only what it can affect (level-based: the mark says "look at
this again", never "this happened"):

- a pod: the classes of the resources it requests (old and new requests);
- a node: the classes of the resources whose figures it can move
  (:func:`reconciler.state.usage.node_change_resources`);
- a class: itself, and the classes sharing its old or new resourceName (conflicts);
- the KubeVirt CR: every class, when the permitted set changes;
- a license source Secret: the classes naming it, and the license copies;
- a VMI: the in-use finalizer of the classes it selects, and the copies if it
  mounts a license (a change of its phase alone only moves the usage counters of
  :class:`reconciler.state.usage.VMIUsage`); a bound launcher Pod that mounts a license
  copy, a Namespace or the copy record: the copies.

Nothing held grows with what a tenant may create beyond the few small records per object
above: no Secret of a tenant is ever read (docs/decisions.md, "License copies"). Pure: no I/O,
no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from gpuclass.reconciler.state.licenses import Started, launcher_license, parse_record
from gpuclass.reconciler.state.records import CopyRecord, Dirty, StoredClass
from gpuclass.reconciler.state.resources import SPECS, Resource
from gpuclass.reconciler.state.usage import UsageCounters, VMIUsage
from gpuclass.shared.core.base import names
from gpuclass.shared.core.base.meta import Key, object_key, resource_version
from gpuclass.shared.core.model.kubevirt import KubeVirtConfig, read_kubevirt
from gpuclass.shared.core.model.podrequests import PodRecord, compact_pod
from gpuclass.shared.core.model.secrets import SecretRecord, compact_secret
from gpuclass.shared.core.model.snapshot import ClassRecord, NodeRecord, compact_class, compact_node
from gpuclass.shared.core.model.vmiuse import VMIUse, compact_vmi_use
from gpuclass.shared.core.status.availability import conflict_winners

INTERN_ITEMS = 16  # larger maps and tuples are not shared: no honest cluster repeats them
INTERN_WEIGHT = 1 << 16  # entries plus their items: about 20 MB of values no record holds, at most


class ClusterStore:
    """The reconciler's store: compact records per resource, indexes, usage counters, dirty marks.

    Its records are written only by the reflector (`upsert`, `delete`, `sweep`), which also
    sets the marks of what each change affects. The worker reads the records (through
    :mod:`reconciler.state.decisions`), takes the marks (`take_dirty`) and marks again what it
    must revisit (a deferred or failed write); the worker and the manager may mark everything
    (`mark_all`). Nobody else writes a record.
    """

    def __init__(self, *, license_namespace: str = names.DEFAULT_LICENSE_NAMESPACE) -> None:
        self.license_namespace = license_namespace
        self.classes: dict[str, StoredClass] = {}
        self.records: dict[str, ClassRecord] = {}
        self.nodes: dict[str, NodeRecord] = {}
        self.pods: dict[Key, PodRecord] = {}
        self.kubevirts: dict[Key, Mapping[str, Any]] = {}
        """The KubeVirt CRs of KubeVirt's namespace (a cluster holds one, seldom two)."""
        self.kubevirt = KubeVirtConfig()
        self.license_secrets: dict[Key, SecretRecord] = {}
        self.copy_records: dict[Key, CopyRecord] = {}
        """At most one entry: the record ConfigMap (the resource selects it by name)."""
        self.launchers: dict[Key, Started] = {}
        """Bound launcher Pods that mount a license copy: pod key -> (namespace, VMI, copy)."""
        self.namespaces: dict[str, Mapping[str, str]] = {}
        self.vmis: dict[Key, VMIUse] = {}
        self.usage = UsageCounters()
        self.vmi_usage = VMIUsage()
        self.dirty = Dirty()
        self._by_resource_name: dict[str, set[str]] = {}
        self._winners: dict[str, str] | None = None  # see winners()
        self._vmis_by_class: dict[str, set[Key]] = {}
        self._license_vmis: dict[Key, VMIUse] = {}
        self._interned: dict[object, Any] = {}
        self._interned_weight = 0
        self._handlers: dict[Resource, Callable[[Key, Mapping[str, Any] | None], None]] = {
            "gpuclasses": self._set_class,
            "nodes": self._set_node,
            "pods": self._set_pod,
            "kubevirts": self._set_kubevirt,
            "licence-secrets": self._set_license_secret,
            "copy-record": self._set_copy_record,
            "namespaces": self._set_namespace,
            "vmis": self._set_vmi,
        }
        assert set(self._handlers) == set(SPECS), "one handler per watched resource"

    def upsert(self, resource: Resource, obj: Mapping[str, Any]) -> None:
        """An ADDED/MODIFIED (or listed) object: its handler stores it and marks what it affects."""
        key = object_key(obj)
        if key is not None:
            self._handlers[resource](key, obj)

    def delete(self, resource: Resource, obj: Mapping[str, Any]) -> None:
        """The reflector's DELETED object: its handler drops the record and marks what it affected."""
        key = object_key(obj)
        if key is not None:
            self._handlers[resource](key, None)

    def held_version(self, resource: Resource, key: Key) -> str:
        """resourceVersion the store holds for an object of `resource` ("" when none or not kept).

        Only the stores of objects the reconciler writes (classes, the copy record) keep
        a version: their entries carry `resource_version`, which the worker compares with
        what its own writes returned (:mod:`reconciler.state.expect`).
        """
        entry = self._store(resource).get(self._store_key(resource, key))
        version = getattr(entry, "resource_version", "")
        return version if isinstance(version, str) else ""

    def sweep(self, resource: Resource, seen: set[Key]) -> None:
        """After a re-list: forget what the list no longer holds."""
        for key in [k for k in self.keys(resource) if k not in seen]:
            self._handlers[resource](key, None)

    def keys(self, resource: Resource) -> list[Key]:
        """The object keys the store of `resource` holds (cluster-scoped stores hold names). A Pod
        is held as a holder of units, as a launcher mounting a license copy, or both."""
        store = self._store(resource)
        if SPECS[resource].cluster_scoped:
            return [("", name) for name in store]
        if resource == "pods":
            return list(dict.fromkeys([*store, *self.launchers]))
        return list(store)

    def _store(self, resource: Resource) -> Mapping[Any, Any]:
        return getattr(self, SPECS[resource].store)  # type: ignore[no-any-return]

    @staticmethod
    def _store_key(resource: Resource, key: Key) -> Any:
        return key[1] if SPECS[resource].cluster_scoped else key

    def take_dirty(self) -> Dirty:
        """Hand the worker everything marked so far and start a fresh set, so marks made during the
        pass wait for the next one."""
        taken, self.dirty = self.dirty, Dirty()
        return taken

    def mark_all(self) -> None:
        """Mark every class and the copies, with a full verify of every copy: the periodic resync,
        and the repair after a failed pass or a regained Lease."""
        self.dirty.statuses |= set(self.classes)
        self.dirty.finalizers |= set(self.classes)
        self.dirty.copies = True
        self.dirty.verify_copies = True

    def _mark_resource_names(self, resource_names: Iterable[str]) -> None:
        for resource_name in resource_names:
            self.dirty.statuses |= self._by_resource_name.get(resource_name, set())

    def _intern(self, value: Any) -> Any:
        """One shared copy of equal small values (node names, request maps) across 100,000s of pods.

        Tenants choose these values (a Pod's `nodeName` and requests) and delete their Pods, so
        the table is bounded: a map or tuple of more than INTERN_ITEMS items is not shared (it
        would be one Pod's), and a table that reaches INTERN_WEIGHT (entries plus their items) is
        started afresh. Records keep what they hold; only later equal values share anew."""
        if isinstance(value, dict | tuple):
            if len(value) > INTERN_ITEMS:
                return value
            weight = 1 + len(value)
            key = (type(value), tuple(sorted(value.items())) if isinstance(value, dict) else value)
        else:
            weight, key = 1, (type(value), value)
        found = self._interned.get(key)
        if found is not None:
            return found
        if self._interned_weight + weight > INTERN_WEIGHT:
            self._interned.clear()
            self._interned_weight = 0
        self._interned[key] = value
        self._interned_weight += weight
        return value

    # -- per resource ----------------------------------------------------------------------------

    def _set_class(self, key: Key, obj: Mapping[str, Any] | None) -> None:
        name = key[1]
        old = self.classes.pop(name, None)
        previous = old.record if old is not None else None
        record = compact_class(obj, previous=previous) if obj is not None else None
        self.records.pop(name, None)
        if record is not None and obj is not None:
            status = obj.get("status")
            version = resource_version(obj)
            same_hold = old is not None and (old.record.finalizers, old.record.deleting) == (
                record.finalizers,
                record.deleting,
            )
            self.classes[name] = StoredClass(
                record,
                status if isinstance(status, dict) else None,
                version,
                old.hold_version if same_hold and old is not None else version,
            )
            self.records[name] = record
        self._class_changed(name, old.record if old else None, new=record)

    def _class_changed(
        self, name: str, old: ClassRecord | None, *, new: ClassRecord | None
    ) -> None:
        self.dirty.statuses.add(name)
        self.dirty.finalizers.add(name)
        before = old.resource_name if old else None
        after = new.resource_name if new else None
        if before is not None:
            self._by_resource_name.get(before, set()).discard(name)
        if after is not None:
            self._by_resource_name.setdefault(after, set()).add(name)
        if old is None or new is None or before != after or old.created != new.created:
            self._mark_resource_names({r for r in (before, after) if r is not None})
            self._winners = None
        if new is None:
            self.usage.surveys.forget(name)
        license_before = old.spec.license if old and old.spec else None
        license_after = new.spec.license if new and new.spec else None
        if license_before != license_after or (old is None) != (new is None):
            self.dirty.copies = True

    def _set_node(self, key: Key, obj: Mapping[str, Any] | None) -> None:
        name = key[1]
        record = compact_node(obj) if obj is not None else None
        if record is not None:
            record = NodeRecord(
                self._intern(record.name),
                record.ready,
                record.unschedulable,
                self._intern(record.taints),
                self._intern(dict(record.allocatable)),
                record.handler,
            )
        old = self.nodes.get(name)
        if record == old:
            return
        if record is None:
            del self.nodes[name]
        else:
            self.nodes[name] = record
        self._mark_resource_names(self.usage.set_node(name, old, new=record))

    def _set_pod(self, key: Key, obj: Mapping[str, Any] | None) -> None:
        self._set_launcher(key, obj)
        record = compact_pod(obj) if obj is not None else None
        if record is not None:
            record = PodRecord(self._intern(record.node), self._intern(dict(record.requests)))
        old = self.pods.get(key)
        if record == old:
            return
        if old is not None:
            self.usage.add_pod(old, -1)
            del self.pods[key]
        if record is not None:
            self.usage.add_pod(record, 1)
            self.pods[(self._intern(key[0]), key[1])] = record
        self._mark_resource_names(
            {*(old.requests if old else ()), *(record.requests if record else ())}
        )

    def _set_launcher(self, key: Key, obj: Mapping[str, Any] | None) -> None:
        mount = launcher_license(obj) if obj is not None else None
        started = (key[0], *mount) if mount is not None else None
        if started == self.launchers.get(key):
            return
        if started is None:
            del self.launchers[key]
        else:
            self.launchers[key] = started
        self.dirty.copies = True

    def _set_kubevirt(self, key: Key, obj: Mapping[str, Any] | None) -> None:
        if obj is None:
            self.kubevirts.pop(key, None)
        else:
            self.kubevirts[key] = obj
        config = read_kubevirt(self.kubevirts.values())
        if config != self.kubevirt:
            self.kubevirt = config
            self.dirty.statuses |= set(self.classes)

    def _set_license_secret(self, key: Key, obj: Mapping[str, Any] | None) -> None:
        record = compact_secret(obj) if obj is not None else None
        if record is not None:  # keep the token only: nothing else in that namespace is ours
            token = {k: v for k, v in record.data.items() if k == names.TOKEN_KEY}
            record = SecretRecord(record.namespace, record.name, {}, token)
        if record == self.license_secrets.get(key):
            return
        if record is None:
            self.license_secrets.pop(key, None)
        else:
            self.license_secrets[key] = record
        for entry in self.classes.values():
            spec = entry.record.spec
            if spec and spec.license and spec.license.secret_name == key[1]:
                self.dirty.statuses.add(entry.record.name)
                self.dirty.copies = True

    def _set_copy_record(self, key: Key, obj: Mapping[str, Any] | None) -> None:
        old = self.copy_records.pop(key, None)
        if obj is not None:
            self.copy_records[key] = CopyRecord(parse_record(obj), resource_version(obj))
        new = self.copy_records.get(key)
        if (old.entries if old else None) != (new.entries if new else None):
            self.dirty.copies = True

    @property
    def copy_record(self) -> CopyRecord:
        """The record (empty, version "" while the ConfigMap does not exist)."""
        return next(iter(self.copy_records.values()), CopyRecord({}, ""))

    def _set_namespace(self, key: Key, obj: Mapping[str, Any] | None) -> None:
        name = key[1]
        labels: Mapping[str, str] | None = None
        if obj is not None:
            meta = obj.get("metadata") or {}
            raw = meta.get("labels") if isinstance(meta, dict) else None
            # only the entitlement label matters: a tenant's own labels are not kept
            value = raw.get(names.VGPU_ENTITLEMENT_LABEL) if isinstance(raw, dict) else None
            labels = {names.VGPU_ENTITLEMENT_LABEL: value} if isinstance(value, str) else {}
        if labels == self.namespaces.get(name):
            return
        if labels is None:
            self.namespaces.pop(name, None)
        else:
            self.namespaces[name] = labels
        self.dirty.copies = True

    def _set_vmi(self, key: Key, obj: Mapping[str, Any] | None) -> None:
        record = compact_vmi_use(obj) if obj is not None else None
        old = self.vmis.get(key)
        if record == old:
            return
        if old is not None:
            self.vmi_usage.add(old, -1)
        if record is not None:
            self.vmi_usage.add(record, 1)
        if record is not None and record.same_use(old):
            self.vmis[key] = record  # a phase change: usage only, no class or copy to revisit
            if key in self._license_vmis:
                self._license_vmis[key] = record
            return
        for vmi in (old, record):
            if vmi is not None:
                self.dirty.finalizers.update(vmi.classes)
                self.dirty.copies |= vmi.license_secret is not None
        for name in old.classes if old else ():
            holders = self._vmis_by_class.get(name)
            if holders is not None:
                holders.discard(key)
                if not holders:  # the names come from annotations: keep none without a VMI
                    del self._vmis_by_class[name]
        self._license_vmis.pop(key, None)
        if record is None:
            self.vmis.pop(key, None)
            return
        self.vmis[key] = record
        for name in record.classes:
            self._vmis_by_class.setdefault(name, set()).add(key)
        if record.license_secret is not None:
            self._license_vmis[key] = record

    # -- indexes the decisions read (reconciler.state.decisions) ---------------------------------

    def winners(self) -> Mapping[str, str]:
        """`conflict_winners` of the classes, kept until a class comes, goes or changes its claim."""
        if self._winners is None:
            self._winners = conflict_winners(self.records)
        return self._winners

    def vmis_of_class(self, name: str) -> Iterable[Key]:
        """The keys of the stored VMIs that select the class."""
        return self._vmis_by_class.get(name, ())

    def license_vmis(self) -> Iterable[VMIUse]:
        """The stored VMIs that mount a license."""
        return self._license_vmis.values()
