"""`gpuclass explain`: can a VM needing N units of a class start now, node by node, and why not.

Pure: a snapshot in, an :class:`Explanation` out; the CLI (`shared/explaincmd.py`)
prints it. The node verdicts come from :func:`shared.capacity.judge_node` and the
class's condition from :func:`shared.availability.compute_status`, the functions
the reconciler writes status with, so `explain` and `kubectl get gpuc -o wide`
always tell the same story. What admission would refuse outright (docs/contract.md
4.3 and 4.4) is said first: capacity does not matter for a VM that is never created.

For a VM or VMI manifest (:func:`explain_manifest`), every class of its selection is
explained with its total count, and the nodes where all of them fit at once are
counted: KubeVirt asks for every GPU of a VM on one node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from gpuclass.shared import names
from gpuclass.shared.availability import UsageIndex, compute_status, conflict_winners, survey
from gpuclass.shared.capacity import (
    NodeFit,
    Survey,
    effective_max_count,
    exclusions,
    judge_node,
)
from gpuclass.shared.k8s import Taint, tolerates_all
from gpuclass.shared.selection import parse_selection
from gpuclass.shared.snapshot import ClassRecord, Snapshot

RowVerdict = Literal[
    "fits", "tooFewFree", "noFreeUnits", "notReady", "cordoned", "untolerated", "noUnits"
]
_RANK = {v: i for i, v in enumerate(get_args(RowVerdict))}


@dataclass(frozen=True, slots=True)
class NodeRow:
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
            "notReady": "node is not Ready",
            "cordoned": "node is cordoned (spec.unschedulable)",
            "untolerated": "untolerated taint " + ", ".join(_taint(t) for t in fit.taints),
            "noUnits": "lists the resource at 0 (device plugin down or devices unhealthy?)",
        }[fit.verdict]
    eligible = fit.verdict in ("withFree", "noFreeUnits")
    return NodeRow(fit.name, fit.free if eligible else 0, fit.allocatable, verdict, reason)


def _units(n: int) -> str:
    return f"{n} unit" if n == 1 else f"{n} units"


def _nodes(n: int) -> str:
    return f"{n} node" if n == 1 else f"{n} nodes"


def refusal(
    record: ClassRecord | None,
    name: str,
    snapshot: Snapshot,
    *,
    count: int,
    max_units: int,
    winners: Mapping[str, str],
) -> str | None:
    """Why admission would refuse a VM selecting `count` units of the class (4.3, 4.4), or None."""
    if record is None:
        return f"class {name} does not exist"
    if record.spec is None:
        return f"class {name} has an invalid spec"
    if record.deleting:
        return f"class {name} is being deleted"
    winner = winners.get(record.spec.resource_name)
    if winner not in (None, name):
        return f"class {winner} already uses {record.spec.resource_name}"
    if snapshot.permitted is None:
        return "there is no KubeVirt CR"
    if record.spec.resource_name not in snapshot.permitted:
        return f"{record.spec.resource_name} is not permitted by the KubeVirt CR"
    limit = effective_max_count(record, max_units)
    if limit is not None and count > limit:
        return f"class {name} allows at most {_units(limit)} per VM"
    return None


def explain_class(
    snapshot: Snapshot,
    name: str,
    *,
    count: int = 1,
    license_namespace: str = names.DEFAULT_LICENSE_NAMESPACE,
    now: str = "",
    index: UsageIndex | None = None,
) -> Explanation:
    """Whether a VM needing `count` units of class `name` can start now, and on which nodes."""
    index = index or UsageIndex.build(snapshot)
    winners = conflict_winners(snapshot.classes)
    record = snapshot.classes.get(name)
    if record is None:
        why = refusal(None, name, snapshot, count=count, max_units=0, winners=winners)
        answer = f"admission refuses the VM: {why}"
        return Explanation(name, count, None, (), 0, False, answer, class_blocked=True)
    status = compute_status(
        record, snapshot, index=index, winners=winners, license_namespace=license_namespace, now=now
    )
    conditions = {c["type"]: c for c in status["conditions"]}
    resource = record.resource_name
    fits_ = (
        [
            judge_node(node, resource, record.tolerations, index.used.get(resource, {}))
            for node in index.nodes_by_resource.get(resource, ())
        ]
        if resource
        else []
    )
    rows = tuple(
        sorted((_row(f, count) for f in fits_), key=lambda r: (_RANK[r.verdict], -r.free, r.node))
    )
    fits = sum(1 for r in rows if r.verdict == "fits")
    why = refusal(
        record, name, snapshot, count=count, max_units=status["maxUnitsPerNode"], winners=winners
    )
    ready = conditions["Ready"]
    if why is not None:
        answer, can_start = f"admission refuses the VM: {why}", False
    elif ready["status"] != "True":
        answer, can_start = f"no VM of class {name} can start: {ready['message']}", False
    elif fits:
        answer, can_start = (
            f"a VM needing {_units(count)} can start on {_nodes(fits)} now",
            True,
        )
    else:
        found = survey(record, index, conflict_lost=False)  # a conflict loser was refused above
        answer, can_start = _why_not(found, rows, resource or "", count), False
    return Explanation(
        name,
        count,
        resource,
        rows,
        fits,
        can_start,
        answer,
        conditions[names.SCHEDULABLE],
        class_blocked=why is not None or ready["status"] != "True",
    )


def _why_not(found: Survey, rows: Sequence[NodeRow], resource: str, count: int) -> str:
    capacity = found.capacity()
    free, max_free = found.free, found.max_free_per_node
    waits = f"a VM needing {_units(count)} waits"
    if capacity.advertising == 0:
        return f"no node advertises {resource}: {waits}"
    if capacity.eligible == 0:
        return (
            f"{_nodes(capacity.advertising)} advertise {resource} but none is eligible: "
            f"{exclusions(capacity)}; {waits}"
        )
    if free == 0:
        total = sum(r.allocatable for r in rows if r.verdict in ("noFreeUnits", "tooFewFree"))
        return (
            f"all {_units(total)} on the {_nodes(capacity.eligible)} eligible are in use: {waits}"
        )
    if free >= count:
        return f"{_units(free)} free but at most {max_free} on one node: {waits}"
    return f"only {_units(free)} free (at most {max_free} on one node): {waits}"


@dataclass(frozen=True, slots=True)
class ManifestExplanation:
    """A VM or VMI manifest: each class of its selection explained, and the joint fit."""

    kind: str
    name: str
    classes: tuple[Explanation, ...]
    problems: tuple[str, ...]
    """Why the selection itself is unreadable (docs/contract.md 4.1), each with its path."""
    joint_fits: int
    can_start: bool
    answer: str
    blocking: tuple[str, ...] = ()
    """The classes that keep the VM from starting now."""


def selection_of(manifest: Mapping[str, Any]) -> tuple[str, str, str | None]:
    """(kind, name, raw annotation): a VM's selection is on its template (docs/contract.md 2)."""
    kind = str(manifest.get("kind") or "")
    meta = _dict(manifest.get("metadata"))
    holder = meta
    if kind == "VirtualMachine":
        holder = _dict(_dict(_dict(manifest.get("spec")).get("template")).get("metadata"))
    raw = _dict(holder.get("annotations")).get(names.SELECTION_ANNOTATION)
    name = meta.get("name")
    return kind, str(name or "(no name)"), raw if isinstance(raw, str) else None


def _dict(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def joint_fits(snapshot: Snapshot, index: UsageIndex, wanted: Mapping[str, int]) -> int:
    """Nodes where every selected class has its count free at once, under all their tolerations."""
    records = [snapshot.classes[n] for n in wanted if n in snapshot.classes]
    if len(records) != len(wanted) or any(r.resource_name is None for r in records):
        return 0
    tolerations = tuple(t for r in records for t in r.tolerations)
    found = 0
    for node in snapshot.nodes:
        if not node.ready or node.unschedulable or not tolerates_all(tolerations, node.taints):
            continue
        if all(
            node.allocatable.get(r.resource_name or "", 0)
            - index.used.get(r.resource_name or "", {}).get(node.name, 0)
            >= wanted[r.name]
            for r in records
        ):
            found += 1
    return found


def explain_manifest(
    manifest: Mapping[str, Any],
    snapshot: Snapshot,
    *,
    license_namespace: str = names.DEFAULT_LICENSE_NAMESPACE,
    now: str = "",
) -> ManifestExplanation:
    kind, name, raw = selection_of(manifest)
    selection = parse_selection(raw)
    if selection.causes:
        problems = tuple(f"{c.field}: {c.message}" for c in selection.causes)
        return ManifestExplanation(
            kind, name, (), problems, 0, False, "the selection is invalid: admission refuses it"
        )
    wanted: dict[str, int] = {}
    for entry in selection.entries:
        wanted[entry.class_name] = wanted.get(entry.class_name, 0) + entry.count
    if not wanted:
        return ManifestExplanation(
            kind, name, (), (), 0, True, "the manifest selects no GPU class: nothing to wait for"
        )
    index = UsageIndex.build(snapshot)
    classes = tuple(
        explain_class(
            snapshot, c, count=n, license_namespace=license_namespace, now=now, index=index
        )
        for c, n in wanted.items()
    )
    together = joint_fits(snapshot, index, wanted)
    refused = tuple(e.class_name for e in classes if e.class_blocked)
    short = tuple(e.class_name for e in classes if not e.can_start)
    if refused:
        blocking, answer = refused, "blocked by " + ", ".join(refused)
    elif together:
        # One node has every class's units, under all their tolerations: a class that alone
        # found no node (its taint tolerated by another class of the VM) does not block.
        blocking, answer = (), f"the VM can start on {_nodes(together)} now"
    elif short:
        blocking, answer = short, "blocked by " + ", ".join(short)
    else:
        blocking = tuple(wanted)
        answer = "each class has room, but no node has all of them free at once: the VM waits"
    return ManifestExplanation(kind, name, classes, (), together, not blocking, answer, blocking)
