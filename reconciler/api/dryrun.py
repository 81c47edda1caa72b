"""A :class:`KubeAPI` wrapper that records every write, redacted, and optionally holds it back.

`--dry-run` wraps the real adapter with `forward=False`: reads go to the API
server, writes are logged and recorded but never sent. `--once` reads the record
to print what was (or would be) written. Secret payloads are redacted *when
recorded*, so no token is kept or printed: the token shows as `<redacted>` with a
short sha256 fingerprint (enough to see that a copy changed), `gridd.conf` in clear.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from gpuclass.reconciler.api.port import KubeAPI, ListPage, RawObject, WatchEvent
from gpuclass.reconciler.state.licenses import MANAGED_LABELS
from gpuclass.reconciler.state.resources import Resource
from gpuclass.shared.core.base import names

log = logging.getLogger("gpuclass.reconciler.dryrun")


def redact_value(key: str, value: object) -> str:
    """A Secret data value for display: gridd.conf decoded, anything else a fingerprint."""
    text = value if isinstance(value, str) else ""
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raw = text.encode()
    if key == names.GRIDD_KEY:
        return raw.decode(errors="replace")
    return f"<redacted sha256:{hashlib.sha256(raw).hexdigest()[:16]}>"


def redact_secret(body: RawObject) -> RawObject:
    """A license copy's body as recorded: where, its labels, and its data through
    :func:`redact_value` (gridd.conf in clear, the token only as a fingerprint)."""
    data = body.get("data")
    meta = body.get("metadata")
    data = data if isinstance(data, dict) else {}
    meta = meta if isinstance(meta, dict) else {}
    return {
        "namespace": meta.get("namespace"),
        "name": meta.get("name"),
        "labels": meta.get("labels") or {},
        "data": {k: redact_value(k, v) for k, v in sorted(data.items())},
    }


class RecordingKube:
    """Wraps another KubeAPI: reads and the Lease pass through, every other write is recorded in
    `writes` (kind, object, redacted content) and sent only when `forward` is true; a forwarded
    write that fails raises before it is recorded. `--dry-run` wraps the real adapter with
    `forward=False`; `--once` reads `writes` for its report."""

    def __init__(self, inner: KubeAPI, *, forward: bool) -> None:
        self.inner, self.forward = inner, forward
        self.writes: list[dict[str, Any]] = []

    def _record(self, kind: str, **fields: Any) -> None:
        entry = {"kind": kind, **fields}
        self.writes.append(entry)
        if not self.forward:
            log.info("dry run: not written", extra={"fields": entry})

    def list_pages(self, resource: Resource) -> AsyncIterator[ListPage]:
        """Passed through."""
        return self.inner.list_pages(resource)

    def watch(self, resource: Resource, resource_version: str) -> AsyncIterator[WatchEvent]:
        """Passed through."""
        return self.inner.watch(resource, resource_version)

    async def get_class(self, name: str) -> RawObject:
        """Passed through."""
        return await self.inner.get_class(name)

    async def patch_class_status(self, name: str, patch: RawObject) -> RawObject | None:
        """Recorded with the status patch; sent only when forwarding (else returns None)."""
        result = await self.inner.patch_class_status(name, patch) if self.forward else None
        self._record("status", name=name, status=patch.get("status"))
        return result

    async def patch_class_finalizers(
        self, name: str, finalizers: list[str], *, resource_version: str
    ) -> RawObject | None:
        """Recorded with the new list; sent only when forwarding (else returns None)."""
        result = (
            await self.inner.patch_class_finalizers(
                name, finalizers, resource_version=resource_version
            )
            if self.forward
            else None
        )
        self._record("finalizers", name=name, finalizers=list(finalizers))
        return result

    async def create_secret(self, namespace: str, body: RawObject) -> RawObject | None:
        """Recorded as a license-copy create, content redacted; sent only when forwarding."""
        result = await self.inner.create_secret(namespace, body) if self.forward else None
        self._record("licence-copy", action="create", **redact_secret(body))
        return result

    async def patch_secret(
        self, namespace: str, name: str, *, patch: list[RawObject]
    ) -> RawObject | None:
        """Recorded as a license-copy update with the patch's new `data`, redacted; sent only when
        forwarding."""
        result = (
            await self.inner.patch_secret(namespace, name, patch=patch) if self.forward else None
        )
        data: Any = next((op["value"] for op in patch if op.get("path") == "/data"), {})
        body = {"metadata": {"namespace": namespace, "name": name, "labels": dict(MANAGED_LABELS)}}
        self._record("licence-copy", action="update", **redact_secret({**body, "data": data}))
        return result

    async def delete_secret(self, namespace: str, name: str) -> None:
        """Recorded as a license-copy delete; sent only when forwarding."""
        if self.forward:
            await self.inner.delete_secret(namespace, name)
        self._record("licence-copy", action="delete", namespace=namespace, name=name)

    async def create_config_map(self, namespace: str, body: RawObject) -> RawObject | None:
        """Recorded as a copy-record write (namespace only); sent only when forwarding."""
        result = await self.inner.create_config_map(namespace, body) if self.forward else None
        self._record("copy-record", namespace=namespace)
        return result

    async def replace_config_map(
        self, namespace: str, name: str, *, body: RawObject
    ) -> RawObject | None:
        """Recorded as a copy-record write (namespace only); sent only when forwarding."""
        result = (
            await self.inner.replace_config_map(namespace, name, body=body)
            if self.forward
            else None
        )
        self._record("copy-record", namespace=namespace)
        return result

    async def create_event(self, namespace: str, body: RawObject) -> None:
        """Recorded with the class, type, reason and message; sent only when forwarding."""
        involved = body.get("involvedObject") or {}
        if self.forward:
            await self.inner.create_event(namespace, body)
        self._record(
            "event",
            object=involved.get("name"),
            type=body.get("type"),
            reason=body.get("reason"),
            message=body.get("message"),
        )

    async def get_lease(self, namespace: str, name: str) -> RawObject | None:
        """Passed through: leader election is off under `--dry-run`, so only a forwarding run uses
        the Lease."""
        return await self.inner.get_lease(namespace, name)

    async def create_lease(self, namespace: str, body: RawObject) -> RawObject:
        """Passed through, as :meth:`get_lease`."""
        return await self.inner.create_lease(namespace, body)

    async def replace_lease(self, namespace: str, name: str, *, body: RawObject) -> RawObject:
        """Passed through, as :meth:`get_lease`."""
        return await self.inner.replace_lease(namespace, name, body=body)

    async def close(self) -> None:
        """Closes the wrapped API."""
        await self.inner.close()
