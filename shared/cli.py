"""`gpuclass`: the offline command line (docs/contract.md section 7). No cluster needed.

- `validate FILE...`: lint catalog manifests for a GitOps repository.
- `review [--objects PATH]... [--vgpu-entitled] REVIEW`: the webhook's answer to a review.
- `status [--objects PATH]...`: each class's status, computed from the objects.
- `explain CLASS|--manifest FILE ...`: can a VM start now, and why not (`shared/explaincmd.py`).

`review` calls :func:`shared.review.review`, the same function the webhook calls.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson

from gpuclass.shared import names
from gpuclass.shared.admission import encode_response
from gpuclass.shared.availability import compute_all
from gpuclass.shared.catalog import Catalog, Policy, build_catalog
from gpuclass.shared.explaincmd import add_parser as add_explain_parser
from gpuclass.shared.explaincmd import run_explain
from gpuclass.shared.review import MalformedReview, review
from gpuclass.shared.runtime.clock import now_rfc3339
from gpuclass.shared.runtime.loader import LoadError, iter_named_objects, load_snapshot
from gpuclass.shared.runtime.settings import migrate_deprecated
from gpuclass.shared.validation import validate_class

MAX_REVIEW_BYTES = 7 * 1024 * 1024


def _objects_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--objects",
        action="append",
        default=[],
        metavar="PATH",
        help="YAML/JSON file or folder of Kubernetes objects (the cluster as it would be); repeatable",
    )
    parser.add_argument(
        "--license-namespace",
        dest="license_namespace",
        default=names.DEFAULT_LICENSE_NAMESPACE,
        help="namespace of licence source Secrets (default %(default)s)",
    )
    parser.add_argument(
        "--kubevirt-namespace",
        default=names.DEFAULT_KUBEVIRT_NAMESPACE,
        help="namespace of the KubeVirt CR; CRs elsewhere are ignored, as in a cluster "
        "(default %(default)s)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuclass", description="GPU class catalog: offline tools, no cluster needed."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    v = sub.add_parser(
        "validate", help="lint GPUClass manifests; exit 0 if all are valid, 1 otherwise"
    )
    v.add_argument("files", nargs="+", metavar="FILE", help="manifest files or folders")
    r = sub.add_parser("review", help="print the AdmissionReview response the webhook would send")
    _objects_arg(r)
    r.add_argument(
        "--vgpu-entitled", action="store_true", help="the platform's gpu.vgpu entitlement is on"
    )
    r.add_argument(
        "--kubevirt-controller-user",
        default=names.DEFAULT_KUBEVIRT_CONTROLLER_USER,
        help="user that creates virt-launcher Pods (default %(default)s)",
    )
    r.add_argument(
        "review", metavar="REVIEW", help="AdmissionReview JSON file, or - for standard input"
    )
    s = sub.add_parser(
        "status", help='print {"items": [{"name", "status"}]} computed from the objects'
    )
    _objects_arg(s)
    add_explain_parser(sub, _objects_arg)
    return parser


def run_validate(files: Sequence[str]) -> int:
    problems: list[str] = []
    classes: list[tuple[Path, str, str]] = []
    try:
        for path, obj in iter_named_objects(files):
            if obj.get("kind") != names.KIND:
                continue
            name = (
                (obj.get("metadata") or {}).get("name")
                if isinstance(obj.get("metadata"), dict)
                else None
            )
            shown = name if isinstance(name, str) and name else "(no name)"
            verdict = validate_class(obj, manifest=True)
            problems += [f"{path}: {shown}: {c.field}: {c.message}" for c in verdict.causes]
            resource = (
                ((obj.get("spec") or {}).get("source") or {})
                .get("devicePlugin", {})
                .get("resourceName")
                if isinstance(obj.get("spec"), dict)
                and isinstance(obj["spec"].get("source"), dict)
                and isinstance(obj["spec"]["source"].get("devicePlugin"), dict)
                else None
            )
            if isinstance(resource, str):
                classes.append((path, shown, resource))
    except LoadError as exc:
        print(f"gpuclass validate: {exc}", file=sys.stderr)
        return 1
    first: dict[str, str] = {}
    for path, name, resource in classes:
        if resource in first and first[resource] != name:
            problems.append(
                f"{path}: {name}: spec.source.devicePlugin.resourceName: {resource} is already used by class "
                f"{first[resource]}; use a different advertised resource for each offer"
            )
        first.setdefault(resource, name)
    for line in problems:
        print(line)
    if not classes and not problems:
        print("gpuclass validate: no GPUClass objects found", file=sys.stderr)
    return 1 if problems else 0


def _read_review(source: str) -> bytes:
    stream = sys.stdin.buffer if source == "-" else open(source, "rb")  # noqa: SIM115
    with stream:
        data = stream.read(MAX_REVIEW_BYTES + 1)
    if len(data) > MAX_REVIEW_BYTES:
        raise MalformedReview("review is larger than 7 MiB")
    return data


def offline_catalog(
    objects: Sequence[str],
    policy: Policy,
    *,
    kubevirt_namespace: str = names.DEFAULT_KUBEVIRT_NAMESPACE,
) -> Catalog:
    snapshot = load_snapshot(objects, kubevirt_namespace=kubevirt_namespace)
    return build_catalog(snapshot, policy, figures="computed")


def run_review(args: argparse.Namespace) -> int:
    try:
        data = _read_review(args.review)
        try:
            body: Any = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise MalformedReview(f"not JSON: {exc}") from exc
        policy = Policy(args.vgpu_entitled, args.license_namespace, args.kubevirt_controller_user)
        catalog = offline_catalog(args.objects, policy, kubevirt_namespace=args.kubevirt_namespace)
        response = review(body, catalog)
    except (MalformedReview, LoadError, OSError) as exc:
        print(f"gpuclass review: {exc}", file=sys.stderr)
        return 2
    sys.stdout.buffer.write(encode_response(response))
    return 0


def run_status(args: argparse.Namespace) -> int:
    try:
        snapshot = load_snapshot(args.objects, kubevirt_namespace=args.kubevirt_namespace)
    except LoadError as exc:
        print(f"gpuclass status: {exc}", file=sys.stderr)
        return 2
    # Computed from the objects, never read from them (docs/contract.md 7): drop any stored status,
    # whose conditions would otherwise lend their lastTransitionTime to the output.
    snapshot.classes = {n: replace(r, status=None) for n, r in snapshot.classes.items()}
    statuses = compute_all(snapshot, license_namespace=args.license_namespace, now=now_rfc3339())
    items = [{"name": name, "status": status} for name, status in statuses.items()]
    sys.stdout.buffer.write(orjson.dumps({"items": items}, option=orjson.OPT_INDENT_2) + b"\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    raw = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(migrate_deprecated(raw, {}, "gpuclass"))
    if args.command == "validate":
        return run_validate(args.files)
    if args.command == "review":
        return run_review(args)
    if args.command == "explain":
        return run_explain(args)
    return run_status(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
