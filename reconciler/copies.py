"""License-copy writes: carry out `reconciler.state.licenses.plan_copies` against the record, never reading a Secret.

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
   the resourceVersion the first one returned, kept for the pass (the store is the
   watch's and may not show the first write yet).

The worker plans the pass (:func:`reconciler.state.decisions.copy_actions`) against
the record the store holds, once the store shows the record as our last write left it
(or newer than the version a 409 was pinned to), and keeps only the writes it may make
now (leadership, per-object backoff, a store recent enough to delete). This module sends
them and yields each write's outcome (:mod:`reconciler.outcomes`) as it happens; the worker
turns those into backoff, expectations and requeues, and emits the Event a first 403
carries: no retry storm, and no call back into the worker. Token payloads go into request
bodies only; logs and Events name the Secret.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Hashable

from gpuclass.reconciler.api.port import ApiError
from gpuclass.reconciler.outcomes import (
    Conflicted,
    Failed,
    Outcome,
    Report,
    Watched,
    WriterDeps,
    Written,
)
from gpuclass.reconciler.state.licenses import (
    MAX_RECORD_BYTES,
    PENDING,
    CopyAction,
    DesiredCopy,
    copy_patch,
    record_body,
    render_record,
    secret_body,
)
from gpuclass.reconciler.state.records import CopyRecord
from gpuclass.shared.core.base import names
from gpuclass.shared.core.base.meta import Key, resource_version

log = logging.getLogger("gpuclass.reconciler.copies")

RECORD_GATE: Hashable = ("copy-record",)
"""The record's key for backoff and the worker's waits."""


def secret_gate(action: CopyAction) -> Hashable:
    """A copy's key for backoff: one per Secret."""
    return ("secret", *action.key)


class CopyWriter:
    """Writes the license copies the worker asks for, and the record of them (see the module doc)."""

    def __init__(self, deps: WriterDeps, *, record_namespace: str) -> None:
        self.deps, self.api, self.metrics = deps, deps.api, deps.metrics
        self.record_namespace = record_namespace
        self.record_key: Key = (record_namespace, names.COPY_RECORD_NAME)
        self._reported: set[tuple[str, str]] = set()

    async def write(self, actions: list[CopyAction], record: CopyRecord) -> AsyncIterator[Outcome]:
        """One pass over `actions` (each already allowed by the worker), bracketed by the two
        writes of `record` (as the store holds it); yields each write's outcome as it happens."""
        entries = dict(record.entries)
        for action in actions:
            if action.action == "create":
                entries[action.key] = PENDING
        if len(render_record(entries)) > MAX_RECORD_BYTES:  # full: updates and deletes still go
            log.error(
                "license-copy record full: no new copy is written",
                extra={"fields": {"entries": len(entries), "limit_bytes": MAX_RECORD_BYTES}},
            )
            actions = [a for a in actions if a.action != "create"]
            entries = dict(record.entries)
        ahead, outcome = await self._write_record(entries, record)
        if outcome is not None:
            yield outcome
        if ahead is None:
            return
        for action in actions:
            outcome = await self._write(action, entries)
            if outcome is not None:
                yield outcome
                if isinstance(outcome, Failed) and outcome.error.already_exists:
                    await self._report_foreign(action)
        _, outcome = await self._write_record(entries, ahead)
        if outcome is not None:
            yield outcome

    async def _write_record(
        self, entries: dict[Key, str], record: CopyRecord
    ) -> tuple[CopyRecord | None, Outcome | None]:
        """Bring the record from `record` (its entries and version as the server holds them) to
        `entries`; returns the record as written, to pin the next write of the pass to (None when
        it could not be written: nothing else is), and the write's outcome (None: no write)."""
        if entries == dict(record.entries):
            return record, None
        body = record_body(
            entries, namespace=self.record_namespace, resource_version=record.resource_version
        )
        try:
            if record.resource_version:
                written = await self.api.replace_config_map(
                    self.record_namespace, names.COPY_RECORD_NAME, body=body
                )
            else:
                written = await self.api.create_config_map(self.record_namespace, body)
        except ApiError as exc:
            self.metrics.object_writes.labels("copy-record", "update", "error").inc()
            if exc.conflict:  # the store is behind the server: plan again on a newer record
                watched = Watched("copy-record", self.record_key)
                return None, Conflicted(RECORD_GATE, watched, record.resource_version)
            return None, Failed(RECORD_GATE, exc)
        if not self.deps.dry_run:
            self.metrics.object_writes.labels("copy-record", "update", "ok").inc()
        if written is None:  # a dry run: nothing was sent, the server still holds `record`
            return record, Written(RECORD_GATE)
        version = resource_version(written)
        outcome = Written(RECORD_GATE, Watched("copy-record", self.record_key), version)
        return CopyRecord(dict(entries), version), outcome

    async def _write(self, action: CopyAction, entries: dict[Key, str]) -> Outcome | None:
        """Send one copy's write and bring `entries` up to date with it; None when there is
        nothing to say (a delete that found the Secret gone)."""
        pending = entries.get(action.key) == PENDING
        try:
            await self._send(action)
        except ApiError as exc:
            self.metrics.object_writes.labels("licence-copy", action.action, "error").inc()
            if action.action == "delete" and exc.not_found:
                entries.pop(action.key, None)  # already gone: nothing left to track
                return None
            if (pending and exc.forbidden) or exc.not_found or exc.conflict:
                entries.pop(action.key, None)  # nothing of ours was created
            report = None
            if exc.forbidden and not exc.already_exists:
                report = Report(
                    action.class_name,
                    "LicenseCopyRefused",
                    f"the API refused to {action.action} Secret {action.namespace}/{action.name}: "
                    f"{exc.message or exc.reason}; check the gpuclass ValidatingAdmissionPolicy and RBAC",
                )
            return Failed(secret_gate(action), exc, report)
        if action.action == "delete":
            entries.pop(action.key, None)
        else:
            assert action.copy is not None
            entries[action.key] = action.copy.digest
        self._reported.discard(action.key)
        if self.deps.dry_run:
            return Written(secret_gate(action))  # the recorder logged it as not written
        self.metrics.object_writes.labels("licence-copy", action.action, "ok").inc()
        fields = {"fields": {"namespace": action.namespace, "secret": action.name}}
        if action.action == "verify":  # every copy on every resync: not worth an info line
            log.debug("license copy written again", extra=fields)
        else:
            log.info(f"license copy {action.action}d", extra=fields)
        return Written(secret_gate(action))

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
            await self.api.patch_secret(copy.namespace, copy.name, patch=copy_patch(copy))
        except ApiError as refused:
            if not refused.invalid:
                raise
            raise ApiError(
                409, "AlreadyExists", message=f"not written by gpuclass: {refused.message}"
            ) from None

    async def _report_foreign(self, action: CopyAction) -> None:
        """A Secret of the copy's name that we did not create: never ours to change; say so once."""
        if action.key in self._reported:
            return
        self._reported.add(action.key)
        await self.deps.events.emit(
            action.class_name,
            reason="ForeignLicenseSecret",
            type_="Warning",
            message=f"Secret {action.namespace}/{action.name} exists and was not written by gpuclass; "
            "it was left alone, so the VM there gets no platform license until it is removed",
        )
