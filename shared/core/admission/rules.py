"""The rules of a tenant's selection (docs/contract.md section 4), one function per rule.

Each function judges one rule on an object that carries a selection and returns its causes
(or, for rule 6, the patch operations, and for rule 7 and the quota, warnings).
:func:`shared.core.admission.resolution.judge_create` runs them all, for the VMI admitter
(:mod:`shared.core.admission.mutate_vmi`) and for a VirtualMachine's template
(:mod:`shared.core.admission.validate_vm`) alike, and remembers what depends on the selection
alone. Rule 6 emits narrow patches: the GPU entries, the class tolerations and the license
volume and disk; applying its result again yields nothing (webhooks are reinvoked). The
license volume itself and rule 8 are :mod:`shared.core.admission.licensing`. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from gpuclass.shared.core.admission.licensing import VOLUMES, license_disk, license_volume
from gpuclass.shared.core.admission.patches import PatchBuilder
from gpuclass.shared.core.base import names
from gpuclass.shared.core.base.causes import Cause, CauseCode, forbidden, invalid
from gpuclass.shared.core.base.fieldpath import FieldPath
from gpuclass.shared.core.base.raw import dig, list_at
from gpuclass.shared.core.model.selection import (
    MAX_INT_DIGITS,
    SELECTION_PATH,
    ClassEntry,
    entry_path,
)
from gpuclass.shared.core.status.catalog import Catalog, Offer

GPUS = ("spec", "domain", "devices", "gpus")
HOST_DEVICES = ("spec", "domain", "devices", "hostDevices")
DEVICES = FieldPath.of("spec", "domain", "devices")
DISKS = ("spec", "domain", "devices", "disks")
TOLERATIONS = ("spec", "tolerations")


def annotation(obj: object) -> str | None:
    """The selection annotation as written, None when the object has none (or a non-string one):
    what the parser reads and what UPDATE compares old with new."""
    value = dig(obj, "metadata", "annotations", names.SELECTION_ANNOTATION)
    return value if isinstance(value, str) else None


class UnitPlan(NamedTuple):
    """What the selection resolves to: per class in first-appearance order, its total units."""

    totals: dict[str, int]
    offers: dict[str, Offer]

    def gpu_entries(self) -> list[dict[str, Any]]:
        """The `spec.domain.devices.gpus` entries of rule 4.6: per class in order, `total` entries
        of its resourceName, named gpu1..gpuN across the VMI; classes that did not resolve are
        skipped (the request is refused anyway)."""
        entries: list[dict[str, Any]] = []
        for name, total in self.totals.items():
            if name not in self.offers:  # unresolved: the request is refused anyway
                continue
            resource = self.offers[name].record.resource_name
            for _ in range(total):
                entries.append({"name": f"gpu{len(entries) + 1}", "deviceName": resource})
        return entries


def class_causes(
    entries: tuple[ClassEntry, ...], catalog: Catalog
) -> tuple[dict[str, Offer], list[Cause]]:
    """Rule 3: each selected class exists, is not deleting, owns its resource and is permitted.

    One look-up and at most one cause per class, at its first entry: repeating a class
    repeats no work.
    """
    offers: dict[str, Offer] = {}
    causes: list[Cause] = []
    judged: set[str] = set()
    for entry in entries:
        if entry.class_name in judged:
            continue
        judged.add(entry.class_name)
        path = entry_path(entry.position, "className")
        offer = catalog.offers.get(entry.class_name)
        if offer is None:
            causes.append(
                forbidden(
                    path,
                    f"class {entry.class_name} is not in the catalog (kubectl get gpuclasses)",
                    code=CauseCode.CLASS_NOT_FOUND,
                )
            )
        elif offer.record.spec is None:
            why = offer.record.problems[0] if offer.record.problems else "unreadable"
            causes.append(
                forbidden(
                    path,
                    f"class {entry.class_name} has an invalid spec ({why}); the hoster must fix it",
                    code=CauseCode.CLASS_INVALID,
                )
            )
        elif offer.record.deleting:
            causes.append(
                forbidden(
                    path,
                    f"class {entry.class_name} is being deleted; pick another class",
                    code=CauseCode.CLASS_DELETING,
                )
            )
        elif offer.conflict_with:
            causes.append(
                forbidden(
                    path,
                    f"class {entry.class_name} is unavailable: class {offer.conflict_with} already uses its resource",
                    code=CauseCode.RESOURCE_NAME_CONFLICT,
                )
            )
        elif not offer.permitted:
            causes.append(
                forbidden(
                    path,
                    f"class {entry.class_name} is unavailable: its resource is not permitted by KubeVirt",
                    code=CauseCode.RESOURCE_NAME_NOT_PERMITTED,
                )
            )
        else:
            offers[entry.class_name] = offer
    return offers, causes


def _units(total: int) -> str:
    """A count for a message; beyond what the parser keeps exactly (see selection), a bound."""
    return str(total) if total < 10**MAX_INT_DIGITS else f"more than 10^{MAX_INT_DIGITS}"


def _is_vgpu(offer: Offer) -> bool:
    return offer.record.spec is not None and offer.record.spec.mode == "vgpu"


def limit_causes(
    entries: tuple[ClassEntry, ...], offers: Mapping[str, Offer]
) -> tuple[dict[str, int], list[Cause]]:
    """Rule 4: per-class totals within the effective maxCount, all within 1024, one vGPU class.

    An entry whose count is invalid counts 0 (:class:`shared.core.model.selection.Selection`): the
    totals are then lower bounds, so a limit they exceed is exceeded whatever it says.
    """
    totals: dict[str, int] = {}
    for entry in entries:
        totals[entry.class_name] = totals.get(entry.class_name, 0) + entry.units
    causes: list[Cause] = []
    grand = sum(totals.values())
    if grand > names.MAX_UNITS_PER_VMI:
        causes.append(
            invalid(
                SELECTION_PATH,
                f"requests {_units(grand)} GPU units; at most {names.MAX_UNITS_PER_VMI} per VMI",
                code=CauseCode.TOO_MANY_UNITS,
            )
        )
    for name, total in totals.items():
        offer = offers.get(name)
        limit = offer.effective_max_count() if offer else None
        if limit is not None and total > limit:
            causes.append(
                invalid(
                    SELECTION_PATH,
                    f"class {name}: {_units(total)} units requested, at most {limit} per VM",
                    code=CauseCode.MAX_COUNT_EXCEEDED,
                )
            )
    vgpu = [n for n in totals if (o := offers.get(n)) and _is_vgpu(o)]
    if len(vgpu) > 1:
        causes.append(
            invalid(
                SELECTION_PATH,
                f"a VM may take vGPUs from only one class (got {', '.join(vgpu)})",
                code=CauseCode.MULTIPLE_VGPU_CLASSES,
            )
        )
    return totals, causes


def is_worker_pool(labels: object) -> bool:
    """A Cluster API worker: any of the labels cluster-api-provider-kubevirt writes
    (:data:`shared.core.base.names.WORKER_POOL_LABELS`)."""
    return isinstance(labels, dict) and any(
        isinstance(labels.get(label), str) for label in names.WORKER_POOL_LABELS
    )


def policy_causes(
    obj: Mapping[str, Any],
    namespace: str,
    *,
    entries: tuple[ClassEntry, ...],
    offers: Mapping[str, Offer],
    catalog: Catalog,
) -> list[Cause]:
    """Rule 5 for class entries: vGPU entitlement, and passthrough only for worker pools."""
    causes: list[Cause] = []
    vgpu = [e for e in entries if (o := offers.get(e.class_name)) and _is_vgpu(o)]
    if not vgpu:  # passthrough only: nothing to judge
        return causes
    worker_pool = is_worker_pool(dig(obj, "metadata", "labels"))
    first = {e.class_name: e for e in reversed(vgpu)}  # one cause per class, at its first entry
    for entry in sorted(first.values(), key=lambda e: e.position):
        path = entry_path(entry.position, "className")
        if worker_pool:
            causes.append(
                forbidden(
                    path,
                    f"class {entry.class_name} is vGPU; worker pools take passthrough classes only",
                    code=CauseCode.WORKER_POOL_VGPU,
                )
            )
        problem = catalog.vgpu_problem(namespace)
        if problem:
            causes.append(forbidden(path, problem, code=CauseCode.NOT_ENTITLED))
    return causes


def raw_request_causes(
    obj: Mapping[str, Any], catalog: Catalog, *, with_classes: bool, namespace: str
) -> list[Cause]:
    """Rule 2 (no raw request of a catalog resource beside class entries) and rule 5 for raw entries.

    A raw entry naming a vGPU (:attr:`Catalog.vgpu_resources`: a vgpu class's resource, or any
    mediated device KubeVirt permits, classed or not) needs entitlement. Beside class entries a
    catalog resource is already invalid input (rule 2); a mediated device no class names is not,
    so there it is judged by rule 5 too.
    """
    causes: list[Cause] = []
    problem: str | None = None
    checked_entitlement = False

    def check(path: FieldPath, resource: object) -> None:
        nonlocal problem, checked_entitlement
        if not isinstance(resource, str):
            return
        if with_classes and resource in catalog.resources:
            causes.append(
                invalid(
                    path,
                    f"{resource} is a catalog resource: do not add raw GPU requests beside class entries",
                    code=CauseCode.RAW_REQUEST_BESIDE_CLASSES,
                )
            )
        elif resource in catalog.vgpu_resources:
            if not checked_entitlement:
                problem = catalog.vgpu_problem(namespace)
                checked_entitlement = True
            if problem:
                causes.append(
                    forbidden(
                        path,
                        f"{resource} is a vGPU resource: {problem}",
                        code=CauseCode.NOT_ENTITLED,
                    )
                )

    for i, dev in enumerate(list_at(obj, *HOST_DEVICES)):
        check(DEVICES.child("hostDevices").index(i).child("deviceName"), dig(dev, "deviceName"))
    if not with_classes:
        for i, gpu in enumerate(list_at(obj, *GPUS)):
            check(DEVICES.child("gpus").index(i).child("deviceName"), dig(gpu, "deviceName"))
    for section in ("requests", "limits"):
        resources = dig(obj, "spec", "domain", "resources", section)
        if isinstance(resources, dict):
            for key in resources:
                check(FieldPath.of("spec", "domain", "resources", section).key(key), key)
    return causes


def gpu_operations(
    obj: Mapping[str, Any],
    tolerations: list[Mapping[str, Any]],
    *,
    licensed: str | None,
    wanted: list[dict[str, Any]] | None,
) -> tuple[list[dict[str, Any]], list[Cause]]:
    """Rule 6: GPU entries, the classes' `tolerations` and the license volume/disk, as narrow appends.

    `wanted` is what `spec.domain.devices.gpus` must hold (:func:`wanted_gpus`): the
    resolved entries, `[]` when resolution never writes any, or None when that is
    unknown (a class could not be resolved: the request is refused anyway, and
    existing `gpus` are not judged). The reserved license names are judged either
    way, so that every input cause is reported and the code is right (422).
    """
    builder = PatchBuilder(obj)
    causes: list[Cause] = []
    existing = list_at(obj, *GPUS)
    if not existing:
        builder.append(GPUS, wanted or [])
    elif wanted is not None and existing != wanted:
        causes.append(raw_gpus_beside_classes())
    present = list_at(obj, *TOLERATIONS)
    for tol in tolerations:
        if tol not in present:
            builder.append(TOLERATIONS, [tol])  # one operation each, as rule 6 always wrote them
    if licensed:
        causes += _append_named(builder, VOLUMES, item=license_volume(licensed))
        causes += _append_named(builder, DISKS, item=license_disk())
    return builder.operations, causes


def raw_gpus_beside_classes() -> Cause:
    """Rule 2: `spec.domain.devices.gpus` beside class entries holds what we did not write."""
    return invalid(
        FieldPath.of("spec", "domain", "devices", "gpus"),
        "must be empty when GPU classes are selected: the admission integration adds the entries",
        code=CauseCode.RAW_REQUEST_BESIDE_CLASSES,
    )


def _append_named(
    builder: PatchBuilder, path: tuple[str, ...], *, item: dict[str, Any]
) -> list[Cause]:
    """Add the license volume or disk once; a different item of that name is a clash, and a
    value there that is not a list (the schema is checked only after mutation) is refused."""
    where = FieldPath.of(*path)
    present = builder.get(path)
    if present is not None and not isinstance(present, list):
        return [invalid(where, "must be a list: the class licence is added to it")]
    for i, existing in enumerate(present or ()):
        if isinstance(existing, dict) and existing.get("name") == item["name"]:
            if existing == item:
                return []
            return [
                invalid(
                    where.index(i),
                    f"the name {item['name']} is reserved for the class licence",
                    code=CauseCode.RESERVED_NAME,
                )
            ]
    builder.append(path, [item])
    return []


def capacity_warnings(plan: UnitPlan) -> list[str]:
    """Rule 7: a shortage is a warning, not a refusal; the VM waits for scheduling."""
    warnings = []
    for name, total in plan.totals.items():
        if name not in plan.offers:  # unresolved: rule 4.3 already names it
            continue
        free = plan.offers[name].max_free_per_node
        if free is not None and total > free:
            warnings.append(f"class {name}: no node has {total} free units now; the VM will wait")
    return warnings


def quota_warnings(plan: UnitPlan, namespace: str, *, catalog: Catalog) -> list[str]:
    """Quota is a warning too, never a refusal: Kubernetes refuses the launcher Pod over the
    namespace's ResourceQuota, and the VM does not start until the quota has room
    (docs/decisions.md, "Can this VM start, in full")."""
    left = catalog.quota_left.get(namespace)
    if not left:
        return []
    warnings = []
    for name, total in plan.totals.items():
        offer = plan.offers.get(name)
        resource = offer.record.resource_name if offer is not None else None
        room = left.get(f"requests.{resource}") if resource else None
        if room is not None and total > room:
            warnings.append(
                f"class {name}: the namespace's quota has {room} units left, the VM needs {total}; "
                "it will not start until the quota has room"
            )
    return warnings
