"""`gpuclass`: the command line (docs/contract.md section 7), offline by default.

`validate`, `review` and `status` read only files and never contact a cluster. `explain`
reads files with `--objects`, but with `--kubeconfig` or `--context` it lists a cluster
(read-only: Nodes, Pods, GPUClasses, the KubeVirt CR, and each licensed class's source
Secret by name), so it needs credentials that may read them.

- `validate [-o text|json|junit|github] [--fail-on-warn] FILE...`: lint catalog manifests
  for a GitOps repository (checks in :mod:`shared.cli.lint`, formats in :mod:`shared.cli.lintformat`).
- `review [--objects PATH]... [--vgpu-entitled] [--endpoint PATH] [-o json|text] [--fail-on-deny]
  REVIEW`: the webhook's answer to a review.
- `status [--objects PATH]...`: each class's status, computed from the objects.
- `explain CLASS|--manifest FILE ...`: can a VM start now, and why not (`shared/cli/explaincmd.py`).
- `plan [--objects PATH|--context CTX] [-o text|json|markdown|github] [--fail-on ...]
  MANIFEST_OR_DIR...`: what a catalog change will do to tenants (`shared/cli/plancmd.py`).

`review` calls :func:`shared.core.admission.review.review`, the same function the webhook calls. The
options the servers share read the same `GPUCLASS_*` variables as theirs (flags win).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
from pydantic import TypeAdapter, ValidationError

from gpuclass.shared.cli.escape import text
from gpuclass.shared.cli.explaincmd import add_parser as add_explain_parser
from gpuclass.shared.cli.explaincmd import run_explain
from gpuclass.shared.cli.lint import FileError, FileInput, lint
from gpuclass.shared.cli.lintformat import FORMATS, Format, render
from gpuclass.shared.cli.manifest import wrap_manifest
from gpuclass.shared.cli.plancmd import add_parser as add_plan_parser
from gpuclass.shared.cli.plancmd import run_plan
from gpuclass.shared.cli.reviewtext import render_review_text
from gpuclass.shared.core.admission.decisions import encode_response
from gpuclass.shared.core.admission.envelope import too_many_values
from gpuclass.shared.core.admission.review import ENDPOINTS, MalformedReview, review
from gpuclass.shared.core.base import names
from gpuclass.shared.core.status.availability import compute_all
from gpuclass.shared.core.status.catalog import Catalog, Policy, build_catalog
from gpuclass.shared.kube.clock import now_rfc3339
from gpuclass.shared.kube.loader import (
    LoadError,
    documents_from_bytes,
    files_under,
    iter_objects,
    load_snapshot,
)
from gpuclass.shared.kube.settings import migrate_deprecated
from gpuclass.shared.kube.version import version_line

MAX_REVIEW_BYTES = 7 * 1024 * 1024


ENV_PREFIX = "GPUCLASS_"


def _env_help(text: str, option: str) -> str:
    return f"{text} [env: {ENV_PREFIX}{option.upper().replace('-', '_')}]"


def _env_bool(environ: Mapping[str, str], name: str) -> bool:
    """A boolean variable read as the servers' settings read it (true/false, 1/0, yes/no, on/off).

    Read when the command that uses it runs, so a bad value fails that command only, as a
    usage error (MalformedReview: exit 2), not every subcommand.
    """
    value = environ.get(ENV_PREFIX + name)
    if value is None:
        return False
    try:
        return TypeAdapter(bool).validate_python(value)
    except ValidationError:
        raise MalformedReview(f"{ENV_PREFIX}{name}={value[:40]!r} is not a boolean") from None


def _objects_arg(parser: argparse.ArgumentParser, environ: Mapping[str, str]) -> None:
    objects = [part for part in environ.get(f"{ENV_PREFIX}OBJECTS", "").split(",") if part]
    parser.add_argument(
        "--objects",
        action="append",
        metavar="PATH",
        help=_env_help(
            "YAML/JSON file or folder of Kubernetes objects (the cluster as it would be); "
            "repeatable (comma-separated in the variable; flags replace it)",
            "objects",
        ),
    )
    parser.set_defaults(objects_from_env=objects)
    parser.add_argument(
        "--license-namespace",
        dest="license_namespace",
        metavar="NAMESPACE",
        default=environ.get(f"{ENV_PREFIX}LICENSE_NAMESPACE", names.DEFAULT_LICENSE_NAMESPACE),
        help=_env_help(
            "namespace of licence source Secrets (default %(default)s)", "license-namespace"
        ),
    )
    parser.add_argument(
        "--kubevirt-namespace",
        metavar="NAMESPACE",
        default=environ.get(f"{ENV_PREFIX}KUBEVIRT_NAMESPACE", names.DEFAULT_KUBEVIRT_NAMESPACE),
        help=_env_help(
            "namespace of the KubeVirt CR; CRs elsewhere are ignored, as in a cluster "
            "(default %(default)s)",
            "kubevirt-namespace",
        ),
    )


EPILOG = (
    "Options marked [env: ...] also read that environment variable; a flag wins over it. "
    f"{ENV_PREFIX}LICENCE_NAMESPACE is the deprecated spelling of {ENV_PREFIX}LICENSE_NAMESPACE."
)


TOP_EPILOG = (
    "review, status, explain and plan read the variables the servers read for the same options: "
    f"{ENV_PREFIX}OBJECTS (comma-separated), {ENV_PREFIX}LICENSE_NAMESPACE, "
    f"{ENV_PREFIX}KUBEVIRT_NAMESPACE, for review and plan {ENV_PREFIX}VGPU_ENTITLED, and for review "
    f"{ENV_PREFIX}KUBEVIRT_CONTROLLER_USER; a flag wins over its variable. "
    + EPILOG.split(". ", 1)[1]
)


def build_parser(environ: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    """The `gpuclass` parser; `environ` (default: os.environ) supplies the `GPUCLASS_*` defaults,
    read here so `--help` shows them and tests pass their own."""
    env = os.environ if environ is None else environ
    parser = argparse.ArgumentParser(
        prog="gpuclass",
        description="GPU class catalog: validate, review, status, explain and plan. Offline on "
        "--objects files; explain and plan may also read a cluster (read-only).",
        epilog=TOP_EPILOG,
    )
    parser.add_argument("--version", action="version", version=version_line("gpuclass"))
    sub = parser.add_subparsers(dest="command", required=True)
    v = sub.add_parser(
        "validate",
        help="lint GPUClass manifests; exit 0 if all are valid, 1 otherwise",
        description="Lint GPUClass manifests: every file is read and every cause reported. "
        "Exit 0 when all are valid, 1 otherwise (and with --fail-on-warn, on warnings).",
    )
    v.add_argument(
        "-o",
        "--output",
        choices=FORMATS,
        default="text",
        help="text (FILE: NAME: FIELD: message), json, junit (JUnit XML) or github "
        "(GitHub Actions annotations); default %(default)s",
    )
    v.add_argument("--fail-on-warn", action="store_true", help="exit 1 on warnings too")
    v.add_argument("files", nargs="+", metavar="FILE", help="manifest files or folders")
    r = sub.add_parser(
        "review",
        help="print the AdmissionReview response the webhook would send",
        description="Print the AdmissionReview response the webhook would send. Exit 0 when a "
        "response was produced (with --fail-on-deny: 1 when it denies), 2 when the input "
        "is not an AdmissionReview.",
        epilog=EPILOG,
    )
    _objects_arg(r, env)
    r.add_argument(
        "--vgpu-entitled",
        action=argparse.BooleanOptionalAction,
        default=None,  # the flag, else GPUCLASS_VGPU_ENTITLED (read in run_review), else off
        help=_env_help("the platform's gpu.vgpu entitlement is on", "vgpu-entitled"),
    )
    r.add_argument(
        "--kubevirt-controller-user",
        metavar="USER",
        default=env.get(
            f"{ENV_PREFIX}KUBEVIRT_CONTROLLER_USER", names.DEFAULT_KUBEVIRT_CONTROLLER_USER
        ),
        help=_env_help(
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
    r.add_argument(
        "review",
        metavar="REVIEW",
        help="AdmissionReview JSON file (or with --manifest, a manifest), or - for standard input",
    )
    s = sub.add_parser(
        "status",
        help='print {"items": [{"name", "status"}]} computed from the objects',
        epilog=EPILOG,
    )
    _objects_arg(s, env)
    add_explain_parser(sub, lambda p: _objects_arg(p, env))
    add_plan_parser(sub, lambda p: _objects_arg(p, env))
    return parser


def _objects(args: argparse.Namespace) -> list[str]:
    """`--objects` flags, else the variable's list: flags replace the variable, not add to it."""
    return list(args.objects) if args.objects else list(args.objects_from_env)


def _read_inputs(paths: Sequence[str]) -> list[FileInput]:
    """Every file under the paths, each read on its own: one that cannot be read is reported
    and the others are still checked. A file named twice is read once."""
    inputs: list[FileInput] = []
    seen: set[Path] = set()
    for raw in paths:
        try:
            found = files_under([raw])
        except LoadError as exc:
            inputs.append(FileInput(raw, error=FileError(exc.code, exc.reason, exc.line)))
            continue
        for path in found:
            key = path.resolve()
            if key in seen:
                continue
            seen.add(key)
            try:
                objects = list(iter_objects(path, strict_keys=True))
            except LoadError as exc:
                inputs.append(FileInput(str(path), error=FileError(exc.code, exc.reason, exc.line)))
                continue
            inputs.append(FileInput(str(path), objects))
    return inputs


def run_validate(
    files: Sequence[str], output: Format = "text", *, fail_on_warn: bool = False
) -> int:
    """`gpuclass validate`: 1 when any file or object has an error (or, with `fail_on_warn`, a
    warning), else 0; finding no GPUClass at all is said on stderr but is not a failure."""
    report = lint(_read_inputs(files))
    rendered = render(report, output)
    sys.stdout.write(rendered.out)
    sys.stderr.write(rendered.err)
    if report.objects == 0 and report.errors == 0:
        print("gpuclass validate: no GPUClass objects found", file=sys.stderr)
    if report.errors:
        return 1
    return 1 if fail_on_warn and report.warnings else 0


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
            entitled = _env_bool(args.environ, "VGPU_ENTITLED")
        policy = Policy(entitled, args.license_namespace, args.kubevirt_controller_user)
        catalog = offline_catalog(
            _objects(args), policy, kubevirt_namespace=args.kubevirt_namespace
        )
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


def run_status(args: argparse.Namespace) -> int:
    """`gpuclass status`: each class's status computed from the objects (a stored status in the
    files is ignored), as JSON on stdout; 2 when the files cannot be read."""
    try:
        snapshot = load_snapshot(_objects(args), kubevirt_namespace=args.kubevirt_namespace)
    except LoadError as exc:
        print(f"gpuclass status: {text(exc)}", file=sys.stderr)
        return 2
    # Computed from the objects, never read from them (docs/contract.md 7): drop any stored status,
    # whose conditions would otherwise lend their lastTransitionTime to the output.
    snapshot.classes = {n: replace(r, status=None) for n, r in snapshot.classes.items()}
    statuses = compute_all(snapshot, license_namespace=args.license_namespace, now=now_rfc3339())
    items = [{"name": name, "status": status} for name, status in statuses.items()]
    sys.stdout.buffer.write(orjson.dumps({"items": items}, option=orjson.OPT_INDENT_2) + b"\n")
    return 0


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """The `gpuclass` entry point: migrate deprecated spellings, parse, run one subcommand and
    return its exit code (`argv`/`environ` default to the process's, tests pass their own)."""
    raw = sys.argv[1:] if argv is None else list(argv)
    env = dict(os.environ if environ is None else environ)
    migrated = migrate_deprecated(raw, env, "gpuclass")  # before the parser reads env
    args = build_parser(env).parse_args(migrated)
    args.environ = env
    if args.command == "validate":
        return run_validate(args.files, args.output, fail_on_warn=args.fail_on_warn)
    if args.command == "review":
        return run_review(args)
    if args.command == "explain":
        return run_explain(args)
    if args.command == "plan":
        if args.vgpu_entitled is None:  # the same variable as review and the servers read
            try:
                args.vgpu_entitled = _env_bool(env, "VGPU_ENTITLED")
            except MalformedReview as exc:
                print(f"gpuclass plan: {text(exc)}", file=sys.stderr)
                return 2
        return run_plan(args, _objects(args))
    return run_status(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
