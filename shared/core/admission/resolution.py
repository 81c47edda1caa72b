"""What one selection resolves to, and every rule of docs/contract.md section 4 on a CREATE.

:func:`judge_create` runs the rules of :mod:`shared.core.admission.rules` on a VMI (the VMI
admitters, :mod:`shared.core.admission.mutate_vmi` and :mod:`shared.core.admission.validate_vmi`)
or on a VirtualMachine's template (:mod:`shared.core.admission.validate_vm`); what depends on the
selection alone is resolved once per annotation text and catalog (:func:`resolve`).
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any, NamedTuple

from gpuclass.shared.core.admission.licensing import (
    catalog_licensed_classes,
    license_reference_causes,
    own_license_volume_refs,
    selected_licensed_classes,
)
from gpuclass.shared.core.admission.rules import (
    GPUS,
    UnitPlan,
    _is_vgpu,
    annotation,
    capacity_warnings,
    class_causes,
    gpu_operations,
    limit_causes,
    policy_causes,
    quota_warnings,
    raw_request_causes,
)
from gpuclass.shared.core.base import names
from gpuclass.shared.core.base.causes import Cause
from gpuclass.shared.core.base.raw import list_at
from gpuclass.shared.core.model.selection import MAX_SELECTION_BYTES, Selection, parse_selection
from gpuclass.shared.core.status.catalog import Catalog


class Judgement(NamedTuple):
    """Every rule of section 4 on a CREATE: all causes, what an allowed answer carries, and what
    the selection resolves to (rule 6), which the check after every mutation reads back
    (:mod:`shared.core.admission.validate_vmi`)."""

    causes: tuple[Cause, ...]
    operations: tuple[dict[str, Any], ...] = ()
    warnings: tuple[str, ...] = ()
    gpus: tuple[dict[str, Any], ...] | None = None
    """What `spec.domain.devices.gpus` holds once resolved; None without class entries, or while
    a class does not resolve (the request is refused then)."""
    licensed: str | None = None
    """The selected class whose license volume and disk rule 6 adds, if any."""
    gpus_unjudged: bool = False
    """`spec.domain.devices.gpus` holds entries beside classes that were not judged, because a
    class does not resolve (what resolution would write is unknown): a VMI is refused for the
    class; a VM, where that class is only a warning, refuses them itself."""


def wanted_gpus(
    selection: Selection, plan: UnitPlan, *, resolved: bool
) -> list[dict[str, Any]] | None:
    """What `spec.domain.devices.gpus` must hold beside this selection (rule 2).

    An invalid selection, or one past the 1024-unit bound, is never resolved, so any
    entry there is not ours: `[]` (and the entries, whose counts can be huge, are never
    built). While a class cannot be resolved, what it would write is unknown: None.
    """
    if selection.causes or sum(plan.totals.values()) > names.MAX_UNITS_PER_VMI:
        return []
    return plan.gpu_entries() if resolved else None


class Resolution(NamedTuple):
    """What one selection resolves to against one catalog, whatever object carries it: the same
    annotation text gives the same answer until the catalog changes (:func:`resolve`)."""

    licensed: list[str]
    """Classes whose license volume the object may carry (rule 8)."""
    causes: list[Cause]
    """Rule 3's causes, then rule 4's."""
    plan: UnitPlan
    """Units per class, and the classes that resolved (rule 3)."""
    wanted: list[dict[str, Any]] | None
    """What `spec.domain.devices.gpus` must hold (:func:`wanted_gpus`)."""
    tolerations: list[Mapping[str, Any]]
    """Every resolved class's tolerations, in class order, each once."""
    warnings: tuple[str, ...]
    """Rule 7's capacity warnings."""
    vgpu: bool
    """A resolved class is vGPU: rule 5 has something to judge."""


RESOLUTIONS_REMEMBERED = 256
"""Distinct annotations whose resolution is kept per catalog (:func:`remembered`): a platform's
VMs repeat a few selections, so a review usually finds its own there."""
REMEMBERED_UNITS = 64
"""A resolution of more GPU units than this is not kept: its entries are the memory (a thousand
entries per hostile annotation), and no honest VM asks for that many."""

_MEMORIES: dict[int, dict[str, Resolution]] = {}
"""Per live catalog, by identity: its resolutions by annotation text. A catalog never changes once
built, so neither does what follows from it; a change of state builds a new catalog, which starts
with nothing remembered, and a catalog's entry leaves with it (a finalizer)."""


def remembered(catalog: Catalog) -> dict[str, Resolution]:
    """The resolutions remembered for `catalog` (admission's memory, not the catalog's: the status
    layer builds catalogs and knows nothing of it)."""
    key = id(catalog)
    memory = _MEMORIES.get(key)
    if memory is None:
        memory = _MEMORIES[key] = {}
        weakref.finalize(catalog, _MEMORIES.pop, key, None)
    return memory


def resolve(raw: str | None, selection: Selection, *, catalog: Catalog) -> Resolution:
    """The namespace-free part of rules 3, 4, 6, 7 and 8 for the selection parsed from `raw`,
    remembered per annotation text and catalog (at most :data:`RESOLUTIONS_REMEMBERED` per
    catalog, each of at most :data:`REMEMBERED_UNITS` units; a full memory starts over)."""
    memory = remembered(catalog)
    key = raw if raw is not None and len(raw) <= MAX_SELECTION_BYTES else None
    if key is not None:
        known = memory.get(key)
        if known is not None:
            return known
    resolution = _resolve(selection, catalog)
    if key is not None and sum(resolution.plan.totals.values()) <= REMEMBERED_UNITS:
        if len(memory) >= RESOLUTIONS_REMEMBERED:
            memory.clear()
        memory[key] = resolution
    return resolution


def _resolve(selection: Selection, catalog: Catalog) -> Resolution:
    licensed = (
        selected_licensed_classes(selection.named, catalog)
        if selection.readable
        else catalog_licensed_classes(catalog)
    )
    if not selection.has_classes:
        return Resolution(licensed, [], UnitPlan({}, {}), None, [], (), False)
    offers, unresolved = class_causes(selection.named, catalog)
    totals, over_limit = limit_causes(selection.named, offers)
    plan = UnitPlan(totals, offers)
    tolerations: list[Mapping[str, Any]] = []
    for offer in offers.values():
        tolerations += [t for t in offer.record.tolerations if t not in tolerations]
    return Resolution(
        licensed,
        unresolved + over_limit,
        plan,
        wanted_gpus(selection, plan, resolved=not unresolved),
        tolerations,
        tuple(capacity_warnings(plan)),
        any(_is_vgpu(offer) for offer in offers.values()),
    )


def judge_create(obj: Mapping[str, Any], namespace: str, *, catalog: Catalog) -> Judgement:
    """Rules 1 to 8 on `obj` (a VMI, or a VM template of the same shape) in `namespace`.

    Every rule runs on what can be judged: the class rules (3, 4, 5) on each entry
    whose className is valid even when its count is not (a sum of the valid counts is
    a lower bound). An annotation that cannot be read (not JSON, over the caps of
    :mod:`shared.core.model.selection`) leaves only the checks that do not depend on it: raw vGPU
    requests need entitlement (rule 5), and a license copy named anywhere but the
    exact license volume of a licensed class is refused (rule 8). What depends on the selection
    alone comes from :func:`resolve`; what depends on the object is judged here, every time.
    """
    raw = annotation(obj)
    selection = parse_selection(raw)
    causes = list(selection.causes)
    causes += raw_request_causes(
        obj, catalog, with_classes=selection.has_classes, namespace=namespace
    )
    resolution = resolve(raw, selection, catalog=catalog)
    licensed = resolution.licensed
    license_causes = license_reference_causes(obj, own_license_volume_refs(obj, licensed))
    if not selection.has_classes:
        return Judgement(tuple(causes + license_causes))
    causes += resolution.causes
    if resolution.vgpu:
        causes += policy_causes(
            obj, namespace, entries=selection.named, offers=resolution.plan.offers, catalog=catalog
        )
    causes += license_causes
    wanted = resolution.wanted
    if wanted:  # the remembered entries stay in memory: the answer carries its own copies
        wanted = [dict(entry) for entry in wanted]
    own_license = licensed[0] if licensed else None
    operations, op_causes = gpu_operations(
        obj, resolution.tolerations, licensed=own_license, wanted=wanted
    )
    causes += op_causes
    return Judgement(
        tuple(causes),
        tuple(operations),
        resolution.warnings + tuple(quota_warnings(resolution.plan, namespace, catalog=catalog)),
        gpus=None if wanted is None else tuple(wanted),
        licensed=own_license,
        gpus_unjudged=wanted is None and bool(list_at(obj, *GPUS)),
    )
