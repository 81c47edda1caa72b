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

from gpuclass.shared.cli.escape import text
from gpuclass.shared.cli.explaincmd import add_parser as add_explain_parser
from gpuclass.shared.cli.explaincmd import run_explain
from gpuclass.shared.cli.options import ENV_PREFIX, EPILOG, env_bool, objects, objects_arg
from gpuclass.shared.cli.plancmd import add_parser as add_plan_parser
from gpuclass.shared.cli.plancmd import run_plan
from gpuclass.shared.cli.reviewcmd import add_parser as add_review_parser
from gpuclass.shared.cli.reviewcmd import run_review
from gpuclass.shared.cli.statuscmd import add_parser as add_status_parser
from gpuclass.shared.cli.statuscmd import run_status
from gpuclass.shared.cli.validatecmd import add_parser as add_validate_parser
from gpuclass.shared.cli.validatecmd import run_validate
from gpuclass.shared.core.admission.envelope import MalformedReview
from gpuclass.shared.process.settings import migrate_deprecated
from gpuclass.shared.process.version import version_line

__all__ = ["build_parser", "main"]

TOP_EPILOG = (
    "review, status, explain and plan read the variables the servers read for the same options: "
    f"{ENV_PREFIX}OBJECTS (comma-separated), {ENV_PREFIX}LICENSE_NAMESPACE, "
    f"{ENV_PREFIX}KUBEVIRT_NAMESPACE, for review and plan {ENV_PREFIX}VGPU_ENTITLED, and for review "
    f"{ENV_PREFIX}KUBEVIRT_CONTROLLER_USER; a flag wins over its variable. "
    + EPILOG.split(". ", 1)[1]
)


def build_parser(environ: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    """The `gpuclass` parser; `environ` (default: os.environ) supplies the `GPUCLASS_*` defaults,
    read here so `--help` shows them and tests pass their own. Each command registers its own
    sub-parser (`shared/cli/*cmd.py`)."""
    env = os.environ if environ is None else environ
    parser = argparse.ArgumentParser(
        prog="gpuclass",
        description="GPU class catalog: validate, review, status, explain and plan. Offline on "
        "--objects files; explain and plan may also read a cluster (read-only).",
        epilog=TOP_EPILOG,
    )
    parser.add_argument("--version", action="version", version=version_line("gpuclass"))
    sub = parser.add_subparsers(dest="command", required=True)
    add_validate_parser(sub)
    add_review_parser(sub, env)
    add_status_parser(sub, lambda p: objects_arg(p, env))
    add_explain_parser(sub, lambda p: objects_arg(p, env))
    add_plan_parser(sub, lambda p: objects_arg(p, env))
    return parser


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """The `gpuclass` entry point: migrate deprecated spellings, parse, run one subcommand and
    return its exit code (`argv`/`environ` default to the process's, tests pass their own)."""
    raw = sys.argv[1:] if argv is None else list(argv)
    env = dict(os.environ if environ is None else environ)
    migrated = migrate_deprecated(raw, env, prog="gpuclass")  # before the parser reads env
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
                args.vgpu_entitled = env_bool(env, "VGPU_ENTITLED")
            except MalformedReview as exc:
                print(f"gpuclass plan: {text(exc)}", file=sys.stderr)
                return 2
        return run_plan(args, objects(args))
    return run_status(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
