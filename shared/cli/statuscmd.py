"""`gpuclass status`: each class's status computed from the `--objects` files (a stored status
in them is ignored), as JSON. Reads only files.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from typing import Any

from gpuclass.shared.cli.escape import json_text, text
from gpuclass.shared.cli.options import EPILOG, objects
from gpuclass.shared.core.status.availability import compute_all
from gpuclass.shared.files.loader import LoadError, load_snapshot
from gpuclass.shared.process.clock import now_rfc3339


def add_parser(sub: Any, objects_arg: Any) -> None:
    """Register `status` on the `gpuclass` sub-parsers (`objects_arg` adds --objects & co)."""
    s = sub.add_parser(
        "status",
        help='print {"items": [{"name", "status"}]} computed from the objects',
        epilog=EPILOG,
    )
    objects_arg(s)


def run_status(args: argparse.Namespace) -> int:
    """`gpuclass status`: each class's status computed from the objects (a stored status in the
    files is ignored), as JSON on stdout; 2 when the files cannot be read."""
    try:
        snapshot = load_snapshot(objects(args), kubevirt_namespace=args.kubevirt_namespace)
    except LoadError as exc:
        print(f"gpuclass status: {text(exc)}", file=sys.stderr)
        return 2
    # Computed from the objects, never read from them (docs/contract.md 7): drop any stored status,
    # whose conditions would otherwise lend their lastTransitionTime to the output.
    snapshot.classes = {n: replace(r, status=None) for n, r in snapshot.classes.items()}
    statuses = compute_all(snapshot, license_namespace=args.license_namespace, now=now_rfc3339())
    items = [{"name": name, "status": status} for name, status in statuses.items()]
    sys.stdout.write(json_text({"items": items}) + "\n")
    return 0
