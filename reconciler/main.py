"""`gpuclass-reconciler`: keep GPUClass status, license copies and the in-use finalizer current.

With `--objects PATH`... it runs from files and never contacts a cluster
(`--once` prints what it would write; otherwise it serves `/metrics`, `/healthz`,
`/readyz` from the files). Without, it watches the API server (in-cluster, or
`--kubeconfig`). SIGTERM and SIGINT stop it gracefully: writes stop, the Lease is
released, the process exits 0. Exit codes: 0 done, 1 failed, 2 bad input files.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import orjson
from pydantic import ValidationError

from gpuclass.reconciler.api.port import ApiError
from gpuclass.reconciler.manager import Manager
from gpuclass.reconciler.offline import file_reconciler, run_once
from gpuclass.reconciler.settings import ReconcilerSettings
from gpuclass.shared.files.loader import LoadError
from gpuclass.shared.process.logs import setup_logging
from gpuclass.shared.process.settings import parse_settings

log = logging.getLogger("gpuclass.reconciler")


async def serve(settings: ReconcilerSettings) -> None:
    """Run until SIGTERM/SIGINT."""
    reload: Callable[[], Coroutine[Any, Any, None]] | None = None
    if settings.objects:
        reconciler, reload = file_reconciler(settings)
    else:
        reconciler = Manager(settings)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, reconciler.stop)
    reloading = asyncio.create_task(reload()) if reload else None
    log.info(
        "reconciler starting",
        extra={
            "fields": {
                "source": "files" if settings.objects else "cluster",
                "port": settings.port,
                "identity": settings.identity(),
            }
        },
    )
    try:
        await reconciler.run()
    finally:
        if reloading:
            reloading.cancel()


def main(argv: Sequence[str] | None = None) -> int:
    """The `gpuclass-reconciler` entry point: `--once` prints one pass's report, otherwise serves
    until a signal. 2 for invalid settings or unreadable files, 1 when the API server or the
    Lease fails it (or it cannot listen), else 0."""
    try:
        settings = parse_settings(ReconcilerSettings, argv, prog="gpuclass-reconciler")
    except ValidationError as exc:
        causes = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'settings'}: {e['msg'].removeprefix('Value error, ')}"
            for e in exc.errors()
        )
        print(f"gpuclass-reconciler: invalid settings: {causes}", file=sys.stderr)
        return 2
    setup_logging(settings.log_level, settings.log_format)
    try:
        if settings.once:
            report = asyncio.run(run_once(settings))
            sys.stdout.buffer.write(orjson.dumps(report, option=orjson.OPT_INDENT_2) + b"\n")
            return 0
        asyncio.run(serve(settings))
    except LoadError as exc:
        print(f"gpuclass-reconciler: {exc}", file=sys.stderr)
        return 2
    except (ApiError, TimeoutError, OSError) as exc:
        print(f"gpuclass-reconciler: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
