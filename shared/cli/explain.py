"""`gpuclass explain`: can a VM needing N units of a class start now, node by node, and why not.

Pure: a snapshot in, an :class:`Explanation` out; the CLI (`shared/cli/explaincmd.py`)
prints it. The node verdicts come from :func:`shared.core.status.capacity.judge_node` and the
class's condition from :func:`shared.core.status.availability.compute_status`, the functions
the reconciler writes status with, so `explain` and `kubectl get gpuc -o wide`
always tell the same story. What admission would refuse outright is said first, by
the admission rules themselves (:mod:`shared.core.admission.rules`: 4.3 and 4.4 for a class and
count): capacity does not matter for a VM that is never created, and explain can never call
startable a VM the webhook refuses.

A VM or VMI manifest is explained in full by :mod:`shared.cli.explainmanifest`, which calls
:func:`explain_class` for every class of its selection.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from gpuclass.shared.core.admission.rules import class_causes, limit_causes
from gpuclass.shared.core.base import names
from gpuclass.shared.core.base.k8s import Taint
from gpuclass.shared.core.model.selection import ClassEntry
from gpuclass.shared.core.model.snapshot import Snapshot
from gpuclass.shared.core.status.availability import (
    UsageIndex,
    compute_status,
    conflict_winners,
    survey,
)
from gpuclass.shared.core.status.capacity import NodeFit, Survey, judge_node
from gpuclass.shared.core.status.catalog import Catalog, Policy, build_catalog
from gpuclass.shared.core.status.schedulable import exclusions

RowVerdict = Literal[
    "fits",
    "tooFewFree",
    "noFreeUnits",
    "noVirtHandler",
    "notReady",
    "cordoned",
    "virtHandlerNotReady",
    "noKubeVirtDevices",
    "untolerated",
    "noUnits",
]
_RANK = {v: i for i, v in enumerate(get_args(RowVerdict))}


@dataclass(frozen=True, slots=True)
class NodeRow:
    """One line of the node table: the node, its free and allocatable units of the class's resource,
    and the verdict with its reason (the contract's node verdicts of 6.8, with `fits` and
    `tooFewFree` split by the VM's count)."""

    node: str
    free: int
    allocatable: int
    verdict: RowVerdict
    reason: str


@dataclass(frozen=True, slots=True)
class Explanation:
    """One class for a VM needing `count` units: the node table and a one-line answer."""

    class_name: str
    count: int
    resource: str | None
    rows: tuple[NodeRow, ...]
    fits: int
    """Nodes where a VM needing `count` units can start now."""
    can_start: bool
    answer: str
    condition: Mapping[str, Any] | None = None
    """The class's Schedulable condition as the reconciler would write it (None: no class)."""
    class_blocked: bool = False
    """Admission refuses the VM, or the class is not ready: no node can help."""
    refusals: tuple[str, ...] = ()
    """Why admission refuses the VM (docs/contract.md 4.3, 4.4), in the rules' own words."""
    notes: tuple[str, ...] = ()
    """What explain does not judge (entitlement, docs/contract.md 4.5)."""


def _taint(t: Taint) -> str:
    return f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}"


def _row(fit: NodeFit, count: int) -> NodeRow:
    verdict: RowVerdict
    if fit.verdict == "withFree":
        verdict = "fits" if fit.free >= count else "tooFewFree"
        reason = f"{fit.free} free" if verdict == "fits" else f"{fit.free} free, needs {count}"
    else:
        verdict = fit.verdict
        reason = {
            "noFreeUnits": "every unit is in use",
            "noVirtHandler": "not a KubeVirt node: no virt-handler (no kubevirt.io/schedulable label)",
            "notReady": "node is not Ready",
            "cordoned": "node is cordoned (spec.unschedulable)",
            "virtHandlerNotReady": "virt-handler not ready: kubevirt.io/schedulable=false",
            "noKubeVirtDevices": "no " + ", ".join(fit.missing),
            "untolerated": "untolerated taint " + ", ".join(_taint(t) for t in fit.taints),
            "noUnits": "lists the resource at 0 (device plugin down or devices unhealthy?)",
        }[fit.verdict]
    eligible = fit.verdict in ("withFree", "noFreeUnits")
    return NodeRow(fit.name, fit.free if eligible else 0, fit.allocatable, verdict, reason)


def _units(n: int) -> str:
    return f"{n} unit" if n == 1 else f"{n} units"


def count_nodes(n: int) -> str:
    """`1 node`, `3 nodes`: a count of nodes in an answer."""
    return f"{n} node" if n == 1 else f"{n} nodes"


ENTITLEMENT_CODES = frozenset({"NotEntitled"})
"""Causes explain does not judge: entitlement (docs/contract.md 4.5) depends on the platform
setting and on the namespace the VM is created in, which explain does not know (a tenant cannot
list Namespaces, and the setting lives in the webhook). Explain notes it instead (docs/decisions.md)."""


def admission_catalog(snapshot: Snapshot, license_namespace: str) -> Catalog:
    """The catalog admission would judge with, its figures computed from the snapshot."""
    policy = Policy(vgpu_entitled=False, license_namespace=license_namespace)
    return build_catalog(snapshot, policy, figures="computed")


def refusals(name: str, count: int, *, catalog: Catalog) -> tuple[str, ...]:
    """Why admission would refuse a VM selecting `count` units of one class (4.3, 4.4).

    The rules themselves (:func:`shared.core.admission.rules.class_causes` and
    :func:`shared.core.admission.rules.limit_causes`), run on a one-entry selection, so explain and
    admission never disagree about a refusal.
    """
    entries = (ClassEntry(name, count, 0),)
    offers, unusable = class_causes(entries, catalog)
    _, over = limit_causes(entries, offers)
    return tuple(c.message for c in (*unusable, *over))


def entitlement_notes(classes: Sequence[str], catalog: Catalog) -> tuple[str, ...]:
    """A line for each selected vGPU class: entitlement is judged at admission, not here."""
    return tuple(
        f"class {n} is vGPU: admission also needs the VM's namespace to be entitled "
        "(docs/contract.md 4.5), which explain does not check"
        for n in classes
        if (o := catalog.offers.get(n)) and o.record.spec and o.record.spec.mode == "vgpu"
    )


def explain_class(
    snapshot: Snapshot,
    name: str,
    *,
    count: int = 1,
    license_namespace: str = names.DEFAULT_LICENSE_NAMESPACE,
    now: str = "",
    index: UsageIndex | None = None,
    catalog: Catalog | None = None,
) -> Explanation:
    """Whether a VM needing `count` units of class `name` can start now, and on which nodes."""
    index = index or UsageIndex.build(snapshot)
    catalog = catalog or admission_catalog(snapshot, license_namespace)
    why = refusals(name, count, catalog=catalog)
    notes = entitlement_notes((name,), catalog)
    record = snapshot.classes.get(name)
    if record is None:
        answer = f"admission refuses the VM: {'; '.join(why)}"
        return Explanation(
            name, count, None, (), 0, False, answer, class_blocked=True, refusals=why
        )
    status = compute_status(
        record,
        snapshot,
        index=index,
        winners=conflict_winners(snapshot.classes),
        license_namespace=license_namespace,
        now=now,
    )
    conditions = {c["type"]: c for c in status["conditions"]}
    resource = record.resource_name
    fits_ = (
        [
            judge_node(
                node,
                resource,
                tolerations=record.tolerations,
                used=index.used.get(resource, {}),
                needs=snapshot.launcher_devices,
            )
            for node in index.nodes_by_resource.get(resource, ())
        ]
        if resource
        else []
    )
    rows = tuple(
        sorted((_row(f, count) for f in fits_), key=lambda r: (_RANK[r.verdict], -r.free, r.node))
    )
    fits = sum(1 for r in rows if r.verdict == "fits")
    ready = conditions["Ready"]
    if why:
        answer, can_start = f"admission refuses the VM: {'; '.join(why)}", False
    elif ready["status"] != "True":
        answer, can_start = f"no VM of class {name} can start: {ready['message']}", False
    elif fits:
        answer, can_start = (
            f"a VM needing {_units(count)} can start on {count_nodes(fits)} now",
            True,
        )
    else:
        # a conflict loser was refused above
        found = survey(record, index, conflict_lost=False, needs=snapshot.launcher_devices)
        answer, can_start = _why_not(found, rows, resource=resource or "", count=count), False
    return Explanation(
        name,
        count,
        resource,
        rows,
        fits,
        can_start,
        answer,
        conditions[names.SCHEDULABLE],
        class_blocked=bool(why) or ready["status"] != "True",
        refusals=why,
        notes=notes,
    )


def _why_not(found: Survey, rows: Sequence[NodeRow], *, resource: str, count: int) -> str:
    capacity = found.capacity()
    free, max_free = found.free, found.max_free_per_node
    waits = f"a VM needing {_units(count)} waits"
    if capacity.advertising == 0:
        return f"no node advertises {resource}: {waits}"
    if capacity.eligible == 0:
        return (
            f"{count_nodes(capacity.advertising)} advertise {resource} but none is eligible: "
            f"{exclusions(capacity)}; {waits}"
        )
    if free == 0:
        total = sum(r.allocatable for r in rows if r.verdict in ("noFreeUnits", "tooFewFree"))
        return f"all {_units(total)} on the {count_nodes(capacity.eligible)} eligible are in use: {waits}"
    if free >= count:
        return f"{_units(free)} free but at most {max_free} on one node: {waits}"
    return f"only {_units(free)} free (at most {max_free} on one node): {waits}"
