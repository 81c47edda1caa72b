"""The webhook rotates its own CA and certificate on a real kube-apiserver with traffic flowing.

The chart's default certificate mode (docs/operations.md, Certificates), for real: the chart's
empty Secret, its RBAC (the webhook runs as the chart's ServiceAccount, limited by resource name)
and its two webhook configurations, rendered by Helm with no caBundle and only `clientConfig`
pointed at a local `gpuclass-webhook --cert-secret`. Lifetimes are seconds instead of days, so
that within half a minute the serving certificate is renewed several times and the CA is
replaced at least once. All the while, three client threads create GPUClasses and VMIs (dry run:
the API server still calls every webhook, failurePolicy Fail) through the API server.

What the issue asks for, checked from outside the webhook: no admission fails, the caBundle the
API server uses really changed (and carried two CAs during the hand-over), and the certificate
the webhook serves really changed, to one signed by a new CA. A second replica races the first
for every write and must end up serving the same certificate. (The overlap is what this test
proves: run with `--cert-overlap-seconds=0.001` instead, the API server refuses the new
certificate for a moment at each CA hand-over, and tens of admissions fail.)
"""

from __future__ import annotations

import base64
import hashlib
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
from cryptography import x509

from gpuclass.webhook.certs.tls import self_signed
from tests.builders import World, api_gpuclass, api_namespace
from tests.builders import selecting_vmi as vmi
from tests.chart_helpers import NAMESPACE, documents, render, webhook_identity
from tests.controlplane.api import Api, ApiError, RawObject
from tests.controlplane.cluster import ControlPlane, eventually, free_port
from tests.e2e_reconciler_helpers import PermittedDevices
from tests.webhook_process import WebhookProcess

pytestmark = pytest.mark.controlplane

TENANT = "tenant-certrotation"
KUBEVIRT_NS = "cozy-kubevirt"
# Seconds, not days: CA 40 s, a next CA with 25 s left; certificate 12 s, renewed with 6 s left;
# a new CA is 4 s in every bundle before it signs, the old one 4 s after; replicas poll twice a second.
LIFETIMES = [
    "--cert-ca-validity-seconds=40",
    "--cert-ca-renew-before-seconds=25",
    "--cert-validity-seconds=12",
    "--cert-renew-before-seconds=6",
    "--cert-overlap-seconds=4",
    "--cert-poll-seconds=0.5",
]
RUN_SECONDS = 32.0


def chart_objects(template: str) -> list[RawObject]:
    return documents(render(), template=template)


def local_configurations(url: str) -> list[RawObject]:
    """The chart's configurations as rendered (no caBundle in this mode), calling `url`."""
    objects = chart_objects("webhook-configurations.yaml")
    for configuration in objects:
        for hook in configuration["webhooks"]:
            assert "caBundle" not in hook["clientConfig"]
            hook["clientConfig"] = {"url": url + hook["clientConfig"]["service"]["path"]}
    return objects


@dataclass
class Observed:
    admitted: int = 0
    failures: list[str] = field(default_factory=list)
    bundles: list[bytes] = field(default_factory=list)  # each distinct caBundle, in order seen
    served: list[x509.Certificate] = field(default_factory=list)  # each distinct served cert
    most_cas_in_a_bundle: int = 0


def served_certificate(port: int) -> x509.Certificate:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def bundles_now(api: Api, configurations: list[RawObject]) -> set[bytes]:
    found = set()
    for configuration in configurations:
        live = api.get(
            "admissionregistration.k8s.io/v1",
            configuration["kind"],
            configuration["metadata"]["name"],
        )
        assert live is not None
        for hook in live["webhooks"]:
            found.add(base64.b64decode(hook["clientConfig"].get("caBundle", "")))
    return found


@pytest.fixture
def setting(control_plane: ControlPlane) -> Iterator[World]:
    api = control_plane.admin
    classes = World()
    api.apply([api_namespace(NAMESPACE), api_namespace(KUBEVIRT_NS), api_namespace(TENANT)])
    api.apply(chart_objects("rbac-webhook.yaml"))
    policy = chart_objects("webhook-cabundle-policy.yaml")
    api.apply(policy)
    secret = [o for o in chart_objects("webhook-tls.yaml") if o["kind"] == "Secret"]
    assert len(secret) == 1 and "data" not in secret[0]
    api.delete(secret[0])
    api.apply(secret)
    permitted = PermittedDevices()
    permitted.permit(api, [classes.whole_resource])
    created = api.create(api_gpuclass(classes.whole, classes.whole_resource))
    try:
        yield classes
    finally:
        api.delete(created)
        api.delete(secret[0])
        for obj in reversed(policy):
            api.delete(obj)
        permitted.restore(api)


def test_ca_and_certificate_rotate_with_traffic_flowing_and_no_admission_fails(
    control_plane: ControlPlane, setting: World, tmp_path_factory: pytest.TempPathFactory
) -> None:
    api, classes = control_plane.admin, setting
    port = free_port()
    configurations = local_configurations(f"https://127.0.0.1:{port}")
    api.apply(configurations)
    name, groups = webhook_identity()
    identity = control_plane.user(name, groups)
    mutating, validating = (
        next(c["metadata"]["name"] for c in configurations if c["kind"] == kind)
        for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
    )

    def replica(port: int) -> WebhookProcess:
        return WebhookProcess(
            [
                "--kubeconfig", str(identity.kubeconfig),
                "--port", str(port),
                "--cert-secret", "gpuclass-webhook-certs",
                "--cert-namespace", NAMESPACE,
                "--cert-mutating-webhook-configuration", mutating,
                "--cert-validating-webhook-configuration", validating,
                "--tls-hosts", "127.0.0.1",
                *LIFETIMES,
            ],
            tls_dir=tmp_path_factory.mktemp("cert-rotation-tls"),
        )  # fmt: skip

    _rights_are_limited_by_name(identity.api(), mutating)
    _only_the_ca_bundle_may_change(identity.api(), mutating, tmp_path_factory)
    server = replica(port)
    other = replica(free_port())  # a second replica racing for the same writes, not called
    try:
        _run(api, server, configurations, classes)
        eventually(
            lambda: served_certificate(server.port) == served_certificate(other.port),
            timeout=10,
            what="both replicas serve the one certificate of the Secret",
        )
        writes = [
            e
            for replica_ in (server, other)
            for e in replica_.logs()
            if e.get("msg") == "certificate Secret written"
        ]
        assert any(e.get("promoted") for e in writes), "a next CA was promoted"
        lost = [
            e
            for replica_ in (server, other)
            for e in replica_.logs()
            if e.get("msg") == "another replica wrote first; reading again"
        ]
        assert lost, "the replicas raced on the real API server (409) and the loser adopted"
    finally:
        other.stop()
        server.stop()
        for configuration in configurations:
            api.delete(configuration)


def _rights_are_limited_by_name(sa: Api, mutating: str) -> None:
    """The chart's RBAC: get/update on the one Secret and the two configurations, nothing else."""
    secrets = f"/api/v1/namespaces/{NAMESPACE}/secrets"
    configurations = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
    with sa:
        own = sa.call("GET", f"{secrets}/gpuclass-webhook-certs")
        assert sa.request("PUT", f"{secrets}/gpuclass-webhook-certs", body=own).status_code == 200
        assert sa.request("GET", f"{configurations}/{mutating}").status_code == 200
        refused = {
            ("GET", f"{secrets}/gpuclass-webhook-tls"),
            ("GET", secrets),
            ("POST", secrets),
            ("GET", f"{configurations}/other"),
            ("GET", configurations),
        }
        body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}}
        got = {
            (m, p): sa.request(m, p, body=body if m == "POST" else None).status_code
            for m, p in refused
        }
        assert set(got.values()) == {403}, got


def _only_the_ca_bundle_may_change(
    sa: Api, mutating: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The chart's ValidatingAdmissionPolicy (docs/operations.md, RBAC): the webhook's identity
    may write the caBundle of its configurations, and nothing else in them."""
    path = f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{mutating}"
    pem = self_signed(tmp_path_factory.mktemp("foreign-ca"), ["127.0.0.1"], days=1).ca.read_bytes()

    def update(change: Callable[[RawObject], None], *, dry_run: bool = False) -> tuple[int, str]:
        body = sa.call("GET", path)
        change(body)
        answer = sa.request("PUT", path, body=body, params={"dryRun": "All"} if dry_run else None)
        return answer.status_code, answer.text

    def fail_open(body: RawObject) -> None:
        body["webhooks"][0]["failurePolicy"] = "Ignore"

    def elsewhere(body: RawObject) -> None:
        body["webhooks"][0]["clientConfig"]["url"] = "https://127.0.0.1:1/mutate"

    def fewer(body: RawObject) -> None:
        del body["webhooks"][-1]

    def ca_bundle(body: RawObject) -> None:
        for hook in body["webhooks"]:
            hook["clientConfig"]["caBundle"] = base64.b64encode(pem).decode()

    with sa:
        # the policy takes effect once the API server has loaded it (a dry run till then, so
        # that a change let through before that is not stored)
        eventually(
            lambda: update(fail_open, dry_run=True)[0] == 403,
            timeout=30,
            what="the caBundle policy applies",
        )
        for change in (fail_open, elsewhere, fewer):
            status, text = update(change)
            assert status == 403 and "webhook-cabundle" in text, (change.__name__, text)
        assert update(ca_bundle)[0] == 200
        assert sa.call("GET", path)["webhooks"][0]["failurePolicy"] == "Fail"


def _resolves(api: Api, classes: World) -> bool:
    try:
        stored = api.create(vmi(TENANT, [{"className": classes.whole}]), dryRun="All")
    except ApiError:
        return False
    return bool(stored["spec"]["domain"]["devices"].get("gpus"))


def _run(api: Api, server: WebhookProcess, configurations: list[RawObject], classes: World) -> None:
    eventually(lambda: _resolves(api, classes), timeout=60, what="webhook ready behind the API")
    seen = Observed()
    lock = threading.Lock()
    stop = threading.Event()

    def traffic(kind: str) -> None:
        while not stop.is_set():
            try:
                if kind == "vmi":
                    stored = api.create(vmi(TENANT, [{"className": classes.whole}]), dryRun="All")
                    assert stored["spec"]["domain"]["devices"]["gpus"], "not resolved"
                else:
                    probe = api_gpuclass(f"probe-{time.monotonic_ns()}", "e2e.example.com/probe")
                    api.create(probe, dryRun="All")
            except (ApiError, AssertionError) as exc:
                with lock:
                    seen.failures.append(f"{time.monotonic():.1f} {kind}: {exc}")
            else:
                with lock:
                    seen.admitted += 1

    def watch() -> None:
        while not stop.is_set():
            current = bundles_now(api, configurations)
            certificate = served_certificate(server.port)
            with lock:
                for bundle in current:
                    if bundle not in seen.bundles:
                        seen.bundles.append(bundle)
                    count = len(x509.load_pem_x509_certificates(bundle)) if bundle else 0
                    seen.most_cas_in_a_bundle = max(seen.most_cas_in_a_bundle, count)
                if certificate not in seen.served:
                    seen.served.append(certificate)
            time.sleep(0.2)

    threads = [
        threading.Thread(target=traffic, args=(k,), daemon=True) for k in ("vmi", "vmi", "class")
    ]
    threads.append(threading.Thread(target=watch, daemon=True))
    for thread in threads:
        thread.start()
    time.sleep(RUN_SECONDS)
    stop.set()
    for thread in threads:
        thread.join(timeout=30)

    assert seen.failures == [], "\n".join(seen.failures[:10])
    assert seen.admitted > 100
    issuers = {c.issuer.rfc4514_string() for c in seen.served}
    assert len(seen.served) >= 4, "the serving certificate was renewed several times"
    assert len(issuers) >= 2, "a certificate signed by a new CA was served"
    assert len(seen.bundles) >= 3, "the caBundle changed: next CA added, then old CA dropped"
    assert seen.most_cas_in_a_bundle == 2, "old and new CA were trusted together"
    fingerprints = {hashlib.sha256(b).hexdigest() for b in seen.bundles}
    assert len(fingerprints) == len(seen.bundles)
