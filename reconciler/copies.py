"""Licence-copy writes: carry out `reconciler.state.licenses.plan_copies` against the record, never reading a Secret.

The plan is pure (which copies should exist, with what content). This module
writes it, and keeps the record (:func:`reconciler.state.licenses.parse_record`, a ConfigMap
in the reconciler's namespace) that says which copies exist, so the reconciler
needs no right to read tenant Secrets. One pass:

1. *write ahead*: a copy about to be created enters the record as pending, before
   the Secret is written (a crash after the write leaves it recorded, never lost);
2. the Secret writes: a create is a plain create; an update (and the periodic
   verify) is a JSON patch whose first operation tests our label, so a Secret of
   that name that is not ours is never changed, whoever sends it. A create that
   meets an existing Secret (409) adopts it by that patch when it carries our label
   (a copy written before the record existed); an update that finds the copy gone
   (404, a tenant deleted it) creates it again. A Secret the test refuses (422) is
   reported as foreign and left alone. A delete is a delete. The chart's
   ValidatingAdmissionPolicy also lets these through only for labelled
   `gpuclass-license-*` Secrets in tenant namespaces;
3. the record is written again with what happened: digests of what was written,
   deleted copies and refused pending ones dropped. This second write is pinned to
   the resourceVersion the first one returned, kept for the pass (the view is the
   watch's and may not show the first write yet).

The plan is made against the record the view holds, so a pass starts only when the
view shows the record as our last write left it (or newer than the version a 409
was pinned to), as the worker waits for its other writes (:mod:`reconciler.state.expect`).

A write the API refuses (403) is reported as an Event once and backed off per
object: no retry storm. Token payloads go into request bodies only; logs and
Events name the Secret.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable

from gpuclass.reconciler.api.port import ApiError, KubeAPI, RawObject
from gpuclass.reconciler.events import EventRecorder
from gpuclass.reconciler.metrics import ReconcilerMetrics
from gpuclass.reconciler.state.cache import ClusterCache, CopyRecord
from gpuclass.reconciler.state.licenses import (
    MAX_RECORD_BYTES,
    PENDING,
    CopyAction,
    DesiredCopy,
    SecretKey,
    copy_patch,
    record_body,
    render_record,
    secret_body,
)
from gpuclass.reconciler.state.sources import Source
from gpuclass.shared.core.base import names
from gpuclass.shared.core.base.meta import Key, resource_version

log = logging.getLogger("gpuclass.reconciler.copies")

MayWrite = Callable[[Hashable, Callable[[], None]], bool]
MayDelete = Callable[[tuple[Source, ...], str, Callable[[], None]], bool]
Failed = Callable[[Hashable, Callable[[], None], ApiError], int]
ViewCaughtUp = Callable[[Hashable, Source, Key, Callable[[], None]], bool]
Wrote = Callable[[Source, RawObject | None], None]
Conflicted = Callable[[Source, Key, str], None]
RECORD_KEY: Hashable = ("copy-record",)


class CopyWriter:
    """Writes the licence copies the plan wants, and the record of them (see the module doc).

    `may_write` (leadership and per-object backoff) and `may_delete` (a view recent
    enough to release a copy) are required: no copy is written or deleted without them.
    `view_caught_up` says whether the view shows the record as our last write (`wrote`) or a
    409 (`conflicted`) requires, else defers the pass until it does.
    """

    def __init__(
        self,
        api: KubeAPI,
        state: ClusterCache,
        events: EventRecorder,
        *,
        vgpu_entitled: bool,
        record_namespace: str,
        may_write: MayWrite,
        may_delete: MayDelete,
        view_caught_up: ViewCaughtUp,
        wrote: Wrote,
        conflicted: Conflicted,
        delete_depends_on: tuple[Source, ...],
        failed: Failed,
        metrics: ReconcilerMetrics,
        dry_run: bool = False,
    ) -> None:
        self.api, self.state, self.events, self.vgpu_entitled = api, state, events, vgpu_entitled
        self.record_namespace = record_namespace
        self.may_write, self.may_delete, self.failed, self.metrics = (
            may_write,
            may_delete,
            failed,
            metrics,
        )
        self.view_caught_up, self.wrote, self.conflicted = view_caught_up, wrote, conflicted
        self.delete_depends_on, self.dry_run = delete_depends_on, dry_run
        self.record_key: Key = (record_namespace, names.COPY_RECORD_NAME)
        self._reported: set[tuple[str, str]] = set()

    def _retry(self) -> None:
        self.state.dirty.copies = True

    def _retry_verify(self) -> None:
        self.state.dirty.copies = self.state.dirty.verify_copies = True

    async def reconcile(self, *, verify: bool = False) -> None:
        """One pass: the plan's writes, bracketed by the two record writes."""
        retry = self._retry_verify if verify else self._retry
        if not self.view_caught_up(RECORD_KEY, "copy-record", self.record_key, retry):
            return  # the view's record is older than our last write of it: plan on the newer one
        actions = [
            a
            for a in self.state.copy_actions(vgpu_entitled=self.vgpu_entitled, verify=verify)
            if self.may_write(("secret", *a.key), self._retry)
            and (a.action != "delete" or self._may_delete())
        ]
        if not actions or not self.may_write(RECORD_KEY, self._retry):
            return
        record = self.state.copy_record
        entries = dict(record.entries)
        for action in actions:
            if action.action == "create":
                entries[action.key] = PENDING
        if len(render_record(entries)) > MAX_RECORD_BYTES:  # full: updates and deletes still go
            log.error(
                "licence-copy record full: no new copy is written",
                extra={"fields": {"entries": len(entries), "limit_bytes": MAX_RECORD_BYTES}},
            )
            actions = [a for a in actions if a.action != "create"]
            entries = dict(record.entries)
        ahead = await self._write_record(entries, record)
        if ahead is None:
            return
        for action in actions:
            await self._write(action, entries)
        await self._write_record(entries, ahead)

    async def _write_record(
        self, entries: dict[SecretKey, str], record: CopyRecord
    ) -> CopyRecord | None:
        """Bring the record from `record` (its entries and version as the server holds them) to
        `entries`; returns the record as written, to pin the next write of the pass to, or None
        when it could not be written (nothing else is)."""
        if entries == dict(record.entries):
            return record
        body = record_body(
            entries, namespace=self.record_namespace, resource_version=record.resource_version
        )
        try:
            if record.resource_version:
                written = await self.api.replace_config_map(
                    self.record_namespace, names.COPY_RECORD_NAME, body
                )
            else:
                written = await self.api.create_config_map(self.record_namespace, body)
        except ApiError as exc:
            self.metrics.object_writes.labels("copy-record", "update", "error").inc()
            if exc.conflict:  # the view is behind the server: plan again on a newer record
                self.conflicted("copy-record", self.record_key, record.resource_version)
                self.view_caught_up(RECORD_KEY, "copy-record", self.record_key, self._retry)
            else:
                self.failed(RECORD_KEY, self._retry, exc)
            return None
        if not self.dry_run:
            self.metrics.object_writes.labels("copy-record", "update", "ok").inc()
        if written is None:
            return record  # a dry run: nothing was sent, the server still holds `record`
        self.wrote("copy-record", written)
        return CopyRecord(dict(entries), resource_version(written))

    async def _write(self, action: CopyAction, entries: dict[SecretKey, str]) -> None:
        key = ("secret", *action.key)
        pending = entries.get(action.key) == PENDING
        try:
            await self._send(action)
        except ApiError as exc:
            self.metrics.object_writes.labels("licence-copy", action.action, "error").inc()
            if action.action == "delete" and exc.not_found:
                entries.pop(action.key, None)  # already gone: nothing left to track
                return
            if (pending and exc.forbidden) or exc.not_found or exc.conflict:
                entries.pop(action.key, None)  # nothing of ours was created
            count = self.failed(key, self._retry, exc)
            if exc.already_exists:
                await self._report_foreign(action)
            elif count == 1 and exc.forbidden:
                await self.events.emit(
                    action.class_name,
                    reason="LicenseCopyRefused",
                    type_="Warning",
                    message=f"the API refused to {action.action} Secret {action.namespace}/{action.name}: "
                    f"{exc.message or exc.reason}; check the gpuclass ValidatingAdmissionPolicy and RBAC",
                )
            return
        if action.action == "delete":
            entries.pop(action.key, None)
        else:
            assert action.copy is not None
            entries[action.key] = action.copy.digest
        self._reported.discard(action.key)
        if self.dry_run:
            return  # the recorder logged it as not written
        self.metrics.object_writes.labels("licence-copy", action.action, "ok").inc()
        fields = {"fields": {"namespace": action.namespace, "secret": action.name}}
        if action.action == "verify":  # every copy on every resync: not worth an info line
            log.debug("licence copy written again", extra=fields)
        else:
            log.info(f"licence copy {action.action}d", extra=fields)

    async def _send(self, action: CopyAction) -> None:
        if action.action == "delete":
            await self.api.delete_secret(action.namespace, action.name)
            return
        assert action.copy is not None  # create, update and verify always carry the copy
        if action.action == "create":
            try:
                await self.api.create_secret(action.namespace, secret_body(action.copy))
                return
            except ApiError as exists:
                if not exists.already_exists:
                    raise
            await self._patch(action.copy)  # ours from before the record, or foreign
            return
        try:
            await self._patch(action.copy)
        except ApiError as gone:
            if not gone.not_found:
                raise
            await self.api.create_secret(action.namespace, secret_body(action.copy))

    async def _patch(self, copy: DesiredCopy) -> None:
        """The label-tested patch; a Secret whose label test fails (invalid, 422) is reported as
        one that already exists and is not ours (AlreadyExists), as a create of its name is."""
        try:
            await self.api.patch_secret(copy.namespace, copy.name, copy_patch(copy))
        except ApiError as refused:
            if not refused.invalid:
                raise
            raise ApiError(
                409, "AlreadyExists", f"not written by gpuclass: {refused.message}"
            ) from None

    def _may_delete(self) -> bool:
        """A copy goes only on a view of VMIs, Pods and Namespaces recent enough to release it."""
        return self.may_delete(
            self.delete_depends_on, self.state.copy_record.resource_version, self._retry
        )

    async def _report_foreign(self, action: CopyAction) -> None:
        """A Secret of the copy's name that we did not create: never ours to change; say so once."""
        if action.key in self._reported:
            return
        self._reported.add(action.key)
        await self.events.emit(
            action.class_name,
            reason="ForeignLicenseSecret",
            type_="Warning",
            message=f"Secret {action.namespace}/{action.name} exists and was not written by gpuclass; "
            "it was left alone, so the VM there gets no platform licence until it is removed",
        )
