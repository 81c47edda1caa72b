"""`--objects` as a live source: re-read the files when they change.

Both servers run from files when given `--objects`, and both notice a change the same
way, by :func:`stamp_of` (every file's modification time and size). What they rebuild
differs: :class:`FileSource`, used by the webhook alone (`webhook.catalogs.FileCatalog`),
reloads the snapshot when the stamp moved, keeping the last good snapshot when a file is
briefly unreadable (mid-write); the reconciler's offline twin (`reconciler.offline`)
imports only `stamp_of` and reloads its in-memory API server itself. The `gpuclass`
CLI reads its files once, through the loader, and does not import this module.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from gpuclass.shared.core.base.names import DEFAULT_KUBEVIRT_NAMESPACE
from gpuclass.shared.core.model.snapshot import Snapshot
from gpuclass.shared.files.loader import LoadError, files_under, load_snapshot

log = logging.getLogger(__name__)


Stamp = tuple[tuple[str, int, int], ...]


def stamp_of(paths: Sequence[str | Path]) -> Stamp:
    """Path, modification time and size of every file: equal stamps mean nothing changed."""
    stamp = []
    for path in files_under(paths):
        st = path.stat()
        stamp.append((str(path), st.st_mtime_ns, st.st_size))
    return tuple(stamp)


class FileSource:
    """The webhook's `--objects` source: `snapshot` as last read successfully, `error` the last
    failed reload (None after a good one). The first load must succeed: a bad file at start
    raises, later it only keeps the old snapshot."""

    def __init__(
        self, paths: Sequence[str | Path], *, kubevirt_namespace: str = DEFAULT_KUBEVIRT_NAMESPACE
    ) -> None:
        self.paths = [Path(p) for p in paths]
        self.kubevirt_namespace = kubevirt_namespace
        self._stamp: Stamp | None = None
        self.snapshot: Snapshot = Snapshot()
        self.error: str | None = None

    def _current_stamp(self) -> Stamp:
        return stamp_of(self.paths)

    def refresh(self) -> bool:
        """Reload if anything changed; True when a new snapshot was loaded."""
        try:
            stamp = self._current_stamp()
            if stamp == self._stamp:
                return False
            self.snapshot = load_snapshot(self.paths, kubevirt_namespace=self.kubevirt_namespace)
        except (LoadError, OSError) as exc:
            self.error = str(exc)
            log.warning(
                "objects not reloaded; keeping the last good state",
                extra={"fields": {"error": str(exc)}},
            )
            if self._stamp is None:
                raise
            return False
        self._stamp = stamp
        self.error = None
        return True
