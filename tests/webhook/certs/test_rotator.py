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

from gpuclass.shared.kube.errors import ApiError
from gpuclass.shared.kube.listwatch import RawObject
from gpuclass.webhook.certs import issue as certissue
from gpuclass.webhook.certs.rotation import CertPolicy
from gpuclass.webhook.certs.rotator import CertTarget, SelfManagedCertificates
from gpuclass.webhook.certs.tls import ReloadingContext, self_signed
from gpuclass.webhook.metrics import WebhookMetrics

HOUR = dt.timedelta(hours=1)
POLICY = CertPolicy(
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


# What the chart does: both configurations are called `<fullname>`.
SAME_NAME = CertTarget(
    "cozy-system",
    "gpuclass-webhook-certs",
    (("mutating", "gpuclass-webhook"), ("validating", "gpuclass-webhook")),
)


class MemoryAPI:
    def __init__(self, target: CertTarget = TARGET) -> None:
        self.objects: dict[tuple[str, str], RawObject] = {}
        self.version = 0
        self.conflicts = 0
        self.writes: list[str] = []
        self.keys = target.configurations
        for (kind, name), hooks in zip(self.keys, (2, 1), strict=True):
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

    async def replace_secret(self, namespace: str, name: str, body: RawObject) -> RawObject:
        return await self._replace(("secret", name), body)

    async def get_configuration(self, kind: str, name: str) -> RawObject:
        return await self._get((kind, name))

    async def replace_configuration(self, kind: str, name: str, body: RawObject) -> RawObject:
        return await self._replace((kind, name), body)

    def bundles(self) -> set[bytes]:
        return {
            base64.b64decode(hook["clientConfig"].get("caBundle", ""))
            for key in self.keys
            for hook in self.objects[key]["webhooks"]
        }

    def bundle_cas(self, kind: str) -> list[x509.Name]:
        """The subjects of the CAs in the first webhook of the configuration of `kind`."""
        (key,) = [k for k in self.keys if k[0] == kind]
        raw = base64.b64decode(self.objects[key]["webhooks"][0]["clientConfig"].get("caBundle", ""))
        return [c.subject for c in x509.load_pem_x509_certificates(raw)] if raw else []

    def edit_bundle(self, kind: str, pem: bytes) -> None:
        """A hand edit: every webhook of the configuration of `kind` gets `pem` as caBundle."""
        (key,) = [k for k in self.keys if k[0] == kind]
        obj = copy.deepcopy(self.objects[key])
        for hook in obj["webhooks"]:
            hook["clientConfig"]["caBundle"] = base64.b64encode(pem).decode()
        self._store(key, obj)


class Clock:
    def __init__(self) -> None:
        self.now = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)

    def __call__(self) -> dt.datetime:
        return self.now


def replica(
    api: MemoryAPI, clock: Clock, folder: Path, target: CertTarget = TARGET
) -> SelfManagedCertificates:
    files = self_signed(folder, ["localhost"], days=1)
    return SelfManagedCertificates(
        api,
        target,
        policy=POLICY,
        tls=ReloadingContext(files.cert, files.key),
        poll_seconds=1,
        clock=clock,
    )


def served_issuer(replica: SelfManagedCertificates) -> x509.Name:
    return x509.load_pem_x509_certificate(replica.tls.cert.read_bytes()).issuer


def with_secret(api: MemoryAPI, target: CertTarget = TARGET) -> MemoryAPI:
    """The empty Secret the chart creates."""
    api._store(
        ("secret", target.secret),
        {"metadata": {"name": target.secret, "namespace": target.namespace}, "type": "Opaque"},
    )
    return api


@pytest.mark.parametrize("target", [TARGET, SAME_NAME], ids=["distinct-names", "chart-names"])
def test_two_replicas_race_one_write_wins_and_both_serve_it(
    tmp_path: Path, target: CertTarget
) -> None:
    api, clock = with_secret(MemoryAPI(target), target), Clock()
    a = replica(api, clock, tmp_path / "a", target)
    b = replica(api, clock, tmp_path / "b", target)
    assert not a.loaded and not b.loaded

    async def both() -> None:
        await asyncio.gather(a.sync(), b.sync())

    asyncio.run(both())
    assert a.loaded and b.loaded
    assert api.conflicts >= 1  # they raced, and the loser adopted the winner's write
    assert sorted(api.writes) == ["mutating", "secret", "secret", "validating"]
    assert api.bundle_cas("mutating") == api.bundle_cas("validating") != []
    assert a.tls.cert.read_bytes() == b.tls.cert.read_bytes()
    (bundle,) = api.bundles()
    secret = api.objects["secret", target.secret]
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


def test_a_missing_secret_is_a_failed_sync_that_names_the_remedy(tmp_path: Path) -> None:
    """The chart creates the Secret and the webhook has no `create` right (docs/operations.md,
    Certificates): a 404 is reported as such, not turned into a 403 by a create."""
    api, clock = MemoryAPI(), Clock()
    a = replica(api, clock, tmp_path / "a")
    with pytest.raises(ApiError) as caught:
        asyncio.run(a.sync())
    assert caught.value.status == 404
    assert f"{TARGET.namespace}/{TARGET.secret} not found" in str(caught.value)
    assert "helm upgrade" in str(caught.value)
    assert ("secret", TARGET.secret) not in api.objects and not a.loaded


def test_a_refused_write_is_an_error_not_a_silent_pass(tmp_path: Path) -> None:
    api, clock = with_secret(MemoryAPI()), Clock()
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
    api, clock = with_secret(MemoryAPI()), Clock()
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
        pytest.param(
            ["--cert-poll-seconds", "3600", "--cert-overlap-seconds", "60"],
            id="polls-less-often-than-the-overlap",
        ),
        pytest.param(
            ["--cert-poll-seconds", "21", "--cert-overlap-seconds", "60"],
            id="fewer-than-three-polls-per-overlap",
        ),
    ],
)
def test_the_webhook_refuses_to_start_with_certificates_it_cannot_keep(
    flags: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    from gpuclass.shared.process.settings import parse_settings
    from gpuclass.webhook.main import serve
    from gpuclass.webhook.settings import WebhookSettings

    settings = parse_settings(
        WebhookSettings,
        ["--cert-secret", "s", "--cert-namespace", "n", *flags],
        prog="gpuclass-webhook",
    )
    assert asyncio.run(serve(settings)) == 2
    assert "cannot start" in caplog.text


def test_not_ready_until_the_secrets_pair_is_served(tmp_path: Path) -> None:
    from gpuclass.webhook.main import _tls_ready

    api, clock = with_secret(MemoryAPI()), Clock()
    a = replica(api, clock, tmp_path / "a")
    ready = _tls_ready(a.tls, a)
    assert a.tls.expiry > 0 and not ready()  # the placeholder is loaded, but it is no answer
    asyncio.run(a.sync())
    assert ready()


def test_chart_names_an_emptied_mutating_bundle_is_written_back(tmp_path: Path) -> None:
    """Both configurations share a name in the chart: the mutating one must still be kept."""
    api, clock = with_secret(MemoryAPI(SAME_NAME), SAME_NAME), Clock()
    a = replica(api, clock, tmp_path / "a", SAME_NAME)
    asyncio.run(a.sync())
    trusted = api.bundle_cas("validating")
    assert trusted and api.bundle_cas("mutating") == trusted
    api.edit_bundle("mutating", b"")
    assert api.bundle_cas("mutating") == []
    asyncio.run(a.sync())
    assert api.bundle_cas("mutating") == trusted


def test_chart_names_a_ca_never_signs_before_both_bundles_carry_it(tmp_path: Path) -> None:
    """A hand edit takes the next CA out of the mutating bundle during its overlap: the overlap
    starts again once it is back, and the CA signs only after a full overlap in both bundles
    (docs/operations.md, Certificates, steps 2 and 3)."""
    api, clock = with_secret(MemoryAPI(SAME_NAME), SAME_NAME), Clock()
    a = replica(api, clock, tmp_path / "a", SAME_NAME)
    asyncio.run(a.sync())
    first = served_issuer(a)
    clock.now += 71 * HOUR  # inside the CA's renewal window: a next CA is staged
    asyncio.run(a.sync())
    assert len(api.bundle_cas("mutating")) == len(api.bundle_cas("validating")) == 2
    old_only = api.objects["secret", SAME_NAME.secret]["data"]["ca-current.crt"]
    clock.now += HOUR / 2
    api.edit_bundle("mutating", base64.b64decode(old_only))
    asyncio.run(a.sync())  # the bundle is written back, and its overlap starts now
    assert len(api.bundle_cas("mutating")) == 2
    clock.now += HOUR / 2 + dt.timedelta(seconds=1)  # one overlap after staging, not after repair
    asyncio.run(a.sync())
    assert served_issuer(a) == first
    clock.now += HOUR / 2
    asyncio.run(a.sync())
    promoted = served_issuer(a)
    assert promoted != first
    for kind in ("mutating", "validating"):
        assert promoted in api.bundle_cas(kind)


def test_a_missing_configuration_is_a_failed_sync_but_the_rest_is_kept(tmp_path: Path) -> None:
    """docs/operations.md, GPUClassWebhookCertificatesNotSynced: a configuration that is gone
    (break glass) counts as a failed sync; the other one and the Secret are still kept and the
    replica still serves, so the remaining webhooks keep working."""
    api, clock = with_secret(MemoryAPI(SAME_NAME), SAME_NAME), Clock()
    del api.objects["mutating", "gpuclass-webhook"]
    a = replica(api, clock, tmp_path / "a", SAME_NAME)
    outcomes: list[bool] = []
    a.on_synced = outcomes.append
    a.poll_seconds = 0.05
    asyncio.run(run_for(a, 0.2))
    assert outcomes and not any(outcomes)
    assert a.loaded and api.bundle_cas("validating")


def test_an_unexpected_error_is_a_failed_sync_and_the_loop_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Any exception (here a library's own type) counts as a failed sync; the loop does not end
    and syncs once the cause is gone."""

    class Unsupported(Exception):
        pass

    api, clock = with_secret(MemoryAPI()), Clock()
    a = replica(api, clock, tmp_path / "a")
    outcomes: list[bool] = []
    a.on_synced = outcomes.append
    a.poll_seconds = 0.05
    get_secret = api.get_secret
    calls = 0

    async def flaky(namespace: str, name: str) -> RawObject:
        nonlocal calls
        calls += 1
        if calls <= 2:
            raise Unsupported("secret-material-not-to-be-logged")
        return await get_secret(namespace, name)

    api.get_secret = flaky  # type: ignore[method-assign]
    asyncio.run(run_for(a, 0.4))
    assert outcomes[:2] == [False, False] and outcomes[-1] is True and a.loaded
    logged = [str(getattr(r, "fields", {})) + r.getMessage() for r in caplog.records]
    assert any("Unsupported" in line for line in logged)
    assert not any("secret-material-not-to-be-logged" in line for line in logged)


async def run_for(a: SelfManagedCertificates, seconds: float) -> None:
    task = asyncio.create_task(a.run())
    await asyncio.sleep(seconds)
    assert not task.done()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def test_the_expiry_series_exists_only_once_a_certificate_is_loaded(tmp_path: Path) -> None:
    """A replica on its placeholder exports no expiry (0 would read as long expired)."""
    from prometheus_client import generate_latest

    metrics = WebhookMetrics()
    name = "gpuclass_webhook_cert_expiry_timestamp_seconds"
    assert name not in generate_latest(metrics.registry).decode()
    api, clock = with_secret(MemoryAPI()), Clock()
    a = replica(api, clock, tmp_path / "a")
    a.on_loaded = lambda: metrics.served_certificate(a.tls.expiry)
    asyncio.run(a.sync())
    value = metrics.registry.get_sample_value(name)
    assert value is not None and value > clock.now.timestamp()


def test_moving_from_another_mode_the_new_ca_signs_only_after_the_bundles_propagated(
    tmp_path: Path,
) -> None:
    """The move from `tls.mode=helm` (docs/operations.md, Certificates): the bundles carry the
    chart-made CA, the Secret is empty, the old Pods still serve. The new CA joins the bundles at
    once but signs only 30 s later (the overlap here is an hour), so no API server meets a
    certificate its bundles do not trust yet."""
    api, clock = with_secret(MemoryAPI(SAME_NAME), SAME_NAME), Clock()
    helm_ca = certissue.new_ca(now=clock.now - HOUR, validity=100 * HOUR).cert
    for kind in ("mutating", "validating"):
        api.edit_bundle(kind, helm_ca)
    a = replica(api, clock, tmp_path / "a", SAME_NAME)
    asyncio.run(a.sync())
    assert not a.loaded
    assert len(api.bundle_cas("mutating")) == len(api.bundle_cas("validating")) == 2
    clock.now += dt.timedelta(seconds=29)
    asyncio.run(a.sync())
    assert not a.loaded and "tls.crt" not in api.objects["secret", SAME_NAME.secret]["data"]
    clock.now += dt.timedelta(seconds=2)
    asyncio.run(a.sync())
    assert a.loaded
    assert served_issuer(a) in api.bundle_cas("mutating")
    assert served_issuer(a) in api.bundle_cas("validating")
