"""`gpuclass plan`: read the proposed catalog and the cluster, print :func:`shared.cli.plan.plan`.

The proposed catalog is read as `validate` reads it (files or folders of GPUClass
manifests); the cluster from `--objects` files (offline, the same files as `status`) or
live through `--kubeconfig`/`--context` (one list of Nodes, bound Pods, GPUClasses, the
KubeVirt CR, Namespaces, VMIs and VirtualMachines, and each licensed class's source Secret
by name, as `explain` reads). Nothing is written anywhere.

Exit codes: 0 when no impact named by `--fail-on` is present (default: a refused class
change or a VM whose next start is refused), 1 when one is, 2 on unusable input.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

from gpuclass.shared.cli.cluster import read_cluster
from gpuclass.shared.cli.escape import text
from gpuclass.shared.cli.plan import DEFAULT_FAIL_ON, IMPACTS, Impact, Proposed, inventory, plan
from gpuclass.shared.cli.planformat import PLAN_FORMATS, PlanFormat, render_plan
from gpuclass.shared.core.base import names
from gpuclass.shared.core.model.snapshot import Snapshot, SnapshotBuilder
from gpuclass.shared.core.status.catalog import Policy
from gpuclass.shared.files.loader import LoadError, files_under, iter_objects, iter_stored_objects
from gpuclass.shared.kube.apicollections import NAMESPACES, VMIS, VMS
from gpuclass.shared.process.clock import now_rfc3339


def add_parser(sub: Any, objects_arg: Any) -> None:
    """Register `plan` on the `gpuclass` sub-parsers (`objects_arg` adds --objects & co)."""
    p = sub.add_parser(
        "plan",
        help="what a catalog change will do to tenants: class refusals, status before and "
        "after, running VMIs, VMs whose next start is refused",
        description="Compare the proposed catalog (MANIFEST_OR_DIR, as validate reads it) with "
        "the cluster as it is (--objects files, or --kubeconfig/--context) and print what the "
        "change does. Read-only. Exit 0 when no impact named by --fail-on is present, 1 when "
        "one is, 2 on unusable input.",
    )
    objects_arg(p)
    p.add_argument("--kubeconfig", type=Path, help="read the cluster through this kubeconfig")
    p.add_argument("--context", help="kubeconfig context (default: the current one)")
    p.add_argument(
        "--vgpu-entitled",
        action=argparse.BooleanOptionalAction,
        default=None,  # the flag, else GPUCLASS_VGPU_ENTITLED (read in main), else off
        help="the platform's gpu.vgpu entitlement is on (as the webhook's flag) "
        "[env: GPUCLASS_VGPU_ENTITLED]",
    )
    p.add_argument(
        "-o",
        "--output",
        choices=PLAN_FORMATS,
        default="text",
        help="text (default), json (docs/contract.md section 7), markdown (a pull-request "
        "comment) or github (workflow annotations on the manifest lines)",
    )
    p.add_argument(
        "--fail-on",
        default=",".join(DEFAULT_FAIL_ON),
        metavar="IMPACT[,IMPACT]",
        help="impacts that make the exit code 1, comma-separated, from: "
        + ", ".join(IMPACTS)
        + "; 'none' never fails (default %(default)s)",
    )
    p.add_argument(
        "--inventory",
        action="store_true",
        help="also list VMs and VMIs that request device-plugin names directly, with the class "
        "that offers each name",
    )
    p.add_argument("manifests", nargs="+", metavar="MANIFEST_OR_DIR")


def _fail_on(raw: str) -> tuple[Impact, ...]:
    if raw.strip() == "none":
        return ()
    chosen = tuple(part.strip() for part in raw.split(",") if part.strip())
    unknown = [c for c in chosen if c not in IMPACTS]
    if unknown:
        raise LoadError(
            f"--fail-on: unknown impact {', '.join(unknown)} (one of {', '.join(IMPACTS)})"
        )
    return cast(tuple[Impact, ...], chosen)


NAME_LINE = re.compile(r"^\s*name:\s*(['\"]?)(.*?)\1\s*(#.*)?$")


def name_lines(text: str) -> dict[str, int]:
    """The 1-based line of the first `name: NAME` of each NAME in a manifest, in one pass over
    it: where annotations go (a name not found is on line 0)."""
    found: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        match = NAME_LINE.match(line)
        if match:
            found.setdefault(match.group(2), number)
    return found


def name_line(text: str, name: str) -> int:
    """The 1-based line of `name: NAME` in a manifest (0 when not found)."""
    return name_lines(text).get(name, 0)


def read_proposed(paths: Sequence[str]) -> tuple[list[Proposed], dict[str, int]]:
    """Every GPUClass of the manifests (other kinds are ignored) and the line of each name.

    Linear in the files: each is read and scanned for its name lines once, and each name is
    looked up once: a rescan of the file per class was quadratic (`benchmarks/bench_plan.py`
    measures 4,000 classes; docs/performance.md has the figure before)."""
    proposed: list[Proposed] = []
    lines: dict[str, int] = {}
    where: dict[str, str] = {}
    seen: set[Path] = set()
    for path in files_under(list(paths)):
        if path.resolve() in seen:
            continue
        seen.add(path.resolve())
        text = path.read_text(errors="replace")
        in_file = name_lines(text)
        for obj in iter_objects(path, strict_keys=True):
            if obj.get("kind") != names.KIND:
                continue
            proposed.append(Proposed(obj, str(path)))
            meta = obj.get("metadata")
            name = meta.get("name") if isinstance(meta, Mapping) else None
            if isinstance(name, str):
                if name in where:
                    raise LoadError(
                        f"{path}: GPUClass {name} is proposed twice (also in {where[name]})"
                    )
                where[name] = str(path)
                lines[name] = in_file.get(name, 0)
    return proposed, lines


def read_world(args: argparse.Namespace, objects: Sequence[str]) -> tuple[Snapshot, list[Any]]:
    """The cluster as it is and its VirtualMachines: from files, or listed live."""
    vms: list[Any] = []
    if args.kubeconfig or args.context:
        snapshot = asyncio.run(
            read_cluster(
                args.kubeconfig,
                args.context,
                license_namespace=args.license_namespace,
                kubevirt_namespace=args.kubevirt_namespace,
                more=(NAMESPACES, VMIS, VMS),
                kept=vms,
            )
        )
        return snapshot, vms
    builder = SnapshotBuilder()
    by_key: dict[tuple[str, str, str], Any] = {}
    paths_of: dict[tuple[str, str, str], list[str]] = {}
    for path in objects:
        for obj in iter_stored_objects([path], kubevirt_namespace=args.kubevirt_namespace):
            meta = obj["metadata"]
            key = (str(obj.get("kind")), str(meta.get("namespace") or ""), str(meta["name"]))
            by_key[key] = obj  # the later one wins, as an API server keeps one object per key
            paths_of.setdefault(key, []).append(path)
    for key, found in paths_of.items():
        if len(found) > 1:
            kind, namespace, name = key
            shown = f"{namespace}/{name}" if namespace else name
            print(
                f"gpuclass plan: warning: {text(kind)} {text(shown)} is given "
                f"{len(found)} times ({', '.join(text(p) for p in found)}); the last one counts",
                file=sys.stderr,
            )
    for obj in by_key.values():
        if obj.get("kind") == VMS.kind:
            vms.append(obj)
        elif (
            obj.get("kind") != "KubeVirt" or obj["metadata"]["namespace"] == args.kubevirt_namespace
        ):
            builder.add(obj)  # as load_snapshot: only the CR in the KubeVirt namespace counts
    return builder.snapshot, vms


def run_plan(args: argparse.Namespace, objects: Sequence[str]) -> int:
    """`gpuclass plan`: print the plan; 1 when an impact of --fail-on is present, 2 on bad input."""
    try:
        fail_on = _fail_on(args.fail_on)
        proposed, lines = read_proposed(args.manifests)
        snapshot, vms = read_world(args, objects)
    except (LoadError, OSError) as exc:
        print(f"gpuclass plan: {text(exc)}", file=sys.stderr)
        return 2
    policy = Policy(args.vgpu_entitled, args.license_namespace)
    result = plan(snapshot, proposed, vms=vms, policy=policy, now=now_rfc3339())
    result.classes = [
        replace(c, line=lines.get(c.name, 0)) if c.source else c for c in result.classes
    ]
    if args.inventory:
        result.inventory = inventory(snapshot, vms)
    fmt: PlanFormat = args.output
    sys.stdout.write(render_plan(result, fmt))
    return 1 if result.fails(fail_on) else 0
