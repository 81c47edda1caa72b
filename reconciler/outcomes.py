"""What a write did, as a value: the writers return it, the worker alone acts on it.

As a controller-runtime reconcile handler returns a result and its controller alone backs
off and requeues, the reconciler's writers (:mod:`reconciler.classwrites`,
:mod:`reconciler.copies`) send one write and say what happened; they never ask about
leadership, backoff or the store's recency, and never call back into the worker. The worker
(:mod:`reconciler.worker`) gates each write before it asks a writer for it and turns each
outcome into backoff, read-your-writes expectations and requeues.

- :class:`Written`: the server took it; `version` is the resourceVersion it returned, which the
  store must reach before the object is acted on again ("" in a dry run, or for an object the
  reconciler does not watch);
- :class:`Conflicted`: a 409 on a write pinned to `stale`: the store must move past it;
- :class:`Gone`: the object no longer exists (404): nothing to retry, the watch brings its deletion;
- :class:`Failed`: any other refusal: backed off per object, `report` emitted as an Event on the
  first failure in a row.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Literal

from gpuclass.reconciler.api.port import ApiError, KubeAPI
from gpuclass.reconciler.events import EventRecorder
from gpuclass.reconciler.metrics import ReconcilerMetrics
from gpuclass.reconciler.state.resources import Resource
from gpuclass.shared.core.base.meta import Key


@dataclass(frozen=True, slots=True)
class Watched:
    """Where the store shows a written object: its watched resource and key."""

    resource: Resource
    key: Key


@dataclass(frozen=True, slots=True)
class Written:
    """The server took the write of `gate`'s object; the store must reach `version` (when known)."""

    gate: Hashable
    watched: Watched | None = None
    version: str = ""


@dataclass(frozen=True, slots=True)
class Conflicted:
    """A write pinned to `stale` met a 409: decide again once the store has moved past it."""

    gate: Hashable
    watched: Watched
    stale: str


@dataclass(frozen=True, slots=True)
class Gone:
    """The object is gone (404): nothing to retry."""

    gate: Hashable


@dataclass(frozen=True, slots=True)
class Report:
    """An Event about a class, emitted by the worker on the first failure in a row of a write."""

    class_name: str
    reason: str
    message: str
    type_: Literal["Normal", "Warning"] = "Warning"


@dataclass(frozen=True, slots=True)
class Failed:
    """The API refused the write with `error`: back `gate` off; `report` on the first failure."""

    gate: Hashable
    error: ApiError
    report: Report | None = None


Outcome = Written | Conflicted | Gone | Failed
"""What one write did."""


@dataclass(frozen=True, slots=True)
class WriterDeps:
    """What every writer needs: the API it sends to, the Event recorder and metrics it reports
    through, and whether `api` only records (a dry run: nothing is logged or counted as written)."""

    api: KubeAPI
    events: EventRecorder
    metrics: ReconcilerMetrics
    dry_run: bool = False
