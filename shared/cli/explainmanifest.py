"""`gpuclass explain --manifest`: can this VM start now, in full (docs/decisions.md, "Can this VM
start, in full").

For a VM or VMI manifest, admission's refusals first (the rules themselves, entitlement noted),
then every class of its selection at its total count (:func:`shared.cli.explain.explain_class`),
then the nodes where all of them fit at once and where the VM's launcher Pod, rendered as
KubeVirt renders it (:mod:`shared.core.model.launcher`), fits too, and the namespace's
ResourceQuota headroom; the answer says which of admission, class, quota or capacity stops the
VM. Pure: a snapshot in, a :class:`ManifestExplanation` out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

from gpuclass.shared.cli.explain import (
    ENTITLEMENT_CODES,
    Explanation,
    admission_catalog,
    count_nodes,
    entitlement_notes,
    explain_class,
)
from gpuclass.shared.core.admission.resolution import judge_create
from gpuclass.shared.core.admission.vmtemplate import template_view, tenant_cause
from gpuclass.shared.core.base import names
from gpuclass.shared.core.base.causes import Cause
from gpuclass.shared.core.base.k8s import tolerates_all
from gpuclass.shared.core.base.raw import dict_at
from gpuclass.shared.core.model.detail import CPU, EPHEMERAL, MEMORY, headroom
from gpuclass.shared.core.model.launcher import LauncherAsk, launcher_ask, launcher_misfits
from gpuclass.shared.core.model.selection import ClassEntry, parse_selection
from gpuclass.shared.core.model.snapshot import Snapshot
from gpuclass.shared.core.status.availability import UsageIndex
from gpuclass.shared.core.status.capacity import node_blocker
from gpuclass.shared.core.status.catalog import Catalog


@dataclass(frozen=True, slots=True)
class VMNodeRow:
    """A node where every class of the VM has its units free: whether the rest of the launcher
    Pod (selector, affinity, CPU, memory, ephemeral storage) fits there too, and why not."""

    node: str
    fits: bool
    reasons: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class QuotaLine:
    """One ResourceQuota key the launcher Pod's requests count against, and whether it has room."""

    quota: str
    key: str
    hard: str
    used: str
    wanted: str
    enough: bool


Stop = Literal["admission", "class", "quota", "capacity"]
"""What stops the VM from starting now (docs/decisions.md, "Can this VM start, in full")."""


@dataclass(frozen=True, slots=True)
class ManifestExplanation:
    """A VM or VMI manifest: each class of its selection explained, and the joint fit."""

    kind: str
    name: str
    classes: tuple[Explanation, ...]
    problems: tuple[str, ...]
    """Why admission refuses the VM (docs/contract.md 4.1-4.8, entitlement aside), each with
    its path as the tenant wrote it."""
    joint_fits: int
    can_start: bool
    answer: str
    blocking: tuple[str, ...] = ()
    """The classes that keep the VM from starting now."""
    notes: tuple[str, ...] = ()
    """What explain does not judge (entitlement, docs/contract.md 4.5)."""
    stopped_by: Stop | None = None
    launcher: LauncherAsk | None = None
    """What the VM's launcher Pod asks of a node, rendered as KubeVirt would (None: the cluster
    was read without node detail, or admission refuses the VM)."""
    vm_rows: tuple[VMNodeRow, ...] = ()
    quota: tuple[QuotaLine, ...] = ()
    vm_notes: tuple[str, ...] = ()
    """What the launcher rendering and the quota check leave out."""


def selection_of(manifest: Mapping[str, Any]) -> tuple[str, str, str | None]:
    """(kind, name, raw annotation): a VM's selection is on its template (docs/contract.md 2)."""
    kind = str(manifest.get("kind") or "")
    meta = dict_at(manifest.get("metadata"))
    holder = meta
    if kind == "VirtualMachine":
        holder = dict_at(dict_at(dict_at(manifest.get("spec")).get("template")).get("metadata"))
    raw = dict_at(holder.get("annotations")).get(names.SELECTION_ANNOTATION)
    name = meta.get("name")
    return kind, str(name or "(no name)"), raw if isinstance(raw, str) else None


def unit_nodes(snapshot: Snapshot, index: UsageIndex, *, wanted: Mapping[str, int]) -> list[str]:
    """Nodes where every selected class has its count free at once, under all their tolerations,
    that KubeVirt's launcher can land on (:func:`node_blocker`), by name."""
    records = [snapshot.classes[n] for n in wanted if n in snapshot.classes]
    if len(records) != len(wanted) or any(r.resource_name is None for r in records):
        return []
    tolerations = tuple(t for r in records for t in r.tolerations)
    needs = snapshot.launcher_devices
    found = []
    for node in snapshot.nodes:
        if node_blocker(node, needs) is not None or not tolerates_all(tolerations, node.taints):
            continue
        if all(
            node.allocatable.get(r.resource_name or "", 0)
            - index.used.get(r.resource_name or "", {}).get(node.name, 0)
            >= wanted[r.name]
            for r in records
        ):
            found.append(node.name)
    return sorted(found)


def resolved_view(
    manifest: Mapping[str, Any], snapshot: Snapshot, *, wanted: Mapping[str, int]
) -> dict[str, Any]:
    """The VMI the manifest becomes after admission: its GPU entries, one per unit of each class
    (docs/contract.md 4.6), beside whatever else the tenant wrote."""
    view = dict(judged_view(manifest))
    spec = dict(dict_at(view.get("spec")))
    domain = dict(dict_at(spec.get("domain")))
    devices = dict(dict_at(domain.get("devices")))
    gpus: list[dict[str, Any]] = []
    for name, units in wanted.items():
        record = snapshot.classes.get(name)
        resource = record.resource_name if record is not None else None
        gpus += [{"name": f"gpu{len(gpus) + i + 1}", "deviceName": resource} for i in range(units)]
    devices["gpus"] = gpus
    domain["devices"] = devices
    spec["domain"] = domain
    view["spec"] = spec
    return view


def quota_lines(snapshot: Snapshot, namespace: str, *, ask: LauncherAsk) -> tuple[QuotaLine, ...]:
    """The namespace's ResourceQuota keys the launcher Pod's requests count against (Kubernetes'
    quota admission refuses the Pod at creation when any has less left than it asks)."""
    wanted: dict[str, Decimal] = {
        CPU: Decimal(ask.cpu_millis) / 1000,
        MEMORY: Decimal(ask.memory),
        EPHEMERAL: Decimal(ask.ephemeral_storage),
        **{k: Decimal(v) for k, v in ask.devices.items()},
    }
    found = headroom(snapshot.quotas.get(namespace, []), wanted)
    return tuple(
        QuotaLine(
            room.quota,
            room.key,
            _amount(room.hard),
            _amount(room.used),
            _amount(amount),
            room.left >= amount,
        )
        for room, amount in found
    )


def _amount(value: Decimal) -> str:
    """A quantity as short as it is exact: whole numbers plain, else millis."""
    if value == value.to_integral_value():
        return str(int(value))
    return f"{int((value * 1000).to_integral_value())}m"


def vm_rows(
    snapshot: Snapshot, nodes: Sequence[str], *, ask: LauncherAsk | None
) -> tuple[VMNodeRow, ...]:
    """Each node that holds the VM's GPUs, judged for the rest of the launcher Pod."""
    detail = snapshot.detail
    if detail is None or ask is None:
        return ()
    rows = []
    for name in nodes:
        node = detail.nodes.get(name)
        reasons = launcher_misfits(ask, node, used=detail.used.get(name, {})) if node else ()
        rows.append(VMNodeRow(name, not reasons, reasons))
    return tuple(rows)


def judged_view(manifest: Mapping[str, Any]) -> Mapping[str, Any]:
    """What admission judges: a VM's template as the VMI it becomes (as shared/core/admission/validate_vm.py), or the VMI."""
    if manifest.get("kind") != "VirtualMachine":
        return manifest
    return template_view(manifest) or {"metadata": {}, "spec": {}}


def manifest_refusals(manifest: Mapping[str, Any], catalog: Catalog) -> tuple[Cause, ...]:
    """Every cause admission gives the VMI of `manifest` (docs/contract.md 4.1-4.8) but
    entitlement, each field as the tenant wrote it (a VM's as shared/core/admission/validate_vm.py names them)."""
    namespace = str(dict_at(manifest.get("metadata")).get("namespace") or "default")
    judged = judge_create(judged_view(manifest), namespace, catalog=catalog)
    vm = manifest.get("kind") == "VirtualMachine"
    return tuple(
        tenant_cause(c) if vm else c for c in judged.causes if c.code not in ENTITLEMENT_CODES
    )


def explain_manifest(
    manifest: Mapping[str, Any],
    snapshot: Snapshot,
    *,
    license_namespace: str = names.DEFAULT_LICENSE_NAMESPACE,
    now: str = "",
) -> ManifestExplanation:
    """The answer for a VM or VMI manifest: admission's refusals first (capacity cannot help a VM
    the webhook refuses), then each selected class at its total count, then whether one node
    holds all of them at once. `now` is only for the conditions' timestamps."""
    kind, name, raw = selection_of(manifest)
    catalog = admission_catalog(snapshot, license_namespace)
    causes = manifest_refusals(manifest, catalog)
    problems = tuple(f"{c.field}: {c.message}" for c in causes)
    selection = parse_selection(raw)
    if selection.causes:
        return ManifestExplanation(
            kind, name, (), problems, 0, False, "the selection is invalid: admission refuses it"
        )
    wanted = _units_per_class(selection.entries)
    refused = "admission refuses the VM: " + "; ".join(c.message for c in causes)
    if not wanted:
        if problems:
            return ManifestExplanation(kind, name, (), problems, 0, False, refused)
        return ManifestExplanation(
            kind, name, (), (), 0, True, "the manifest selects no GPU class: nothing to wait for"
        )
    index = UsageIndex.build(snapshot)
    classes = tuple(
        explain_class(
            snapshot,
            c,
            count=n,
            license_namespace=license_namespace,
            now=now,
            index=index,
            catalog=catalog,
        )
        for c, n in wanted.items()
    )
    holding = unit_nodes(snapshot, index, wanted=wanted)
    namespace = str(dict_at(manifest.get("metadata")).get("namespace") or "default")
    ask = (  # a VM admission refuses never gets a launcher
        launcher_ask(resolved_view(manifest, snapshot, wanted=wanted), snapshot.kubevirt)
        if snapshot.detail is not None and not problems
        else None
    )
    rows = vm_rows(snapshot, holding, ask=ask)
    together = sum(1 for r in rows if r.fits) if ask is not None else len(holding)
    quota = quota_lines(snapshot, namespace, ask=ask) if ask is not None else ()
    notes = entitlement_notes(tuple(wanted), catalog)
    vm_notes = _rendering_notes(manifest, ask)
    if snapshot.detail is not None and snapshot.detail.quotas_unread:
        vm_notes += (f"the quota was not checked: you may not list ResourceQuotas in {namespace}",)
    blocking, answer, stop = _verdict(
        wanted,
        classes,
        refused=refused if problems else None,
        short_quota=[q for q in quota if not q.enough],
        together=together,
        holding=holding,
        rows=rows if ask is not None else None,
    )
    return ManifestExplanation(
        kind,
        name,
        classes,
        problems,
        together,
        not blocking,
        answer,
        blocking,
        notes,
        stop,
        ask,
        rows,
        quota,
        vm_notes,
    )


def _units_per_class(entries: Iterable[ClassEntry]) -> dict[str, int]:
    """Each selected class's total units, in the order the selection first names it."""
    wanted: dict[str, int] = {}
    for entry in entries:
        wanted[entry.class_name] = wanted.get(entry.class_name, 0) + entry.units
    return wanted


def _verdict(
    wanted: Mapping[str, int],
    classes: Sequence[Explanation],
    *,
    refused: str | None,
    short_quota: Sequence[QuotaLine],
    together: int,
    holding: Sequence[str],
    rows: Sequence[VMNodeRow] | None,
) -> tuple[tuple[str, ...], str, Stop | None]:
    """(the classes that block, the answer, what stops the VM), checked in the order of
    docs/decisions.md, "Can this VM start, in full": admission, class, quota, capacity.
    `rows` is None when the launcher was not rendered (no node detail)."""
    everything = tuple(wanted)
    blocked = tuple(e.class_name for e in classes if e.class_blocked)
    if refused is not None:
        # Admission refuses the VM as a whole (one vGPU class, 1024 units, a hand-mounted
        # license...): said first, whatever the nodes have free (docs/contract.md 7.6).
        return blocked or everything, refused, "admission"
    if blocked:
        return blocked, "blocked by " + ", ".join(blocked), "class"
    if short_quota:
        first = short_quota[0]
        return (
            everything,
            f"the namespace's quota stops it: ResourceQuota {first.quota} has {first.key} "
            f"{first.used} used of {first.hard}, the launcher Pod asks {first.wanted} more "
            "(Kubernetes refuses the Pod at creation; the VM never starts)",
            "quota",
        )
    if together:
        # One node has every class's units, under all their tolerations, and room for the rest
        # of the launcher: a class that alone found no node (its taint tolerated by another
        # class of the VM) does not block.
        return (), f"the VM can start on {count_nodes(together)} now", None
    if holding and rows:
        first_row = rows[0]
        return (
            everything,
            f"{count_nodes(len(holding))} {'has' if len(holding) == 1 else 'have'} the GPUs free, "
            f"but the VM's launcher fits on none: {first_row.node}: {'; '.join(first_row.reasons)}",
            "capacity",
        )
    short = tuple(e.class_name for e in classes if not e.can_start)
    if short:
        return short, "blocked by " + ", ".join(short), "capacity"
    return (
        everything,
        "each class has room, but no node has all of them free at once: the VM waits",
        "capacity",
    )


def _rendering_notes(manifest: Mapping[str, Any], ask: LauncherAsk | None) -> tuple[str, ...]:
    if ask is None:
        return ()
    left_out = list(ask.unrendered)
    if manifest.get("kind") == "VirtualMachine" and dict_at(manifest.get("spec")).get(
        "instancetype"
    ):
        left_out.append("instance types")
    if not left_out:
        return ()
    return (
        "the launcher's CPU and memory leave out "
        + ", ".join(left_out)
        + ": the VM may need more than shown",
    )
