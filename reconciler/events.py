"""core/v1 Events about a GPUClass, so `kubectl describe gpuclass NAME` shows what happened.

A GPUClass is cluster-scoped, and the API server accepts Events about a
cluster-scoped object only in namespace `default` (as for Nodes). Creating an
Event is best effort: a failure is logged, never retried, never blocks a write.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Literal

from gpuclass.reconciler.api.port import ApiError, KubeAPI, RawObject
from gpuclass.reconciler.state.store import ClusterStore
from gpuclass.shared.core.base import names

log = logging.getLogger("gpuclass.reconciler.events")

EVENT_NAMESPACE = "default"
COMPONENT = "gpuclass-reconciler"


def event_body(
    class_name: str,
    *,
    uid: str,
    reason: str,
    message: str,
    type_: Literal["Normal", "Warning"],
    now: str,
    instance: str,
) -> RawObject:
    """A core/v1 Event about the class, in namespace `default` and named by the API server
    (`generateName`); the message is cut to 1,024 characters and `uid` ties it to this
    incarnation of the class ("" when the store no longer holds it)."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{class_name}.", "namespace": EVENT_NAMESPACE},
        "involvedObject": {
            "apiVersion": names.API_VERSION,
            "kind": names.KIND,
            "name": class_name,
            "uid": uid,
        },
        "reason": reason,
        "message": message[:1024],
        "type": type_,
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": instance,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


class EventRecorder:
    """Emits Events for the worker and the copy writer; the class's uid comes from the store, the
    time from `now`, `instance` names this replica."""

    def __init__(
        self, api: KubeAPI, store: ClusterStore, *, now: Callable[[], str], instance: str
    ) -> None:
        self.api, self.store, self.now, self.instance = api, store, now, instance

    async def emit(
        self, class_name: str, *, reason: str, message: str, type_: Literal["Normal", "Warning"]
    ) -> None:
        """Log the event and create it; a refused create is logged and dropped (best effort, never
        retried, never raised)."""
        entry = self.store.classes.get(class_name)
        body = event_body(
            class_name,
            uid=entry.record.uid if entry else "",
            reason=reason,
            message=message,
            type_=type_,
            now=self.now(),
            instance=self.instance,
        )
        log.info(
            "event",
            extra={
                "fields": {"class": class_name, "reason": reason, "type": type_, "message": message}
            },
        )
        try:
            await self.api.create_event(EVENT_NAMESPACE, body)
        except ApiError as exc:
            log.warning(
                "event not recorded",
                extra={"fields": {"class": class_name, "reason": reason, "error": str(exc)}},
            )
