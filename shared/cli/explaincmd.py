"""`gpuclass explain`: the command-line edge of :mod:`shared.cli.explain` (offline or against a cluster).

- `gpuclass explain CLASS [--count N] --objects PATH...`: from files, as `gpuclass status`;
- `gpuclass explain CLASS [--count N] --kubeconfig F [--context C]`: one list each of
  Nodes, Pods (bound, not finished), GPUClasses and the KubeVirt CR, and a GET of each
  licensed class's source Secret (never a list of Secrets), then the same function;
- `gpuclass explain --manifest FILE ...`: a VirtualMachine or VMI manifest, every class of
  its selection at once.

It prints a node table and a one-line answer (`-o json`: the same as JSON) and exits 0
when the VM can start now, 1 when it cannot, 2 on unusable input. Like `shared/cli/main.py`,
this module does I/O (files, and for a cluster asyncio and the HTTP client of
`shared.kube.kubeclient`, which is imported only when a cluster is read), so it sits in the
CLI, not in the core (import-linter's `pure-core` contract); the judging is
`shared.cli.explain`'s, and `main.py` only registers the subcommand.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Mapping
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from gpuclass.shared.cli.cluster import read_cluster
from gpuclass.shared.cli.escape import guard_lines, json_text, text
from gpuclass.shared.cli.explain import Explanation, explain_class
from gpuclass.shared.cli.explainmanifest import ManifestExplanation, explain_manifest, selection_of
from gpuclass.shared.core.model.selection import parse_selection
from gpuclass.shared.core.model.snapshot import Snapshot
from gpuclass.shared.files.loader import LoadError, iter_objects, load_snapshot


def add_parser(sub: Any, objects_arg: Any) -> None:
    """Register `explain` on the `gpuclass` sub-parsers (`objects_arg` adds --objects & co)."""
    e = sub.add_parser(
        "explain",
        help="can a VM of CLASS (or the VM in --manifest) start now? node table and answer",
        description="Explain, node by node, whether a VM needing N units of a class can start "
        "now, from --objects files or from a cluster (--kubeconfig/--context). Exit 0 when it "
        "can, 1 when it cannot, 2 on unusable input.",
    )
    objects_arg(e)
    e.add_argument("class_name", nargs="?", metavar="CLASS", help="GPUClass name")
    e.add_argument(
        "--count", type=int, default=1, metavar="N", help="units the VM needs (default 1)"
    )
    e.add_argument(
        "--manifest",
        metavar="FILE",
        help="VirtualMachine or VirtualMachineInstance manifest: explain every class it selects",
    )
    e.add_argument("--kubeconfig", type=Path, help="read the cluster through this kubeconfig")
    e.add_argument("--context", help="kubeconfig context (default: the current one)")
    e.add_argument("-o", "--output", choices=("text", "json"), default="text")


def run_explain(args: argparse.Namespace) -> int:
    """The `explain` subcommand: 0 when the VM can start now, 1 when it cannot, 2 on unusable input
    (bad flags, unreadable files, a cluster that cannot be read), with the reason on stderr."""
    try:
        manifest = _manifest(args.manifest) if args.manifest else None
        if manifest is None and not args.class_name:
            raise LoadError("give a CLASS or --manifest FILE")
        if args.count < 1:
            raise LoadError("--count must be at least 1")
        snapshot = _snapshot(args)
    except (LoadError, OSError) as exc:
        print(f"gpuclass explain: {text(exc)}", file=sys.stderr)
        return 2
    if manifest is not None:
        result = explain_manifest(manifest, snapshot, license_namespace=args.license_namespace)
        shown = render_manifest(result)
        can_start, value = result.can_start, _manifest_value(result)
    else:
        one = explain_class(
            snapshot, args.class_name, count=args.count, license_namespace=args.license_namespace
        )
        shown, can_start, value = render_class(one), one.can_start, _class_value(one)
    if args.output == "json":
        sys.stdout.write(json_text(value) + "\n")
    else:
        sys.stdout.write(shown)
    return 0 if can_start else 1


def _manifest(path: str) -> Mapping[str, Any]:
    objects = list(iter_objects(Path(path)))
    kinds = [o for o in objects if o.get("kind") in ("VirtualMachine", "VirtualMachineInstance")]
    if len(kinds) != 1:
        raise LoadError(f"{path}: expected one VirtualMachine or VirtualMachineInstance")
    return kinds[0]


def _snapshot(args: argparse.Namespace) -> Snapshot:
    cluster = args.kubeconfig is not None or args.context is not None
    # --objects flags, else (offline only) the GPUCLASS_OBJECTS list, as `status` reads it
    objects = list(args.objects or ([] if cluster else getattr(args, "objects_from_env", [])))
    if objects:
        if cluster:
            raise LoadError("give --objects or --kubeconfig/--context, not both")
        snapshot = load_snapshot(
            objects, kubevirt_namespace=args.kubevirt_namespace, detail=bool(args.manifest)
        )
        # Computed from the objects, never read from them (docs/contract.md 7).
        snapshot.classes = {n: replace(r, status=None) for n, r in snapshot.classes.items()}
        return snapshot
    if not cluster:
        raise LoadError("give --objects PATH (offline) or --kubeconfig/--context (a cluster)")
    quota_namespace = _manifest_namespace(args.manifest) if args.manifest else None
    return asyncio.run(
        read_cluster(
            args.kubeconfig,
            args.context,
            license_namespace=args.license_namespace,
            kubevirt_namespace=args.kubevirt_namespace,
            classes=_classes_asked(args),
            quota_namespace=quota_namespace,
        )
    )


def _manifest_namespace(path: str) -> str:
    meta = _manifest(path).get("metadata")
    namespace = meta.get("namespace") if isinstance(meta, dict) else None
    return namespace if isinstance(namespace, str) and namespace else "default"


def _classes_asked(args: argparse.Namespace) -> frozenset[str] | None:
    """The classes whose license Secret matters: CLASS, or the manifest's selection."""
    if not args.manifest:
        return frozenset({args.class_name})
    _, _, raw = selection_of(_manifest(args.manifest))
    return frozenset(e.class_name for e in parse_selection(raw).entries)


# -- rendering ----------------------------------------------------------------------------------

ELIGIBLE_VERDICTS = frozenset({"fits", "tooFewFree", "noFreeUnits"})
"""Rows whose FREE counts (docs/contract.md 6.3); other nodes show "-"."""


def render_class(e: Explanation, *, label: str = "answer") -> str:
    """The node table and answer of one class as text; FREE is shown only for nodes that could take
    the VM, and `label` names the last line (`answer`, or `this class` inside a manifest's
    answer)."""
    units = "unit" if e.count == 1 else "units"
    lines = [
        f"class {e.class_name} ({e.resource or 'no resource'}), a VM needing {e.count} {units}"
    ]
    if e.rows:
        width = max(len("NODE"), *(len(r.node) for r in e.rows))
        lines.append(
            f"  {'NODE':<{width}}  {'FREE':>4}  {'ALLOCATABLE':>11}  {'VERDICT':<11}  REASON"
        )
        for r in e.rows:
            free = str(r.free) if r.verdict in ELIGIBLE_VERDICTS else "-"
            lines.append(
                f"  {r.node:<{width}}  {free:>4}  {r.allocatable:>11}  {r.verdict:<11}  {r.reason}"
            )
    else:
        lines.append("  no node lists the resource")
    if e.condition is not None:
        c = e.condition
        lines.append(f"  Schedulable={c['status']} ({c['reason']}): {c['message']}")
    lines += [f"  note: {n}" for n in e.notes]
    lines.append(f"{label}: {e.answer}")
    return guard_lines("".join(text(line) + "\n" for line in lines))


def render_manifest(m: ManifestExplanation) -> str:
    """A manifest's answer as text: admission's problems, each class's table, the count of nodes
    that fit all classes at once, then the answer."""
    lines = [f"{m.kind} {m.name}", *(f"  {p}" for p in m.problems)]
    out = "".join(text(line) + "\n" for line in lines)
    for e in m.classes:
        out += render_class(e, label="  this class")
    if m.launcher is not None:
        out += render_launcher(m)
    tail = [f"nodes where every class fits at once: {m.joint_fits}"] if m.classes else []
    if m.stopped_by is not None:
        tail.append(f"stopped by: {m.stopped_by}")
    tail.append(f"answer: {m.answer}")
    return guard_lines(out + "".join(text(line) + "\n" for line in tail))


def render_launcher(m: ManifestExplanation) -> str:
    """What the VM's launcher Pod asks, each node with the GPUs judged for the rest of it, and the
    namespace's quota."""
    ask = m.launcher
    assert ask is not None
    selector = ", ".join(f"{k}={v}" for k, v in sorted(ask.node_selector.items()))
    lines = [
        f"launcher Pod (as KubeVirt renders it): {ask.cpu_millis}m CPU, "
        f"{ask.memory / 2**20:.0f}Mi memory, node selector {selector}"
    ]
    if ask.forbidden_label:
        lines.append(f"  and no node label {ask.forbidden_label}")
    for row in m.vm_rows:
        verdict = "fits" if row.fits else "; ".join(row.reasons)
        lines.append(f"  {row.node}: {verdict}")
    for q in m.quota:
        state = "room" if q.enough else "NOT ENOUGH"
        lines.append(
            f"  quota {q.quota}: {q.key} used {q.used} of {q.hard}, asks {q.wanted}: {state}"
        )
    lines += [f"  note: {n}" for n in m.vm_notes]
    return guard_lines("".join(text(line) + "\n" for line in lines))


def _class_value(e: Explanation) -> dict[str, Any]:
    condition = e.condition
    return {
        "className": e.class_name,
        "count": e.count,
        "resource": e.resource,
        "nodes": [asdict(r) for r in e.rows],
        "fits": e.fits,
        "canStart": e.can_start,
        "answer": e.answer,
        "refusals": list(e.refusals),
        "notes": list(e.notes),
        "condition": {k: condition[k] for k in ("status", "reason", "message")}
        if condition is not None
        else None,
    }


def _manifest_value(m: ManifestExplanation) -> dict[str, Any]:
    return {
        "kind": m.kind,
        "name": m.name,
        "problems": list(m.problems),
        "classes": [_class_value(e) for e in m.classes],
        "blocking": list(m.blocking),
        "notes": list(m.notes),
        "jointFits": m.joint_fits,
        "canStart": m.can_start,
        "stoppedBy": m.stopped_by,
        "launcher": _launcher_value(m),
        "answer": m.answer,
    }


def _launcher_value(m: ManifestExplanation) -> dict[str, Any] | None:
    ask = m.launcher
    if ask is None:
        return None
    return {
        "nodeSelector": dict(ask.node_selector),
        "forbiddenLabel": ask.forbidden_label,
        "cpuMillis": ask.cpu_millis,
        "memoryBytes": ask.memory,
        "ephemeralStorageBytes": ask.ephemeral_storage,
        "devices": dict(ask.devices),
        "nodes": [{"node": r.node, "fits": r.fits, "reasons": list(r.reasons)} for r in m.vm_rows],
        "quota": [asdict(q) for q in m.quota],
        "notes": list(m.vm_notes),
    }
