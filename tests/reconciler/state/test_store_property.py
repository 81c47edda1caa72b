"""Property: the incremental store equals the from-scratch computation after any sequence of events.

A Hypothesis store machine puts, edits (one field at a time, so that the small
changes that are easy to miss come up often) and deletes classes, nodes, pods, the
KubeVirt CR, the license source Secret, namespaces and VMIs, feeding each change to
:class:`reconciler.state.store.ClusterStore`. After every step:

- every class whose status, or in-use verdict, changed was marked dirty, and the
  license copies were marked whenever the copy plan changed (the affected-class
  index misses nothing);
- the statuses equal `shared.core.status.availability.compute_all` over a snapshot built from
  scratch (`SnapshotBuilder`) from the surviving raw objects, the in-use verdicts
  equal `reconciler.state.inuse.classes_in_use`, and the copy actions the pure plan.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from gpuclass.reconciler.state.decisions import class_status, copy_actions, in_use, status_context
from gpuclass.reconciler.state.inuse import classes_in_use
from gpuclass.reconciler.state.licenses import desired_copies, launcher_license, plan_copies
from gpuclass.reconciler.state.resources import Resource
from gpuclass.reconciler.state.store import ClusterStore
from gpuclass.shared.core.base.meta import object_key
from gpuclass.shared.core.model.snapshot import SnapshotBuilder
from gpuclass.shared.core.model.vmiuse import compact_vmi_use
from gpuclass.shared.core.status.availability import compute_all
from tests.builders import gpuclass, kubevirt, launcher, namespace, node, pod, secret, vmi

RESOURCES = ["example.com/r1", "example.com/r2"]
TAINTS = [
    [],
    [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}],
    [{"key": "other", "effect": "NoExecute"}],
]
NOW = "2026-01-01T00:00:00Z"
SOURCE_OF: dict[str, Resource] = {
    "GPUClass": "gpuclasses",
    "Node": "nodes",
    "Pod": "pods",
    "KubeVirt": "kubevirts",
    "Secret": "licence-secrets",
    "Namespace": "namespaces",
    "VirtualMachineInstance": "vmis",
}

units = st.sampled_from([0, 1, 3])
requests = st.dictionaries(st.sampled_from(RESOURCES), st.sampled_from([1, 2]), max_size=2)
class_names = st.sampled_from(["c1", "c2", "c3"])
node_names = st.sampled_from(["n1", "n2"])


def observe(store: ClusterStore) -> tuple[dict[str, Any], dict[str, bool], list[Any]]:
    context = status_context(store)
    statuses = {name: class_status(store, name, context=context, now=NOW) for name in store.classes}
    return (
        statuses,
        {name: in_use(store, name) for name in store.classes},
        copy_actions(store, vgpu_entitled=True),
    )


class StateMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.store = ClusterStore()
        self.objects: dict[tuple[str, Any], dict[str, Any]] = {}
        self.before = observe(self.store)

    # -- applying one change, and checking the dirty marks it left ----------------------------------

    def put(self, obj: dict[str, Any]) -> None:
        self.objects[(obj["kind"], object_key(obj))] = obj
        self.store.upsert(SOURCE_OF[obj["kind"]], copy.deepcopy(obj))
        self.check_marks()

    def remove(self, kind: str, key: Any) -> None:
        obj = self.objects.pop((kind, key), None)
        if obj is not None:
            self.store.delete(SOURCE_OF[kind], obj)
            self.check_marks()

    def existing(self, kind: str, name: str) -> dict[str, Any] | None:
        return next(
            (
                o
                for (k, _), o in self.objects.items()
                if k == kind and o["metadata"]["name"] == name
            ),
            None,
        )

    def check_marks(self) -> None:
        after = observe(self.store)
        dirty = self.store.take_dirty()
        for name in set(self.before[0]) | set(after[0]):
            assert self.before[0].get(name) == after[0].get(name) or name in dirty.statuses, (
                f"{name}: status not marked"
            )
            assert (
                self.before[1].get(name, False) == after[1].get(name, False)
                or name in dirty.finalizers
            ), f"{name}: in-use not marked"
        assert self.before[2] == after[2] or dirty.copies, "license copies not marked"
        self.before = after

    # -- rules -----------------------------------------------------------------------------------

    @rule(
        name=class_names,
        resource=st.sampled_from(RESOURCES),
        tolerant=st.booleans(),
        created=st.sampled_from(["2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z"]),
        deleting=st.booleans(),
        licensed=st.booleans(),
    )
    def put_class(
        self, name: str, resource: str, tolerant: bool, created: str, deleting: bool, licensed: bool
    ) -> None:
        self.put(
            gpuclass(
                name,
                resource,
                created=created,
                deleting=deleting,
                license="src" if licensed else None,
                feature_type=4 if created.startswith("2026-02") else 1,
                tolerations=[{"key": "gpu", "operator": "Exists"}] if tolerant else None,
            )
        )

    @rule(
        name=node_names,
        r1=units,
        r2=units,
        ready=st.booleans(),
        cordoned=st.booleans(),
        taints=st.sampled_from(TAINTS),
    )
    def put_node(
        self, name: str, r1: int, r2: int, ready: bool, cordoned: bool, taints: list[Any]
    ) -> None:
        allocatable = {k: v for k, v in zip(RESOURCES, (r1, r2), strict=True) if v}
        self.put(node(name, allocatable, ready=ready, unschedulable=cordoned, taints=taints))

    @rule(
        name=node_names,
        field=st.sampled_from(["ready", "cordon", "taint", "units"]),
        data=st.data(),
    )
    def edit_node(self, name: str, field: str, data: st.DataObject) -> None:
        obj = copy.deepcopy(self.existing("Node", name))
        if obj is None:
            return
        if field == "ready":
            cond = obj["status"]["conditions"][0]
            cond["status"] = "False" if cond["status"] == "True" else "True"
        elif field == "cordon":
            obj["spec"]["unschedulable"] = not obj["spec"].get("unschedulable", False)
        elif field == "taint":
            obj["spec"]["taints"] = data.draw(st.sampled_from(TAINTS))
        else:
            obj["status"]["allocatable"][data.draw(st.sampled_from(RESOURCES))] = str(
                data.draw(units)
            )
        self.put(obj)

    @rule(
        name=st.sampled_from(["p1", "p2", "p3"]),
        ns=st.sampled_from(["tenant-a", "tenant-b"]),
        node_name=st.sampled_from(["n1", "n2", None]),
        req=requests,
        phase=st.sampled_from(["Pending", "Running", "Succeeded"]),
        init=st.one_of(st.none(), requests),
    )
    def put_pod(
        self,
        name: str,
        ns: str,
        node_name: str | None,
        req: dict[str, int],
        phase: str,
        init: dict[str, int] | None,
    ) -> None:
        self.put(pod(name, node_name, req, namespace=ns, phase=phase, init=init))

    @rule(
        name=st.sampled_from(["p1", "p2", "p3"]),
        phase=st.sampled_from(["Pending", "Running", "Succeeded"]),
    )
    def edit_pod(self, name: str, phase: str) -> None:
        obj = copy.deepcopy(self.existing("Pod", name))
        if obj is not None:
            obj["status"]["phase"] = phase
            self.put(obj)

    @rule(
        name=class_names, field=st.sampled_from(["deleting", "tolerations", "resource", "created"])
    )
    def edit_class(self, name: str, field: str) -> None:
        obj = copy.deepcopy(self.existing("GPUClass", name))
        if obj is None:
            return
        meta, spec = obj["metadata"], obj["spec"]
        if field == "deleting":
            meta["deletionTimestamp"] = (
                None if meta.get("deletionTimestamp") else "2026-06-01T00:00:00Z"
            )
        elif field == "tolerations":
            spec["tolerations"] = (
                [] if spec.get("tolerations") else [{"key": "gpu", "operator": "Exists"}]
            )
        elif field == "resource":
            plugin = spec["source"]["devicePlugin"]
            plugin["resourceName"] = RESOURCES[1 - RESOURCES.index(plugin["resourceName"])]
        else:
            meta["creationTimestamp"] = "2025-12-01T00:00:00Z"
        self.put(obj)

    @rule(permitted=st.sets(st.sampled_from(RESOURCES)))
    def put_kubevirt(self, permitted: set[str]) -> None:
        self.put(kubevirt(*sorted(permitted)))

    @rule(token=st.sampled_from(["dG9r", "b3RoZXI=", ""]))
    def put_source_secret(self, token: str) -> None:
        self.put(secret("src", data={"client_configuration_token.tok": token} if token else {}))

    @rule(name=st.sampled_from(["tenant-a", "tenant-b"]), entitled=st.booleans())
    def put_namespace(self, name: str, entitled: bool) -> None:
        self.put(namespace(name, entitled=entitled))

    @rule(
        name=st.sampled_from(["v1", "v2"]),
        ns=st.sampled_from(["tenant-a", "tenant-b"]),
        chosen=st.lists(class_names, max_size=2),
        devices=st.lists(st.sampled_from(RESOURCES), max_size=2),
        license=st.sampled_from([None, "c1", "c2"]),
    )
    def put_vmi(
        self, name: str, ns: str, chosen: list[str], devices: list[str], license: str | None
    ) -> None:
        self.put(vmi(name, ns, classes=chosen, devices=devices, license_class=license))

    @rule(
        vmi_name=st.sampled_from(["v1", "v2"]),
        ns=st.sampled_from(["tenant-a", "tenant-b"]),
        node_name=st.sampled_from([None, "n1"]),
        phase=st.sampled_from(["Pending", "Running", "Succeeded"]),
        license=st.sampled_from([None, "c1", "c2"]),
    )
    def put_launcher(
        self, vmi_name: str, ns: str, node_name: str | None, phase: str, license: str | None
    ) -> None:
        self.put(launcher(vmi_name, ns, node_name, license_class=license, phase=phase))

    @rule(ns=st.sampled_from(["tenant-a", "tenant-b"]), entitled=st.booleans())
    def put_licensed_vm(self, ns: str, entitled: bool) -> None:
        """A whole licensed set-up at once, so that copy scenarios are common."""
        self.put(gpuclass("c1", RESOURCES[0], license="src"))
        self.put(secret("src"))
        self.put(namespace(ns, entitled=entitled))
        self.put(vmi("v1", ns, classes=["c1"], devices=[RESOURCES[0]], license_class="c1"))
        self.put(launcher("v1", ns, "n1", license_class="c1"))

    @precondition(lambda self: bool(self.objects))
    @rule(data=st.data())
    def delete_one(self, data: st.DataObject) -> None:
        kind, key = data.draw(st.sampled_from(sorted(self.objects, key=repr)))
        self.remove(kind, key)

    # -- the from-scratch side --------------------------------------------------------------------

    @invariant()
    def equals_from_scratch(self) -> None:
        statuses, in_use, copies = self.before
        snapshot = SnapshotBuilder().add_all(self.objects.values())
        assert statuses == compute_all(snapshot, license_namespace="cozy-system", now=NOW)
        uses = [
            u
            for o in self.objects.values()
            if o["kind"] == "VirtualMachineInstance"
            if (u := compact_vmi_use(o))
        ]
        assert {n for n, used in in_use.items() if used} == classes_in_use(uses, snapshot.classes)
        plan = desired_copies(
            uses,
            snapshot.classes,
            secrets=snapshot.secrets,
            namespaces=snapshot.namespaces,
            license_namespace="cozy-system",
            vgpu_entitled=True,
            started={
                (o["metadata"]["namespace"], *mount)
                for o in self.objects.values()
                if o["kind"] == "Pod"
                if (mount := launcher_license(o))
            },
        )
        assert copies == plan_copies(plan, {})


StateMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_incremental_state_equals_from_scratch = StateMachine.TestCase
