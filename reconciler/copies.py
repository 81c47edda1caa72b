"""Licence-copy writes: carry out `shared.licenses.plan_copies`, never touching a foreign Secret.

The plan is pure (which copies should exist, with what content). This module
only writes it, with three safety rails:

- a replace or delete is pinned to the resourceVersion of the labelled copy we
  saw, so a Secret that changed hands meanwhile is not overwritten or removed;
- a create that meets an existing Secret (409 AlreadyExists: in a cluster we only
  see labelled Secrets, so this one is foreign) is reported as an Event and left alone;
- a write the API refuses (403, the chart's ValidatingAdmissionPolicy) is reported
  as an Event and backed off per object: no retry storm.

Token payloads go into request bodies only; logs and Events name the Secret.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable

from gpuclass.reconciler.cache import ClusterCache
from gpuclass.reconciler.events import EventRecorder
from gpuclass.reconciler.metrics import ReconcilerMetrics
from gpuclass.reconciler.ports import ApiError, KubeAPI
from gpuclass.reconciler.sources import Source
from gpuclass.shared import names
from gpuclass.shared.licenses import CopyAction, secret_body

log = logging.getLogger("gpuclass.reconciler.copies")

MayWrite = Callable[[Hashable, Callable[[], None]], bool]
MayDelete = Callable[[tuple[Source, ...], str, Callable[[], None]], bool]
Failed = Callable[[Hashable, Callable[[], None], ApiError], int]


class CopyWriter:
    def __init__(
        self,
        api: KubeAPI,
        state: ClusterCache,
        events: EventRecorder,
        *,
        vgpu_entitled: bool,
        may_write: MayWrite,
        may_delete: MayDelete = lambda sources, version, retry: True,
        delete_depends_on: tuple[Source, ...] = ("vmis", "namespaces"),
        failed: Failed,
        metrics: ReconcilerMetrics,
        dry_run: bool = False,
    ) -> None:
        self.api, self.state, self.events, self.vgpu_entitled = api, state, events, vgpu_entitled
        self.may_write, self.may_delete, self.failed, self.metrics = (
            may_write,
            may_delete,
            failed,
            metrics,
        )
        self.delete_depends_on, self.dry_run = delete_depends_on, dry_run
        self._reported: set[tuple[str, str]] = set()

    def _retry(self) -> None:
        self.state.dirty.copies = True

    async def reconcile(self) -> None:
        for action in self.state.copy_actions(vgpu_entitled=self.vgpu_entitled):
            if not self.may_write(("secret", *action.key), self._retry):
                continue
            if action.action == "foreign":
                await self._report_foreign(action)
            elif action.action == "delete" and not self._may_delete(action):
                continue
            else:
                await self._write(action)

    async def _write(self, action: CopyAction) -> None:
        key = ("secret", *action.key)
        try:
            await self._send(action)
        except ApiError as exc:
            self.metrics.object_writes.labels("licence-copy", action.action, "error").inc()
            if action.action == "delete" and exc.status == 404:
                managed = self.state.managed_secrets.get(action.key)
                if managed is not None:
                    self.state.forget_deleted(
                        "managed-secrets", action.key, managed.resource_version
                    )
                return
            count = self.failed(key, self._retry, exc)
            if (
                count == 1
                and action.action == "create"
                and exc.status == 409
                and exc.reason == "AlreadyExists"
            ):
                await self._report_foreign(action)
            elif count == 1 and exc.status == 403:
                await self.events.emit(
                    action.class_name,
                    reason="LicenseCopyRefused",
                    type_="Warning",
                    message=f"the API refused to {action.action} Secret {action.namespace}/{action.name}: "
                    f"{exc.message or exc.reason}; check the gpuclass ValidatingAdmissionPolicy and RBAC",
                )
            return
        self._reported.discard(action.key)
        if self.dry_run:
            return  # the recorder logged it as not written
        self.metrics.object_writes.labels("licence-copy", action.action, "ok").inc()
        log.info(
            f"licence copy {action.action}d",
            extra={"fields": {"namespace": action.namespace, "secret": action.name}},
        )

    async def _send(self, action: CopyAction) -> None:
        if action.action == "delete":
            managed = self.state.managed_secrets.get(action.key)
            if managed is None:
                return
            await self.api.delete_secret(action.namespace, action.name, managed.resource_version)
            self.state.forget_deleted("managed-secrets", action.key, managed.resource_version)
            return
        assert action.copy is not None  # create and update always carry the copy
        if action.action == "create":
            written = await self.api.create_secret(action.namespace, secret_body(action.copy))
        else:
            managed = self.state.managed_secrets.get(action.key)
            if managed is None:
                return
            body = secret_body(action.copy, resource_version=managed.resource_version)
            written = await self.api.replace_secret(action.namespace, action.name, body)
        if written is not None:
            self.state.absorb("managed-secrets", written)

    def _may_delete(self, action: CopyAction) -> bool:
        """A copy goes only on a view of VMIs and Namespaces that has seen the copy's last write."""
        managed = self.state.managed_secrets.get(action.key)
        version = managed.resource_version if managed else ""
        return self.may_delete(self.delete_depends_on, version, self._retry)

    async def _report_foreign(self, action: CopyAction) -> None:
        """A Secret of the copy's name without our label: never ours to change; say so once."""
        if action.key in self._reported:
            return
        self._reported.add(action.key)
        await self.events.emit(
            action.class_name,
            reason="ForeignLicenseSecret",
            type_="Warning",
            message=f"Secret {action.namespace}/{action.name} exists without the label "
            f"{names.MANAGED_BY_LABEL}={names.MANAGED_BY_VALUE}; it was left alone, so the VM "
            "there gets no platform licence until it is removed",
        )
