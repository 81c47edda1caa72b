"""An API server in a dict: the :class:`KubeAPI` of the offline twin, and the tests' fake.

It keeps raw objects by kind, stamps resourceVersions, serves lists in pages and
watches from a version (replaying a bounded history, 410 Gone when the version is
older), and checks what the real server checks for our writes: resourceVersion
preconditions (409), AlreadyExists (409), NotFound (404), no new finalizers on a
deleting object (422), deletion held by finalizers, no-op writes that keep the
resourceVersion, and the chart's ValidatingAdmissionPolicy on Secrets (403).
`tests/reconciler/api/test_fake.py` runs one script of requests against it and against a
real kube-apiserver with the chart applied, and expects the same answers. Tests inject
failures through `errors` and assert on `writes`, where the status, finalizer and Secret
writes are recorded (Events go to `events`; record ConfigMap and Lease writes only change
the store). The offline `--once` report is not built from `writes` but from the
:class:`~reconciler.api.dryrun.RecordingKube` wrapped around this fake.

Longer than 400 lines on purpose (docs/conventions.md rule 3): it is one API server, one
method per verb of :class:`~reconciler.api.port.KubeAPI` over one store of objects and one
change history, and every method checks what the real server checks on the same objects.
Split by verb, each half would reach into the other's store, versions and watch queues; the
test that holds it to the real server (`tests/reconciler/api/test_fake.py`) reads it whole.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuclass.reconciler.api.port import ApiError, ListPage, RawObject, WatchEvent
from gpuclass.reconciler.state.resources import SPECS, Resource, Scope, selected
from gpuclass.shared.core.base import names
from gpuclass.shared.core.base.meta import Key, object_key

KINDS = frozenset(spec.kind for spec in SPECS.values()) | {"Lease"}
HISTORY = 10_000
DELETION_TIMESTAMP = "2026-01-01T00:00:00Z"
"""Stamped on an object deleted while finalizers hold it (the fake has no clock)."""
COPY_ANNOTATION_PREFIX = "gpuclass.cozystack.io/"


@dataclass(frozen=True, slots=True)
class Change:
    """One entry of the change history a watch replays: the kind, the object before and after (None
    for a create or a delete) and the version stamped."""

    version: int
    kind: str
    old: RawObject | None
    new: RawObject | None


def _meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _unversioned(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in _meta(obj).items() if k != "resourceVersion"}
    return {**obj, "metadata": meta}


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply_merge_patch(result.get(key), value)
    return result


class MemoryKube:
    """The in-memory API server; `scope` applies the resources' namespaces and names as the real
    server's selectors would, `page_size` is the list page. Single event loop, no locking: a test
    or the offline twin owns it."""

    def __init__(
        self,
        objects: Iterable[Mapping[str, Any]] = (),
        *,
        scope: Scope | None = None,
        page_size: int = 500,
    ) -> None:
        self.scope = scope or Scope()
        self.page_size = page_size
        self.store: dict[str, dict[Key, RawObject]] = {kind: {} for kind in KINDS}
        self.version = 0
        self.history: list[Change] = []
        self.oldest = 0
        self.watchers: list[tuple[Resource, asyncio.Queue[WatchEvent | ApiError | None]]] = []
        self.errors: dict[str, list[ApiError]] = {}
        self.writes: list[tuple[str, RawObject]] = []
        self.events: list[RawObject] = []
        self.calls: dict[str, int] = {}
        self.load(objects)

    # -- setup -----------------------------------------------------------------------------------

    def load(self, objects: Iterable[Mapping[str, Any]]) -> None:
        """Replace every object (not leases/events); open watches end with 410 Gone."""
        for store in KINDS - {"Lease"}:
            self.store[store].clear()
        for obj in objects:
            kind, key = obj.get("kind"), object_key(obj)
            if isinstance(kind, str) and kind in KINDS and key is not None:
                stored = copy.deepcopy(dict(obj))
                self._stamp(stored)
                self.store[kind][key] = stored
        self.history.clear()
        self.oldest = self.version
        self.expire_watches()

    def apply(self, obj: Mapping[str, Any]) -> RawObject:
        """Create or replace an object as another client would (tests: the rest of the cluster)."""
        kind, key = str(obj.get("kind")), object_key(obj)
        if kind not in KINDS or key is None:
            raise ValueError(f"cannot store {kind} without a name")
        stored = self._put(kind, key, new=copy.deepcopy(dict(obj)))
        assert stored is not None
        return stored

    def remove(self, kind: str, namespace: str, *, name: str) -> None:
        """Delete an object as another client would: one held by finalizers is only marked."""
        current = self.store[kind].get((namespace, name))
        if current is None:
            return
        if not _meta(current).get("finalizers"):
            self._put(kind, (namespace, name), new=None)
        elif not _meta(current).get("deletionTimestamp"):
            marked = copy.deepcopy(current)
            marked["metadata"]["deletionTimestamp"] = DELETION_TIMESTAMP
            self._put(kind, (namespace, name), new=marked)

    def compact(self) -> None:
        """Forget the change history, as etcd's compaction does: older watches get 410 Gone."""
        self.history.clear()
        self.oldest = self.version

    def expire_watches(self) -> None:
        """End every open watch with 410 Gone, as a server that compacted past them does; `load` uses
        it so the reflectors re-list the new objects at once."""
        for _, queue in self.watchers:
            queue.put_nowait(ApiError(410, "Expired", message="too old resource version"))

    def end_watches(self) -> None:
        """End every open watch normally, as the server does when its timeout passes."""
        for _, queue in self.watchers:
            queue.put_nowait(None)

    def drop_watches(self) -> None:
        """Break every open watch as a dropped connection does."""
        for _, queue in self.watchers:
            queue.put_nowait(ApiError(0, "ConnectionError", message="watch dropped"))

    def _stamp(self, obj: RawObject) -> None:
        self.version += 1
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = str(self.version)
        if (
            obj.get("kind") == names.KIND
        ):  # generation stays as written: offline output = `gpuclass status`
            meta.setdefault("uid", f"uid-{meta.get('name')}")

    def _check(self, method: str) -> None:
        self.calls[method] = self.calls.get(method, 0) + 1
        pending = self.errors.get(method)
        if pending:
            raise pending.pop(0)

    # -- reads -------------------------------------------------------------------------------------

    def matches(self, resource: Resource, obj: Mapping[str, Any]) -> bool:
        """The server-side scope and selectors of each resource (:func:`reconciler.state.resources.selected`)."""
        return selected(SPECS[resource], obj, scope=self.scope)

    async def list_pages(self, resource: Resource) -> AsyncIterator[ListPage]:
        """Served from the dict, filtered by the resource's selectors, in pages of `page_size`; the
        last page carries the current version (an empty list is one empty page)."""
        self._check("list")
        items = [
            copy.deepcopy(o)
            for o in self.store[SPECS[resource].kind].values()
            if self.matches(resource, o)
        ]
        version = str(self.version)
        for start in range(0, max(len(items), 1), self.page_size):
            last = start + self.page_size >= len(items)
            yield ListPage(items[start : start + self.page_size], version if last else "", last)
            await asyncio.sleep(0)

    async def watch(self, resource: Resource, resource_version: str) -> AsyncIterator[WatchEvent]:
        """Replays the history after `resource_version`, then follows live changes (410 when the
        version is older than the history kept); an object moving in or out of the selectors is
        ADDED or DELETED, as the real server reports it."""
        self._check("watch")
        since = int(resource_version or 0)
        if since < self.oldest:
            raise ApiError(
                410, "Expired", message=f"too old resource version: {since} ({self.oldest})"
            )
        queue: asyncio.Queue[WatchEvent | ApiError | None] = asyncio.Queue()
        for change in self.history:
            if change.version > since:
                self._offer(resource, queue, change=change)
        entry = (resource, queue)
        self.watchers.append(entry)
        try:
            while True:
                item = await queue.get()
                if item is None:
                    return
                if isinstance(item, ApiError):
                    raise item
                yield item
        finally:
            self.watchers.remove(entry)

    def _offer(
        self,
        resource: Resource,
        queue: asyncio.Queue[WatchEvent | ApiError | None],
        *,
        change: Change,
    ) -> None:
        if change.kind != SPECS[resource].kind:
            return
        before = change.old is not None and self.matches(resource, change.old)
        after = change.new is not None and self.matches(resource, change.new)
        if after and change.new is not None:
            queue.put_nowait(
                WatchEvent("MODIFIED" if before else "ADDED", copy.deepcopy(change.new))
            )
        elif before and change.old is not None:
            queue.put_nowait(WatchEvent("DELETED", copy.deepcopy(change.old)))

    def _record(self, kind: str, old: RawObject | None, *, new: RawObject | None) -> None:
        change = Change(self.version, kind, old, new)
        self.history.append(change)
        if len(self.history) > HISTORY:
            self.oldest = self.history.pop(0).version
        for resource, queue in self.watchers:
            self._offer(resource, queue, change=change)

    # -- writes ------------------------------------------------------------------------------------

    def _get(self, kind: str, key: Key) -> RawObject:
        obj = self.store[kind].get(key)
        if obj is None:
            raise ApiError(404, "NotFound", message=f"{kind} {key[0]}/{key[1]} not found")
        return obj

    def _put(self, kind: str, key: Key, *, new: RawObject | None) -> RawObject | None:
        old = self.store[kind].get(key)
        if old is not None and new is not None and _unversioned(new) == _unversioned(old):
            return copy.deepcopy(old)  # a no-op write: the server keeps the resourceVersion
        if new is None:
            self.store[kind].pop(key, None)
            self.version += 1
        else:
            self._stamp(new)
            self.store[kind][key] = new
        self._record(kind, old, new=new)
        return copy.deepcopy(new)

    @staticmethod
    def _precondition(obj: Mapping[str, Any], version: str | None) -> None:
        if version and _meta(obj).get("resourceVersion") != version:
            raise ApiError(
                409,
                "Conflict",
                message="the object has been modified; please apply your changes to the latest version",
            )

    async def get_class(self, name: str) -> RawObject:
        """A copy of the stored class (404 when absent)."""
        self._check("get_class")
        return copy.deepcopy(self._get(names.KIND, ("", name)))

    async def patch_class_status(self, name: str, patch: RawObject) -> RawObject | None:
        """Merge patch of `status` with the resourceVersion precondition; recorded in `writes`. A
        patch that changes nothing keeps the version and sends no event."""
        self._check("patch_class_status")
        current = self._get(names.KIND, ("", name))
        self._precondition(current, _meta(patch).get("resourceVersion"))
        updated = copy.deepcopy(current)
        if "status" in patch:
            updated["status"] = apply_merge_patch(current.get("status"), patch["status"])
        self.writes.append(("status", {"name": name, "patch": copy.deepcopy(patch)}))
        return self._put(names.KIND, ("", name), new=updated)

    async def patch_class_finalizers(
        self, name: str, finalizers: list[str], *, resource_version: str
    ) -> RawObject | None:
        """Sets the finalizers with the precondition; refuses a new finalizer on a deleting class
        (422) and deletes the class when its last finalizer goes."""
        self._check("patch_class_finalizers")
        current = self._get(names.KIND, ("", name))
        self._precondition(current, resource_version)
        meta = _meta(current)
        if meta.get("deletionTimestamp") and set(finalizers) - set(meta.get("finalizers") or []):
            raise ApiError(
                422,
                "Invalid",
                message="no new finalizers can be added if the object is being deleted",
            )
        updated = copy.deepcopy(current)
        updated["metadata"]["finalizers"] = list(finalizers)
        self.writes.append(("finalizers", {"name": name, "finalizers": list(finalizers)}))
        if meta.get("deletionTimestamp") and not finalizers:
            self._put(names.KIND, ("", name), new=None)
            return updated  # the server answers with the object as it was when released
        return self._put(names.KIND, ("", name), new=updated)

    def _admit_secret(
        self,
        namespace: str,
        name: str,
        *,
        new: Mapping[str, Any] | None,
        old: Mapping[str, Any] | None,
    ) -> None:
        """The chart's ValidatingAdmissionPolicy (charts/gpuclass/templates/license-copy-policy.yaml).

        License-copy names in tenant namespaces only; the new object labelled ours, of
        type Opaque, with exactly the token and gridd.conf keys, no stringData, no
        annotation outside gpuclass.cozystack.io/, no ownerReferences, no finalizers and
        not immutable; the stored object labelled ours before an update or delete.
        """

        def labelled(obj: Mapping[str, Any] | None) -> bool:
            return (
                obj is not None
                and (_meta(obj).get("labels") or {}).get(names.MANAGED_BY_LABEL)
                == names.MANAGED_BY_VALUE
            )

        def well_formed(obj: Mapping[str, Any]) -> bool:
            data = obj.get("data")
            meta = _meta(obj)
            annotations = meta.get("annotations") or {}
            return (
                labelled(obj)
                and obj.get("type") == "Opaque"
                and isinstance(data, dict)
                and set(data) == {names.TOKEN_KEY, names.GRIDD_KEY}
                and "stringData" not in obj
                and all(str(k).startswith(COPY_ANNOTATION_PREFIX) for k in annotations)
                and not meta.get("ownerReferences")
                and not meta.get("finalizers")
                and not obj.get("immutable")
            )

        if (
            not name.startswith(names.LICENSE_COPY_PREFIX)
            or not namespace.startswith(names.TENANT_PREFIX)
            or (new is not None and not well_formed(new))
            or (old is not None and not labelled(old))
        ):
            raise ApiError(
                403,
                "Forbidden",
                message=f"ValidatingAdmissionPolicy denied request for Secret {name}",
            )

    def _namespace_exists(self, namespace: str) -> None:
        if self.store["Namespace"] and ("", namespace) not in self.store["Namespace"]:
            raise ApiError(404, "NotFound", message=f"namespaces {namespace!r} not found")

    async def create_secret(self, namespace: str, body: RawObject) -> RawObject | None:
        """Creates a copy after the checks the server and the chart's policy make (404 when namespaces
        are loaded and this one is not, 409 AlreadyExists, 403 from the policy); recorded in `writes`."""
        self._check("create_secret")
        name = str(_meta(body).get("name"))
        self._namespace_exists(namespace)
        if (namespace, name) in self.store["Secret"]:
            raise ApiError(409, "AlreadyExists", message=f"secrets {name!r} already exists")
        self._admit_secret(namespace, name, new=body, old=None)
        self.writes.append(
            ("create-secret", {"namespace": namespace, "name": name, "body": copy.deepcopy(body)})
        )
        new = {**copy.deepcopy(body), "kind": "Secret"}
        new["metadata"]["namespace"] = namespace
        return self._put("Secret", (namespace, name), new=new)

    async def patch_secret(
        self, namespace: str, name: str, *, patch: list[RawObject]
    ) -> RawObject | None:
        """A JSON patch of the operations `reconciler.state.licenses.copy_patch` sends: `test` (422 when
        it fails), `add` of a member (an existing one replaced), and 422 for a data change of
        an immutable Secret, as the API server answers."""
        self._check("patch_secret")
        current = self._get("Secret", (namespace, name))
        new = copy.deepcopy(current)
        for op in patch:
            *parents, last = [
                part.replace("~1", "/").replace("~0", "~") for part in op["path"].split("/")[1:]
            ]
            target: Any = new
            for part in parents:
                target = target.get(part) if isinstance(target, dict) else None
            if op["op"] == "test":
                if not isinstance(target, dict) or target.get(last) != op["value"]:
                    raise ApiError(422, "Invalid", message=f"testing value {op['path']} failed")
            elif isinstance(target, dict):
                target[last] = copy.deepcopy(op["value"])
            else:
                raise ApiError(
                    422, "Invalid", message=f"add operation does not apply: {op['path']}"
                )
        if current.get("immutable") and new.get("data") != current.get("data"):
            raise ApiError(
                422,
                "Invalid",
                message="data: Forbidden: field is immutable when `immutable` is set",
            )
        self._admit_secret(namespace, name, new=new, old=current)
        self.writes.append(
            (
                "patch-secret",
                {"namespace": namespace, "name": name, "body": {"data": new.get("data")}},
            )
        )
        return self._put("Secret", (namespace, name), new=new)

    async def delete_secret(self, namespace: str, name: str) -> None:
        """Deletes a copy the policy lets go (403 when not labelled ours, 404 when absent); recorded
        in `writes`."""
        self._check("delete_secret")
        current = self._get("Secret", (namespace, name))
        self._admit_secret(namespace, name, new=None, old=current)
        self.writes.append(("delete-secret", {"namespace": namespace, "name": name}))
        self._put("Secret", (namespace, name), new=None)

    async def create_config_map(self, namespace: str, body: RawObject) -> RawObject | None:
        """Creates the record ConfigMap (409 AlreadyExists); not recorded in `writes`."""
        self._check("create_config_map")
        name = str(_meta(body).get("name"))
        if (namespace, name) in self.store["ConfigMap"]:
            raise ApiError(409, "AlreadyExists", message=f"configmaps {name!r} already exists")
        new = {**copy.deepcopy(body), "kind": "ConfigMap"}
        new["metadata"]["namespace"] = namespace
        return self._put("ConfigMap", (namespace, name), new=new)

    async def replace_config_map(
        self, namespace: str, name: str, *, body: RawObject
    ) -> RawObject | None:
        """Replaces the record ConfigMap with the resourceVersion precondition (409 when stale, 404
        when absent)."""
        self._check("replace_config_map")
        current = self._get("ConfigMap", (namespace, name))
        self._precondition(current, _meta(body).get("resourceVersion"))
        new = {**copy.deepcopy(body), "kind": "ConfigMap"}
        new["metadata"]["namespace"] = namespace
        return self._put("ConfigMap", (namespace, name), new=new)

    async def create_event(self, namespace: str, body: RawObject) -> None:
        """Appends the Event to `events`; Events are not stored or watched."""
        self._check("create_event")
        self.events.append(
            {**copy.deepcopy(body), "metadata": {**_meta(body), "namespace": namespace}}
        )

    async def get_lease(self, namespace: str, name: str) -> RawObject | None:
        """A copy of the Lease, None when absent."""
        self._check("get_lease")
        lease = self.store["Lease"].get((namespace, name))
        return copy.deepcopy(lease) if lease else None

    async def create_lease(self, namespace: str, body: RawObject) -> RawObject:
        """Creates the Lease (409 AlreadyExists)."""
        self._check("create_lease")
        key = (namespace, str(_meta(body).get("name")))
        if key in self.store["Lease"]:
            raise ApiError(409, "AlreadyExists", message="lease already exists")
        self._put("Lease", key, new={**copy.deepcopy(body), "kind": "Lease"})
        return copy.deepcopy(self.store["Lease"][key])

    async def replace_lease(self, namespace: str, name: str, *, body: RawObject) -> RawObject:
        """Replaces the Lease with the resourceVersion precondition (409 when stale)."""
        self._check("replace_lease")
        current = self._get("Lease", (namespace, name))
        self._precondition(current, _meta(body).get("resourceVersion"))
        self._put("Lease", (namespace, name), new={**copy.deepcopy(body), "kind": "Lease"})
        return copy.deepcopy(self.store["Lease"][(namespace, name)])

    async def close(self) -> None:
        """Ends the open watches normally, as a closed client's streams end."""
        self.end_watches()
