"""`gpuclass plan`: what a catalog change will do to tenants, computed before it is merged.

Pure: the cluster as it is (a :class:`Snapshot` plus its VirtualMachines) and the proposed
catalog (GPUClass manifests) in, a :class:`Plan` out. Every answer comes from the functions
the running system calls, so the plan cannot disagree with what happens after the merge:

- a class change is judged by the GPUClass admitter (`validate_class` with the stored object
  as `old`: immutable identity, license mode), the same verdict the webhook and the CRD's
  rules give;
- status before and after is :func:`compute_all`, the reconciler's function, on the cluster
  with the current and with the proposed classes;
- a VirtualMachine's next start is :func:`judge_create` on its template's view
  (:func:`template_view`), the rules the VMI admitter runs when KubeVirt creates the VMI.

Read-only by construction: the module has no I/O; the command (`plancmd`) only reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from gpuclass.shared.cli.planmerge import proposed_snapshot, stored_object
from gpuclass.shared.core.admission.resolution import judge_create
from gpuclass.shared.core.admission.rules import annotation
from gpuclass.shared.core.admission.vmtemplate import template_view, tenant_cause
from gpuclass.shared.core.model.selection import parse_selection
from gpuclass.shared.core.model.snapshot import ClassRecord, Snapshot
from gpuclass.shared.core.model.validation import validate_class
from gpuclass.shared.core.status.availability import compute_all
from gpuclass.shared.core.status.catalog import Catalog, Policy, build_catalog

Change = Literal["added", "changed", "removed", "unchanged"]
Impact = Literal["refused", "start-refused", "start-changes", "running", "capacity"]
IMPACTS: tuple[Impact, ...] = ("refused", "start-refused", "start-changes", "running", "capacity")
"""What `--fail-on` can name: a refused class change, a VM whose next start is refused, a VM
whose next start changes, running VMIs on a class the change really changes (a refused change
leaves them alone), capacity lost."""
DEFAULT_FAIL_ON: tuple[Impact, ...] = ("refused", "start-refused")

FIGURES = ("free", "maxFreePerNode", "maxUnitsPerNode", "eligibleNodes")
NEW_CLASS_ADVICE = "create a new class with the new identity and move tenants to it"
RUNNING_KEEP = (
    "keep their devices and license until they stop; the change applies at their next start"
)
RUNNING_REMOVED = (
    "keep their devices and license until they stop; the class stays (deleting, held by its "
    "finalizer) until the last of them stops"
)


@dataclass(frozen=True, slots=True)
class ClassPlan:
    """One class: what changes, whether admission refuses it, and its status before and after."""

    name: str
    change: Change
    source: str = ""
    """The manifest file that proposes the class ("" for a removed class)."""
    line: int = 0
    """The line of the class's name in `source` (0: unknown), for annotations on the diff."""
    fields: tuple[str, ...] = ()
    """Spec fields that differ (top-level keys of `spec`), for a changed class."""
    refused: tuple[str, ...] = ()
    """Why the API server or the webhook refuses the change, each cause as `field: message`."""
    advice: str = ""
    warnings: tuple[str, ...] = ()
    before: Mapping[str, Any] | None = None
    after: Mapping[str, Any] | None = None
    running: tuple[str, ...] = ()
    """Running VMIs (namespace/name) that hold the class."""
    running_effect: str = ""

    @property
    def capacity_delta(self) -> int:
        """Free units after minus before (0 when refused: the stored class stays as it is)."""
        return _free(self.after) - _free(self.before)


@dataclass(frozen=True, slots=True)
class VMPlan:
    """A VirtualMachine whose next start is refused, or starts differently, after the change."""

    namespace: str
    name: str
    impact: Literal["start-refused", "start-changes"]
    classes: tuple[str, ...]
    causes: tuple[str, ...] = ()
    """Why its next start is refused, fields named as in the VM (`gpus[0]...`)."""
    detail: str = ""


@dataclass(frozen=True, slots=True)
class InventoryEntry:
    """A VM or VMI that requests a device-plugin name directly, and the classes that offer it."""

    kind: str
    namespace: str
    name: str
    device: str
    classes: tuple[str, ...]


@dataclass(slots=True)
class Plan:
    """The whole preview: classes, affected VMs, and the inventory when asked for."""

    classes: list[ClassPlan] = field(default_factory=list)
    vms: list[VMPlan] = field(default_factory=list)
    inventory: list[InventoryEntry] = field(default_factory=list)

    def impacts(self) -> dict[Impact, int]:
        """How many of each impact the plan holds (the summary line, and `--fail-on`)."""
        return {
            "refused": sum(1 for c in self.classes if c.refused),
            "start-refused": sum(1 for v in self.vms if v.impact == "start-refused"),
            "start-changes": sum(1 for v in self.vms if v.impact == "start-changes"),
            "running": len(
                {
                    r
                    for c in self.classes
                    if c.change != "unchanged" and not c.refused
                    for r in c.running
                }
            ),
            "capacity": sum(1 for c in self.classes if c.capacity_delta < 0),
        }

    def summary(self) -> dict[str, int]:
        """The figures a reviewer reads first."""
        impacts = self.impacts()
        return {
            "classesChanged": sum(1 for c in self.classes if c.change != "unchanged"),
            "changesRefused": impacts["refused"],
            "vmStartsRefused": impacts["start-refused"],
            "vmStartsChanged": impacts["start-changes"],
            "runningVMIsAffected": impacts["running"],
            "unitsGained": sum(max(c.capacity_delta, 0) for c in self.classes),
            "unitsLost": sum(max(-c.capacity_delta, 0) for c in self.classes),
        }

    def fails(self, fail_on: Iterable[Impact]) -> bool:
        """Whether any impact named in `fail_on` is present (exit code 1)."""
        impacts = self.impacts()
        return any(impacts[i] for i in fail_on)


@dataclass(frozen=True, slots=True)
class Proposed:
    """One proposed GPUClass manifest and the file it came from."""

    obj: Mapping[str, Any]
    source: str


def _free(status: Mapping[str, Any] | None) -> int:
    value = (status or {}).get("free")
    return value if isinstance(value, int) else 0


def _figures(status: Mapping[str, Any]) -> dict[str, Any]:
    figures = {k: status.get(k) for k in FIGURES if k in status}
    figures["conditions"] = [
        {k: c.get(k) for k in ("type", "status", "reason", "message") if k in c}
        for c in status.get("conditions") or []
        if isinstance(c, Mapping)
    ]
    return figures


def _name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return name if isinstance(name, str) else ""


def _same_spec(record: ClassRecord, obj: Mapping[str, Any]) -> bool:
    spec = obj.get("spec")
    return isinstance(spec, Mapping) and dict(record.raw_spec) == dict(spec)


def _changed_fields(old: Mapping[Any, Any], new: Mapping[Any, Any]) -> tuple[str, ...]:
    """The spec keys whose values differ, as text; a YAML file can write keys that are not
    strings (`1:`, `null:`), which sort by their type's name and text, never by comparison."""
    keys = sorted(set(old) | set(new), key=lambda k: (type(k).__name__, str(k)))
    return tuple(str(k) for k in keys if old.get(k) != new.get(k))


def plan(
    current: Snapshot,
    proposed: Sequence[Proposed],
    *,
    vms: Sequence[Mapping[str, Any]],
    policy: Policy,
    now: str,
) -> Plan:
    """The preview of replacing the cluster's catalog with `proposed`.

    A proposed class the admission would refuse is not applied in the "after" view (the
    API server keeps the stored one), so the status and VM figures show what the merge
    would really leave behind.
    """
    stored = {n: replace(r, status=None) for n, r in current.classes.items()}
    current = replace(current, classes=stored)
    before = compute_all(current, license_namespace=policy.license_namespace, now=now)
    by_name = {_name(p.obj): p for p in proposed if _name(p.obj)}
    accepted, judged = _judge(stored, by_name)
    after_snapshot = proposed_snapshot(current, accepted, now=now)
    after = compute_all(after_snapshot, license_namespace=policy.license_namespace, now=now)
    running = _running(current)
    result = Plan()
    for name in sorted(set(stored) | set(by_name)):
        proposal = by_name.get(name)
        stored_record = stored.get(name)
        refused, warnings, advice = judged.get(name, ((), (), ""))
        if stored_record is None:
            change: Change = "added"
            fields: tuple[str, ...] = ()
        elif proposal is None:
            change = "removed"
            fields = ()
        else:
            spec = proposal.obj.get("spec")
            fields = _changed_fields(
                dict(stored_record.raw_spec), dict(spec if isinstance(spec, Mapping) else {})
            )
            change = "changed" if fields else "unchanged"
        users = tuple(running.get(name, ()))
        effect = ""
        if users and change == "removed":
            effect = RUNNING_REMOVED
        elif users and change == "changed" and not refused:
            effect = RUNNING_KEEP
        result.classes.append(
            ClassPlan(
                name=name,
                change=change,
                source=proposal.source if proposal else "",
                fields=fields,
                refused=refused,
                advice=advice,
                warnings=warnings,
                before=_figures(before[name]) if name in before else None,
                after=_figures(after[name]) if name in after else None,
                running=users,
                running_effect=effect,
            )
        )
    before_catalog, after_catalog = _catalogs(current, after_snapshot, policy=policy)
    result.vms = vm_plans(vms, before_catalog, after=after_catalog)
    return result


Judged = dict[str, tuple[tuple[str, ...], tuple[str, ...], str]]
"""Per proposed class: the causes admission would refuse it with, its warnings, the advice."""


def _judge(
    stored: Mapping[str, ClassRecord], by_name: Mapping[str, Proposed]
) -> tuple[dict[str, Mapping[str, Any]], Judged]:
    """Each proposed class as the GPUClass webhook would judge it against the stored catalog, and
    the objects the merge would leave stored (a refused change keeps the stored class)."""
    others = {n: r.resource_name for n, r in stored.items() if r.resource_name}
    accepted: dict[str, Mapping[str, Any]] = {}
    judged: Judged = {}
    for name, item in sorted(by_name.items()):
        old_record = stored.get(name)
        old = stored_object(old_record) if old_record else None
        if old_record is not None and old is not None and _same_spec(old_record, item.obj):
            accepted[name] = old
            continue
        claims = {n: r for n, r in others.items() if n != name}
        verdict = validate_class(item.obj, old=old, others=claims)
        refused = tuple(c.render() for c in verdict.causes)
        advice = NEW_CLASS_ADVICE if any("immutable" in c.message for c in verdict.causes) else ""
        judged[name] = (refused, tuple(verdict.warnings), advice)
        if refused:
            if old is not None:
                accepted[name] = old  # refused: the stored class stays as it is
        else:
            accepted[name] = item.obj
    return accepted, judged


def _catalogs(before: Snapshot, after: Snapshot, *, policy: Policy) -> tuple[Catalog, Catalog]:
    return (
        build_catalog(before, policy, figures="computed"),
        build_catalog(after, policy, figures="computed"),
    )


def _running(snapshot: Snapshot) -> dict[str, list[str]]:
    users: dict[str, list[str]] = {}
    for vmi in snapshot.vmis:
        for name in vmi.admitted or frozenset(vmi.classes):
            users.setdefault(name, []).append(f"{vmi.namespace}/{vmi.name}")
    return {k: sorted(v) for k, v in users.items()}


def _vm_key(vm: Mapping[str, Any]) -> tuple[str, str]:
    meta = vm.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    namespace, name = meta.get("namespace"), meta.get("name")
    return (
        namespace if isinstance(namespace, str) and namespace else "default",
        name if isinstance(name, str) else "",
    )


def vm_plans(vms: Sequence[Mapping[str, Any]], before: Catalog, *, after: Catalog) -> list[VMPlan]:
    """The VMs whose next start the change refuses or alters, sorted by namespace and name."""
    out: list[VMPlan] = []
    for vm in vms:
        view = template_view(vm)
        if view is None:
            continue
        namespace, name = _vm_key(vm)
        was, will = (
            judge_create(view, namespace, catalog=before),
            judge_create(view, namespace, catalog=after),
        )
        classes = _selected(view)
        if not classes:
            continue
        if will.causes and not was.causes:
            causes = tuple(tenant_cause(c).render() for c in will.causes)
            out.append(VMPlan(namespace, name, "start-refused", classes, causes))
        elif not will.causes and not was.causes and will.operations != was.operations:
            out.append(
                VMPlan(
                    namespace,
                    name,
                    "start-changes",
                    classes,
                    detail="its next VMI gets different GPU entries or tolerations",
                )
            )
    return sorted(out, key=lambda v: (v.namespace, v.name))


def _selected(view: Mapping[str, Any]) -> tuple[str, ...]:
    selection = parse_selection(annotation(view))
    return tuple(dict.fromkeys(e.class_name for e in selection.named))


def inventory(snapshot: Snapshot, vms: Sequence[Mapping[str, Any]]) -> list[InventoryEntry]:
    """VMs and VMIs that request device-plugin names directly (`spec.domain.devices.gpus`),
    with the classes whose resourceName offers each: the tenants to move to classes."""
    offered: dict[str, list[str]] = {}
    for name, record in sorted(snapshot.classes.items()):
        if record.resource_name:
            offered.setdefault(record.resource_name, []).append(name)
    out: list[InventoryEntry] = []
    for vm in vms:
        view = template_view(vm)
        if view is None:
            continue
        namespace, name = _vm_key(vm)
        for device in sorted(_raw_devices(view)):
            out.append(InventoryEntry("VirtualMachine", namespace, name, device,
                                      tuple(offered.get(device, ()))))  # fmt: skip
    for vmi in snapshot.vmis:
        if vmi.classes:
            continue
        for device in sorted(vmi.device_names):
            out.append(InventoryEntry("VirtualMachineInstance", vmi.namespace, vmi.name, device,
                                      tuple(offered.get(device, ()))))  # fmt: skip
    return sorted(out, key=lambda e: (e.namespace, e.kind, e.name, e.device))


def _raw_devices(view: Mapping[str, Any]) -> set[str]:
    spec = view.get("spec")
    domain = spec.get("domain") if isinstance(spec, Mapping) else None
    devices = domain.get("devices") if isinstance(domain, Mapping) else None
    found: set[str] = set()
    for key in ("gpus", "hostDevices"):
        entries = devices.get(key) if isinstance(devices, Mapping) else None
        for entry in entries if isinstance(entries, list) else []:
            device = entry.get("deviceName") if isinstance(entry, Mapping) else None
            if isinstance(device, str) and device:
                found.add(device)
    return found
