"""Replicas keeping one Secret and two caBundles, over an in-memory API with optimistic concurrency.

The fake answers like kube-apiserver where these tests look (docs/conventions.md rule 18 allows
fakes for the thin adapters): an update whose resourceVersion is not the stored one gets 409,
every successful write moves the version. Two replicas sync at the same moment, so their writes
race; one must win each race and both must end up serving the same pair, which the bundles trust.
The same replicas then go through a CA rotation.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import datetime as dt
from pathlib import Path

import pytest
from cryptography import x509

from gpuclass.shared.certrotation import Policy
from gpuclass.shared.runtime.listwatch import ApiError, RawObject
from gpuclass.shared.runtime.tls import ReloadingContext, self_signed
from gpuclass.webhook.certs import CertTarget, SelfManagedCertificates
from gpuclass.webhook.metrics import WebhookMetrics

HOUR = dt.timedelta(hours=1)
POLICY = Policy(
    ca_validity=100 * HOUR,
    ca_renew_before=30 * HOUR,
    cert_validity=20 * HOUR,
    cert_renew_before=5 * HOUR,
    overlap=HOUR,
    hosts=frozenset({"localhost"}),
)
TARGET = CertTarget(
    "cozy-system", "gpuclass-webhook-certs", (("mutating", "m"), ("validating", "v"))
)


class MemoryAPI:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], RawObject] = {}
        self.version = 0
        self.conflicts = 0
        self.writes: list[str] = []
        for kind, name, hooks in (("mutating", "m", 2), ("validating", "v", 1)):
            self._store(
                (kind, name),
                {
                    "metadata": {"name": name},
                    "webhooks": [
                        {"name": f"h{i}", "clientConfig": {"url": "https://x"}}
                        for i in range(hooks)
                    ],
                },
            )

    def _store(self, key: tuple[str, str], obj: RawObject) -> RawObject:
        self.version += 1
        stored = copy.deepcopy(obj)
        stored["metadata"]["resourceVersion"] = str(self.version)
        self.objects[key] = stored
        return copy.deepcopy(stored)

    async def _get(self, key: tuple[str, str]) -> RawObject:
        await asyncio.sleep(0)
        if key not in self.objects:
            raise ApiError(404, "NotFound")
        return copy.deepcopy(self.objects[key])

    async def _replace(self, key: tuple[str, str], body: RawObject) -> RawObject:
        await asyncio.sleep(0)
        if (
            body["metadata"].get("resourceVersion")
            != self.objects[key]["metadata"]["resourceVersion"]
        ):
            self.conflicts += 1
            raise ApiError(409, "Conflict")
        self.writes.append(key[0])
        return self._store(key, body)

    async def get_secret(self, namespace: str, name: str) -> RawObject:
        return await self._get(("secret", name))

    async def create_secret(self, namespace: str, body: RawObject) -> RawObject:
        await asyncio.sleep(0)
        if ("secret", body["metadata"]["name"]) in self.objects:
            raise ApiError(409, "AlreadyExists")
        return self._store(("secret", body["metadata"]["name"]), body)

    async def replace_secret(self, namespace: str, name: str, body: RawObject) -> RawObject:
        return await self._replace(("secret", name), body)

    async def get_configuration(self, kind: str, name: str) -> RawObject:
        return await self._get((kind, name))

    async def replace_configuration(self, kind: str, name: str, body: RawObject) -> RawObject:
        return await self._replace((kind, name), body)

    def bundles(self) -> set[bytes]:
        return {
            base64.b64decode(hook["clientConfig"].get("caBundle", ""))
            for key in (("mutating", "m"), ("validating", "v"))
            for hook in self.objects[key]["webhooks"]
        }


class Clock:
    def __init__(self) -> None:
        self.now = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)

    def __call__(self) -> dt.datetime:
        return self.now


def replica(api: MemoryAPI, clock: Clock, folder: Path) -> SelfManagedCertificates:
    files = self_signed(folder, ["localhost"], days=1)
    return SelfManagedCertificates(
        api,
        TARGET,
        POLICY,
        tls=ReloadingContext(files.cert, files.key),
        poll_seconds=1,
        clock=clock,
    )


def served_issuer(replica: SelfManagedCertificates) -> x509.Name:
    return x509.load_pem_x509_certificate(replica.tls.cert.read_bytes()).issuer


def test_two_replicas_race_one_write_wins_and_both_serve_it(tmp_path: Path) -> None:
    api, clock = MemoryAPI(), Clock()
    a, b = replica(api, clock, tmp_path / "a"), replica(api, clock, tmp_path / "b")
    assert not a.loaded and not b.loaded

    async def both() -> None:
        await asyncio.gather(a.sync(), b.sync())

    asyncio.run(both())
    assert a.loaded and b.loaded
    assert api.conflicts >= 1  # they raced, and the loser adopted the winner's write
    assert sorted(api.writes) == ["mutating", "secret", "secret", "validating"]
    assert a.tls.cert.read_bytes() == b.tls.cert.read_bytes()
    (bundle,) = api.bundles()
    secret = api.objects["secret", TARGET.secret]
    assert base64.b64decode(secret["data"]["ca.crt"]) == bundle
    assert served_issuer(a) == x509.load_pem_x509_certificate(bundle).subject

    # the CA enters its renewal window: a next CA, one overlap in the bundles, then it signs
    first = served_issuer(a)
    clock.now += 71 * HOUR
    asyncio.run(both())
    (bundle,) = api.bundles()
    assert len(x509.load_pem_x509_certificates(bundle)) == 2
    assert served_issuer(a) == first
    clock.now += HOUR + dt.timedelta(seconds=1)
    asyncio.run(both())
    assert served_issuer(a) == served_issuer(b) != first
    (bundle,) = api.bundles()
    assert len(x509.load_pem_x509_certificates(bundle)) == 2  # the old CA stays one overlap
    clock.now += HOUR + dt.timedelta(seconds=1)
    asyncio.run(both())
    (bundle,) = api.bundles()
    assert [c.subject for c in x509.load_pem_x509_certificates(bundle)] == [served_issuer(a)]


def test_a_missing_secret_is_created(tmp_path: Path) -> None:
    api, clock = MemoryAPI(), Clock()
    a = replica(api, clock, tmp_path / "a")
    asyncio.run(a.sync())
    assert a.loaded and ("secret", TARGET.secret) in api.objects


def test_a_refused_write_is_an_error_not_a_silent_pass(tmp_path: Path) -> None:
    api, clock = MemoryAPI(), Clock()
    a = replica(api, clock, tmp_path / "a")

    async def refuse(kind: str, name: str, body: RawObject) -> RawObject:
        raise ApiError(403, "Forbidden")

    api.replace_configuration = refuse  # type: ignore[method-assign]
    with pytest.raises(ApiError):
        asyncio.run(a.sync())
    assert not a.loaded


def test_every_sync_reports_its_outcome_to_the_metrics(tmp_path: Path) -> None:
    """A refused write counts as a failed sync and leaves the last-sync time alone; the series
    exist only once the webhook manages certificates (so no alert fires in the other modes)."""
    metrics = WebhookMetrics()
    names = {m.name for m in metrics.registry.collect()}
    assert "gpuclass_webhook_certificate_last_sync_timestamp_seconds" not in names
    api, clock = MemoryAPI(), Clock()
    a = replica(api, clock, tmp_path / "a")
    a.on_synced = metrics.certificate_sync
    refuse_configurations = api.replace_configuration

    async def refuse(kind: str, name: str, body: RawObject) -> RawObject:
        raise ApiError(403, "Forbidden")

    async def two_polls() -> None:
        task = asyncio.create_task(a.run())
        await asyncio.sleep(0.2)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    api.replace_configuration = refuse  # type: ignore[method-assign]
    a.poll_seconds = 0.05
    asyncio.run(two_polls())
    sample = metrics.registry.get_sample_value
    failures = sample("gpuclass_webhook_certificate_sync_failures_total")
    assert failures is not None and failures >= 2
    assert sample("gpuclass_webhook_certificate_last_sync_timestamp_seconds") == 0
    api.replace_configuration = refuse_configurations  # type: ignore[method-assign]
    asyncio.run(two_polls())
    synced = sample("gpuclass_webhook_certificate_last_sync_timestamp_seconds")
    assert synced is not None and synced > 0 and a.loaded


@pytest.mark.parametrize(
    "flags",
    [
        pytest.param(["--objects", "examples"], id="with-objects"),
        pytest.param(["--cert-renew-before-seconds", "7776000"], id="renewed-before-it-is-made"),
        pytest.param(["--cert-overlap-seconds", "20000000"], id="overlap-longer-than-the-window"),
    ],
)
def test_the_webhook_refuses_to_start_with_certificates_it_cannot_keep(
    flags: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    from gpuclass.shared.runtime.settings import parse_settings
    from gpuclass.webhook.main import serve
    from gpuclass.webhook.settings import WebhookSettings

    settings = parse_settings(
        WebhookSettings,
        ["--cert-secret", "s", "--cert-namespace", "n", *flags],
        "gpuclass-webhook",
    )
    assert asyncio.run(serve(settings)) == 2
    assert "cannot start" in caplog.text


def test_not_ready_until_the_secrets_pair_is_served(tmp_path: Path) -> None:
    from gpuclass.webhook.main import _tls_ready

    api, clock = MemoryAPI(), Clock()
    a = replica(api, clock, tmp_path / "a")
    ready = _tls_ready(a.tls, a)
    assert a.tls.expiry > 0 and not ready()  # the placeholder is loaded, but it is no answer
    asyncio.run(a.sync())
    assert ready()
