"""The webhook's own CA: keep the Secret and the caBundles current, and serve what the Secret holds.

Every replica runs the same loop (docs/operations.md, Certificates): read both webhook
configurations, then the Secret; ask `webhook.certs.rotation.plan` for the next step; carry it out
with an update that names the resourceVersion read. A 409 means another replica wrote first: read
again and plan again, so one write wins and every replica adopts it. Once the plan says `Wait`, the
Secret's serving pair is written to `directory` and handed to the existing reload (a complete new
TLS context, checked before it is swapped in: `webhook.certs.tls.ReloadingContext`). The replica
is ready only from then on.

The configurations are read before the Secret on purpose: a bundle written by another replica
after our read makes our write fail with 409, and one written before it was planned from a Secret
no newer than the one we then read, so a replica with an old view cannot take a CA out of a
bundle that a newer Secret needs.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import datetime as dt
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from gpuclass.shared.kube.errors import ApiError
from gpuclass.shared.kube.listwatch import RawObject
from gpuclass.webhook.certs import issue as certissue
from gpuclass.webhook.certs.rotation import (
    BundleEntry,
    CertPolicy,
    UpdateSecret,
    Wait,
    WriteBundles,
    plan,
)
from gpuclass.webhook.certs.tls import ReloadingContext, write_private

log = logging.getLogger(__name__)
MAX_STEPS = 12  # a fresh install takes three writes, a CA rotation step one or two


class CertAPI(Protocol):
    """What the rotator needs of the API server, one Secret and the webhook configurations by name:
    `webhook.kube.CertAdapter` in a cluster, an in-memory one in the tests. Writes are
    whole-object updates pinned to the resourceVersion read."""

    async def get_secret(self, namespace: str, name: str) -> RawObject:
        """The certificate Secret as stored."""
        ...

    async def replace_secret(self, namespace: str, name: str, *, body: RawObject) -> RawObject:
        """Replace the Secret; a stale resourceVersion is a 409 ApiError."""
        ...

    async def get_configuration(self, kind: str, name: str) -> RawObject:
        """One webhook configuration (`kind` is `mutating` or `validating`)."""
        ...

    async def replace_configuration(self, kind: str, name: str, *, body: RawObject) -> RawObject:
        """Replace that configuration; a stale resourceVersion is a 409 ApiError."""
        ...


@dataclass(frozen=True, slots=True)
class CertTarget:
    """Where the certificates live: the Secret, and the webhook configurations (kind, name)."""

    namespace: str
    secret: str
    configurations: tuple[tuple[str, str], ...]


def _decode(data: Mapping[str, Any] | None) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for key, value in (data or {}).items():
        try:
            out[key] = base64.b64decode(str(value), validate=True)
        except (binascii.Error, ValueError):
            out[key] = b""
    return out


def _bundle(hook: Mapping[str, Any]) -> BundleEntry:
    raw = str((hook.get("clientConfig") or {}).get("caBundle") or "")
    try:
        return certissue.inspect_bundle(base64.b64decode(raw, validate=True))
    except (binascii.Error, ValueError):
        return BundleEntry((), clean=False)


class SelfManagedCertificates:
    """One replica's part in keeping the webhook's CA, serving certificate and caBundles."""

    def __init__(
        self,
        api: CertAPI,
        target: CertTarget,
        *,
        policy: CertPolicy,
        tls: ReloadingContext,
        poll_seconds: float,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
        on_loaded: Callable[[], None] = lambda: None,
        on_synced: Callable[[bool], None] = lambda ok: None,
    ) -> None:
        self.api, self.target, self.policy, self.tls = api, target, policy, tls
        self.poll_seconds, self.clock, self.on_loaded = poll_seconds, clock, on_loaded
        self.on_synced = on_synced
        self.loaded = False
        self._missing: set[tuple[str, str]] = set()  # (kind, name) of configurations not found

    async def run(self) -> None:
        """Sync now, then again at the plan's next deadline or every poll, whichever is first.

        No failure ends the loop: a replica whose loop had ended would stay Ready with a frozen
        certificate, so every error (whatever its type) is a failed sync, retried at the next poll.
        """
        while True:
            delay = self.poll_seconds
            try:
                until = await self.sync()
            except (ApiError, OSError, ValueError, TypeError) as exc:
                # API refusals, an unwritable --tls-dir, key material that does not load: the
                # served certificate stays, and the next poll tries again.
                self._failed(str(exc))
            except Exception as exc:
                # An unexpected failure (a library error on key material, a bug): only its type
                # is logged, since its message may quote what it was given (key material).
                self._failed(f"unexpected {type(exc).__name__}")
            else:
                if self._missing:
                    # What exists is kept and served, but a configuration that is gone is a
                    # failure to report (docs/operations.md, GPUClassWebhookCertificatesNotSynced).
                    self._failed(
                        "; ".join(
                            f"webhook configuration {kind}/{name} not found: "
                            "`helm upgrade` creates it again"
                            for kind, name in sorted(self._missing)
                        )
                    )
                else:
                    self.on_synced(True)
                left = (until - self.clock()).total_seconds() if until is not None else delay
                if left > 0:
                    delay = max(0.05, min(delay, left))
            await asyncio.sleep(delay)

    def _failed(self, error: str) -> None:
        log.warning(
            "certificates not synced; retrying",
            extra={"fields": {"error": error, "secret": self.target.secret}},
        )
        self.on_synced(False)

    async def sync(self) -> dt.datetime | None:
        """Plan and write until nothing is due, then serve the Secret's pair. Returns the next
        deadline."""
        for _ in range(MAX_STEPS):
            configurations = await self._configurations()
            secret = await self._secret()
            data = _decode(secret.get("data"))
            annotations = dict((secret.get("metadata") or {}).get("annotations") or {})
            bundles = {
                key: [_bundle(hook) for hook in obj.get("webhooks") or []]
                for key, obj in configurations.items()
            }
            now = self.clock()
            step = plan(
                certissue.inspect_secret(data, annotations), bundles, now=now, policy=self.policy
            )
            if isinstance(step, Wait):
                self._serve(data)
                return step.until
            try:
                if isinstance(step, WriteBundles):
                    await self._write_bundles(step, configurations)
                else:
                    await self._write_secret(
                        step, secret, data=data, annotations=annotations, now=now
                    )
            except ApiError as exc:
                if not exc.conflict:
                    raise
                log.info("another replica wrote first; reading again", extra={"fields": {}})
        raise ApiError(0, "NotSettled", message=f"certificates did not settle in {MAX_STEPS} steps")

    async def _configurations(self) -> dict[tuple[str, str], RawObject]:
        found: dict[tuple[str, str], RawObject] = {}
        for kind, name in self.target.configurations:
            try:
                found[kind, name] = await self.api.get_configuration(kind, name)
            except ApiError as exc:
                if not exc.not_found:
                    raise
                if (kind, name) not in self._missing:
                    log.warning(
                        "webhook configuration not found; its caBundle is not kept",
                        extra={"fields": {"kind": kind, "name": name}},
                    )
                self._missing.add((kind, name))
            else:
                self._missing.discard((kind, name))
        return found

    async def _secret(self) -> RawObject:
        """The Secret as read. The chart creates it and the webhook has no `create` right, so a
        missing Secret is a failed sync whose message says how to get it back."""
        target = self.target
        try:
            return await self.api.get_secret(target.namespace, target.secret)
        except ApiError as exc:
            if not exc.not_found:
                raise
            raise ApiError(
                404,
                "NotFound",
                message=f"certificate Secret {target.namespace}/{target.secret} not found: "
                "`helm upgrade` creates it again",
            ) from None

    async def _write_bundles(
        self, step: WriteBundles, configurations: Mapping[tuple[str, str], RawObject]
    ) -> None:
        encoded = base64.b64encode(certissue.bundle_pem(step.certs)).decode()
        for (kind, name), obj in configurations.items():
            if (kind, name) not in step.configurations:
                continue
            for hook in obj.get("webhooks") or []:
                hook.setdefault("clientConfig", {})["caBundle"] = encoded
            await self.api.replace_configuration(
                kind, name, body=obj
            )  # carries its resourceVersion
            log.info(
                "caBundle written",
                extra={
                    "fields": {
                        "kind": kind,
                        "configuration": name,
                        "cas": len(step.certs),
                        "why": step.reason,
                    }
                },
            )

    async def _write_secret(
        self,
        step: UpdateSecret,
        secret: RawObject,
        *,
        data: Mapping[str, bytes],
        annotations: Mapping[str, str],
        now: dt.datetime,
    ) -> None:
        new_data, notes = certissue.apply_update(
            data, annotations, step=step, now=now, policy=self.policy
        )
        body = dict(secret)
        body["metadata"] = {**(secret.get("metadata") or {}), "annotations": notes}
        body["data"] = {k: base64.b64encode(v).decode() for k, v in sorted(new_data.items())}
        await self.api.replace_secret(self.target.namespace, self.target.secret, body=body)
        log.info(
            "certificate Secret written",
            extra={
                "fields": {
                    "why": step.reason,
                    "new_ca": step.new_ca or None,
                    "promoted": step.promote,
                    "certificate": step.issue_certificate,
                    "retired": len(step.retired),
                }
            },
        )

    def _serve(self, data: Mapping[str, bytes]) -> None:
        cert, key = data.get(certissue.CERT, b""), data.get(certissue.KEY, b"")
        if not cert or not key:
            return
        if not self.tls.serves(cert, key):
            # key first: a reload seeing the new certificate with the old key refuses the pair
            write_private(self.tls.key, key)
            write_private(self.tls.cert, cert)
            self.tls.reload()
        if self.tls.serves(cert, key):
            if not self.loaded:
                log.info("serving the certificate from the Secret", extra={"fields": {}})
            self.loaded = True
            self.on_loaded()
