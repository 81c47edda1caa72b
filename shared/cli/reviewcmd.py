"""`gpuclass review`: the AdmissionReview response the webhook would send, by the same
:func:`shared.core.admission.review.review` the webhook calls (docs/contract.md 7.2). Reads
only files.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from gpuclass.shared.cli.escape import text
from gpuclass.shared.cli.manifest import wrap_manifest
from gpuclass.shared.cli.options import ENV_PREFIX, EPILOG, env_bool, env_help, objects, objects_arg
from gpuclass.shared.cli.reviewtext import render_review_text
from gpuclass.shared.core.admission.decisions import encode_response
from gpuclass.shared.core.admission.envelope import too_many_values
from gpuclass.shared.core.admission.review import ENDPOINTS, MalformedReview, review
from gpuclass.shared.core.base import names
from gpuclass.shared.core.status.catalog import Catalog, Policy, build_catalog
from gpuclass.shared.files.loader import LoadError, documents_from_bytes, load_snapshot

MAX_REVIEW_BYTES = 7 * 1024 * 1024


def add_parser(sub: Any, env: Mapping[str, str]) -> None:
    """Register `review` on the `gpuclass` sub-parsers (`env` supplies the variables)."""
    r = sub.add_parser(
        "review",
        help="print the AdmissionReview response the webhook would send",
        description="Print the AdmissionReview response the webhook would send. Exit 0 when a "
        "response was produced (with --fail-on-deny: 1 when it denies), 2 when the input "
        "is not an AdmissionReview.",
        epilog=EPILOG,
    )
    objects_arg(r, env)
    r.add_argument(
        "--vgpu-entitled",
        action=argparse.BooleanOptionalAction,
        default=None,  # the flag, else GPUCLASS_VGPU_ENTITLED (read in run_review), else off
        help=env_help("the platform's gpu.vgpu entitlement is on", "vgpu-entitled"),
    )
    r.add_argument(
        "--kubevirt-controller-user",
        metavar="USER",
        default=env.get(
            f"{ENV_PREFIX}KUBEVIRT_CONTROLLER_USER", names.DEFAULT_KUBEVIRT_CONTROLLER_USER
        ),
        help=env_help(
            "user that creates virt-launcher Pods (default %(default)s)", "kubevirt-controller-user"
        ),
    )
    r.add_argument(
        "-o",
        "--output",
        choices=("json", "text"),
        default="json",
        help="json: the response as the webhook sends it (default); text: the decision, "
        "causes, warnings and patch operations, one per line",
    )
    r.add_argument(
        "--fail-on-deny", action="store_true", help="exit 1 when the response denies the request"
    )
    r.add_argument(
        "--endpoint",
        metavar="PATH",
        choices=tuple(ENDPOINTS),
        default=None,
        help="answer as this webhook path does (one of: "
        + ", ".join(ENDPOINTS)
        + "); default: the first path of the object's kind (for a Pod, /mutate/pods; "
        "/validate/pods judges vGPU requests; for a VMI, /mutate/virtualmachineinstances; "
        "/validate/virtualmachineinstances judges it as stored, after every mutation)",
    )
    _add_manifest_options(r)
    r.add_argument(
        "review",
        metavar="REVIEW",
        help="AdmissionReview JSON file (or with --manifest, a manifest), or - for standard input",
    )


def _add_manifest_options(r: Any) -> None:
    """The options of `review --manifest`: the request a plain manifest is wrapped in."""
    m = r.add_argument_group(
        "plain manifests",
        "With --manifest, REVIEW is one VirtualMachine, VirtualMachineInstance, Pod or GPUClass "
        "manifest (YAML or JSON), wrapped as the API server would send it.",
    )
    m.add_argument(
        "--manifest", action="store_true", help="REVIEW is a plain manifest, not an AdmissionReview"
    )
    m.add_argument(
        "--namespace",
        default="",
        help="namespace of the request (default: the manifest's own, else default)",
    )
    m.add_argument(
        "--operation",
        choices=("CREATE", "UPDATE", "DELETE"),
        default="CREATE",
        help="operation of the request (default %(default)s)",
    )
    m.add_argument(
        "--old", metavar="FILE", help="the stored object before the change (UPDATE, DELETE)"
    )
    m.add_argument(
        "--as",
        dest="as_user",
        metavar="USER",
        default="",
        help="user making the request (a launcher Pod is only touched when it is KubeVirt's "
        "controller user)",
    )


def _read_review(source: str) -> bytes:
    stream = sys.stdin.buffer if source == "-" else open(source, "rb")  # noqa: SIM115
    with stream:
        data = stream.read(MAX_REVIEW_BYTES + 1)
    if len(data) > MAX_REVIEW_BYTES:
        raise MalformedReview("review is larger than 7 MiB")
    if (too_many := too_many_values(data)) is not None:  # the webhook's 413, before parsing
        raise MalformedReview(too_many)
    return data


def offline_catalog(
    objects: Sequence[str],
    policy: Policy,
    *,
    kubevirt_namespace: str = names.DEFAULT_KUBEVIRT_NAMESPACE,
) -> Catalog:
    """The admission catalog of the `--objects` files, figures computed from their nodes and pods as
    the webhook's `--objects` mode computes them."""
    snapshot = load_snapshot(objects, kubevirt_namespace=kubevirt_namespace)
    return build_catalog(snapshot, policy, figures="computed")


def _review_body(args: argparse.Namespace) -> Any:
    """The AdmissionReview to answer: the input itself, or with --manifest, the manifest wrapped."""
    data = _read_review(args.review)
    if not args.manifest:
        if args.old or args.namespace or args.as_user or args.operation != "CREATE":
            raise MalformedReview("--namespace, --operation, --old and --as need --manifest")
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise MalformedReview(f"not JSON: {exc}") from exc
    old = _one_document(_read_review(args.old), args.old) if args.old else None
    obj: object = _one_document(data, args.review)
    if args.operation == "DELETE":  # the manifest is what is deleted, unless --old names it
        obj, old = None, old if old is not None else obj
    return wrap_manifest(
        obj, operation=args.operation, namespace=args.namespace, old=old, username=args.as_user
    )


def _one_document(data: bytes, source: str) -> object:
    documents = [d for d in documents_from_bytes(data, source) if d is not None]
    if len(documents) != 1:
        raise MalformedReview(f"{source}: one manifest expected, found {len(documents)}")
    return documents[0]


def _manifest_hint(body: object) -> str:
    if not isinstance(body, dict) or not isinstance(body.get("apiVersion"), str):
        return ""
    kind = body.get("kind")
    if isinstance(kind, str) and kind != "AdmissionReview":
        return f" (this is a {kind[:40]} manifest: add --manifest to review it as one)"
    return ""


def run_review(args: argparse.Namespace) -> int:
    """`gpuclass review`: the webhook's response on stdout; 2 when the input is unusable (not a
    review, flags or variables that do not fit, objects that cannot be read), 1 with
    `--fail-on-deny` on a denial, else 0."""
    try:
        body = _review_body(args)
        entitled = args.vgpu_entitled
        if entitled is None:
            entitled = env_bool(args.environ, "VGPU_ENTITLED")
        policy = Policy(entitled, args.license_namespace, args.kubevirt_controller_user)
        catalog = offline_catalog(objects(args), policy, kubevirt_namespace=args.kubevirt_namespace)
        try:
            response = review(body, catalog, endpoint=args.endpoint)
        except MalformedReview as exc:
            hint = "" if args.manifest else _manifest_hint(body)
            raise MalformedReview(str(exc) + hint) from None
    except (MalformedReview, LoadError, OSError) as exc:
        print(f"gpuclass review: {text(exc)}", file=sys.stderr)
        return 2
    if args.output == "text":
        sys.stdout.write(render_review_text(response))
    else:
        sys.stdout.buffer.write(encode_response(response))
    denied = response.get("response", {}).get("allowed") is not True
    return 1 if args.fail_on_deny and denied else 0
