"""The webhook's certificates: templates/webhook-tls.yaml and _tls.tpl, in each certificate mode.

Mode "helm": one consistent CA and serving certificate across the Secret, the caBundles and the
Deployment, the CA key apart, and upgrades that reuse, re-issue or replace as the lifetimes say.
cert-manager mode: injected CA, no Secret. Mode "webhook" (the default): no caBundle rendered,
the live one kept on upgrade, lifetimes that cannot rotate refused at render time.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from tests.chart.common import CERT_MANAGER, HELM_TLS, mounted_secret, pem_certificate
from tests.chart_helpers import (
    NAMESPACE,
    RawObject,
    chart_with_existing_tls_secret,
    copy_chart,
    deployment,
    documents,
    of_kind,
    one,
    pod_spec,
    render,
    render_objects,
    webhooks,
    workloads,
)


def _tls_secret(objects: list[RawObject]) -> RawObject:
    return one(objects, "Secret", "gpuclass-webhook-tls")


def _ca_secret(objects: list[RawObject]) -> RawObject:
    return one(objects, "Secret", "gpuclass-webhook-tls-ca")


def test_self_managed_certificate_is_consistent_across_every_object() -> None:
    objects = render_objects(HELM_TLS)
    secret = _tls_secret(objects)
    assert secret["type"] == "kubernetes.io/tls"
    ca = pem_certificate(secret["data"]["ca.crt"])
    cert = pem_certificate(secret["data"]["tls.crt"])
    cert.verify_directly_issued_by(ca)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "gpuclass-webhook.cozy-system.svc" in sans.get_values_for_type(x509.DNSName)
    for name, hook in webhooks(objects).items():
        assert hook["clientConfig"]["caBundle"] == secret["data"]["ca.crt"], name
    webhook_pods = deployment(objects, "webhook")["spec"]["template"]
    pem = base64.b64decode(secret["data"]["tls.crt"]).decode()
    assert (
        webhook_pods["metadata"]["annotations"]["checksum/tls"]
        == hashlib.sha256(pem.encode()).hexdigest()
    )
    assert mounted_secret(deployment(objects, "webhook")) == secret["metadata"]["name"]


def test_self_managed_secret_records_its_expiry_dates() -> None:
    secret = _tls_secret(
        render_objects({"tls": {"mode": "helm", "selfManaged": {"certValidityDays": 100}}})
    )
    annotations = secret["metadata"]["annotations"]
    cert = pem_certificate(secret["data"]["tls.crt"])
    recorded = datetime.datetime.fromisoformat(annotations["gpuclass.cozystack.io/cert-not-after"])
    assert abs(recorded - cert.not_valid_after_utc) < datetime.timedelta(minutes=5)
    assert cert.not_valid_after_utc - datetime.datetime.now(datetime.UTC) > datetime.timedelta(
        days=99
    )
    ca = pem_certificate(secret["data"]["ca.crt"])
    recorded_ca = datetime.datetime.fromisoformat(annotations["gpuclass.cozystack.io/ca-not-after"])
    assert abs(recorded_ca - ca.not_valid_after_utc) < datetime.timedelta(minutes=5)


def test_webhook_pods_never_mount_the_ca_key() -> None:
    spec = pod_spec(deployment(render_objects(HELM_TLS), "webhook"))
    [tls] = [v for v in spec["volumes"] if v["name"] == "tls"]
    assert {item["key"] for item in tls["secret"]["items"]} == {"tls.crt", "tls.key", "ca.crt"}


def test_the_serving_secret_does_not_hold_the_ca_private_key() -> None:
    """Whoever reads the webhook's Secret cannot sign certificates: the CA key lives apart."""
    objects = render_objects(HELM_TLS)
    serving, ca = _tls_secret(objects), _ca_secret(objects)
    assert set(serving["data"]) == {"ca.crt", "tls.crt", "tls.key"}
    assert not any(
        "PRIVATE KEY" in base64.b64decode(v).decode() and k != "tls.key"
        for k, v in serving["data"].items()
    )
    assert (
        set(ca["data"]) == {"ca.crt", "ca.key"}
        and ca["data"]["ca.crt"] == serving["data"]["ca.crt"]
    )
    ca_key = serialization.load_pem_private_key(base64.b64decode(ca["data"]["ca.key"]), None)
    assert ca_key.public_key() == pem_certificate(ca["data"]["ca.crt"]).public_key()
    assert (
        serialization.load_pem_private_key(
            base64.b64decode(serving["data"]["tls.key"]), None
        ).public_key()
        != ca_key.public_key()
    )
    for workload in workloads(objects):
        for volume in pod_spec(workload).get("volumes", []):
            assert volume.get("secret", {}).get("secretName") != ca["metadata"]["name"]


def _render_with_existing(tmp_path: Any, *secrets: RawObject | None) -> list[RawObject]:
    chart = chart_with_existing_tls_secret(tmp_path, *secrets)
    return documents(render(HELM_TLS, chart=chart))


def _previous(objects: list[RawObject]) -> tuple[RawObject, RawObject]:
    return _tls_secret(objects), _ca_secret(objects)


def _expire_in(secret: RawObject, key: str, days: int) -> RawObject:
    changed = json.loads(json.dumps(secret))
    when = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=days)
    changed["metadata"]["annotations"][key] = when.strftime("%Y-%m-%dT%H:%M:%SZ")
    return changed


def test_upgrade_reuses_a_valid_secret_so_the_ca_bundle_stays_in_sync(tmp_path: Any) -> None:
    first, first_ca = _previous(render_objects(HELM_TLS))
    objects = _render_with_existing(tmp_path, first, first_ca)
    second = _tls_secret(objects)
    assert second["data"] == first["data"]
    assert _ca_secret(objects)["data"] == first_ca["data"]
    assert {h["clientConfig"]["caBundle"] for h in webhooks(objects).values()} == {
        first["data"]["ca.crt"]
    }


def test_upgrade_reissues_a_certificate_near_expiry_with_the_same_ca(tmp_path: Any) -> None:
    first, first_ca = _previous(render_objects(HELM_TLS))
    ageing = _expire_in(first, "gpuclass.cozystack.io/cert-not-after", 10)  # renewBeforeDays 30
    objects = _render_with_existing(tmp_path, ageing, first_ca)
    second = _tls_secret(objects)
    assert second["data"]["ca.crt"] == first["data"]["ca.crt"]
    assert second["data"]["tls.crt"] != first["data"]["tls.crt"]
    pem_certificate(second["data"]["tls.crt"]).verify_directly_issued_by(
        pem_certificate(first["data"]["ca.crt"])
    )
    assert {h["clientConfig"]["caBundle"] for h in webhooks(objects).values()} == {
        first["data"]["ca.crt"]
    }


def test_upgrade_reissues_when_the_service_name_changed(tmp_path: Any) -> None:
    first, first_ca = _previous(render_objects(HELM_TLS))
    moved = json.loads(json.dumps(first))
    moved["metadata"]["annotations"]["gpuclass.cozystack.io/service-host"] = "old.cozy-system.svc"
    second = _tls_secret(_render_with_existing(tmp_path, moved, first_ca))
    assert second["data"]["ca.crt"] == first["data"]["ca.crt"]
    assert second["data"]["tls.crt"] != first["data"]["tls.crt"]


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda s, c: (s, _expire_in(c, "gpuclass.cozystack.io/ca-not-after", 5)), id="ca-near-expiry"),
        pytest.param(lambda s, c: (s, {**c, "data": {"ca.crt": c["data"]["ca.crt"]}}), id="ca-key-lost"),
        pytest.param(lambda s, c: (s, None), id="ca-secret-deleted"),
        pytest.param(lambda s, c: (None, None), id="both-deleted"),
    ],
)  # fmt: skip
def test_upgrade_makes_a_new_ca_when_the_old_one_cannot_sign(tmp_path: Any, damage: Any) -> None:
    first, first_ca = _previous(render_objects(HELM_TLS))
    objects = _render_with_existing(tmp_path, *damage(first, first_ca))
    second = _tls_secret(objects)
    assert second["data"]["ca.crt"] != first["data"]["ca.crt"]
    pem_certificate(second["data"]["tls.crt"]).verify_directly_issued_by(
        pem_certificate(second["data"]["ca.crt"])
    )
    assert {h["clientConfig"]["caBundle"] for h in webhooks(objects).values()} == {
        second["data"]["ca.crt"]
    }
    assert _ca_secret(objects)["data"]["ca.crt"] == second["data"]["ca.crt"]


def test_upgrade_from_the_single_secret_layout_keeps_the_ca_and_moves_its_key(
    tmp_path: Any,
) -> None:
    """Releases before the split kept ca.key in the serving Secret; upgrading keeps the caBundle."""
    first, first_ca = _previous(render_objects(HELM_TLS))
    old_layout = json.loads(json.dumps(first))
    old_layout["data"]["ca.key"] = first_ca["data"]["ca.key"]
    objects = _render_with_existing(tmp_path, old_layout)
    second, second_ca = _previous(objects)
    assert second["data"] == first["data"]  # same CA and certificate, ca.key gone
    assert second_ca["data"] == first_ca["data"]
    assert {h["clientConfig"]["caBundle"] for h in webhooks(objects).values()} == {
        first["data"]["ca.crt"]
    }


def test_cert_manager_mode_injects_the_ca_and_renders_no_secret() -> None:
    objects = render_objects(CERT_MANAGER)
    assert not of_kind(objects, "Secret")
    certificate = one(objects, "Certificate", "gpuclass-webhook")
    assert "gpuclass-webhook.cozy-system.svc" in certificate["spec"]["dnsNames"]
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        configuration = one(objects, kind)
        assert configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
            f"{NAMESPACE}/{certificate['metadata']['name']}"
        )
        for hook in configuration["webhooks"]:
            assert "caBundle" not in hook["clientConfig"]
    assert mounted_secret(deployment(objects, "webhook")) == certificate["spec"]["secretName"]
    # the chart's own CA chain: self-signed Issuer -> CA Certificate -> CA Issuer -> serving cert
    issuer = one(objects, "Issuer", certificate["spec"]["issuerRef"]["name"])
    ca_certificate = one(objects, "Certificate", "gpuclass-webhook-ca")
    assert issuer["spec"]["ca"]["secretName"] == ca_certificate["spec"]["secretName"]
    assert ca_certificate["spec"]["isCA"] is True
    assert (
        "selfSigned" in one(objects, "Issuer", ca_certificate["spec"]["issuerRef"]["name"])["spec"]
    )
    assert "checksum/tls" not in (
        deployment(objects, "webhook")["spec"]["template"]["metadata"].get("annotations") or {}
    )


def test_cert_manager_mode_uses_a_given_issuer() -> None:
    ref = {"name": "platform-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}
    objects = render_objects({"tls": {"certManager": {"enabled": True, "issuerRef": ref}}})
    assert not of_kind(objects, "Issuer")
    assert one(objects, "Certificate")["spec"]["issuerRef"] == ref


def test_webhook_managed_mode_mounts_no_certificate_and_renders_no_ca_bundle() -> None:
    """`helm template` (and Argo CD) renders no caBundle: the webhook writes it; nothing to roll."""
    objects = render_objects()
    for name, hook in webhooks(objects).items():
        assert "caBundle" not in hook["clientConfig"], name
    pods = deployment(objects, "webhook")["spec"]["template"]
    assert "tls" not in {v["name"] for v in pods["spec"]["volumes"]}
    assert "checksum/tls" not in (pods["metadata"].get("annotations") or {})


def test_webhook_managed_mode_keeps_the_live_ca_bundle_on_upgrade(tmp_path: Any) -> None:
    """An upgrade renders the caBundle the live configurations carry (lookup), so that the
    upgrade from mode "helm" does not take the trusted CA away before the webhook replaced it."""
    chart = copy_chart(tmp_path)
    helpers = chart / "templates" / "_tls.tpl"
    lookup = (
        '{{- $live := lookup "admissionregistration.k8s.io/v1" .kind "" .configuration'
        " | default dict -}}"
    )
    text = helpers.read_text()
    assert text.count(lookup) == 1
    names = sorted(webhooks(render_objects()))
    assert len(names) == 6
    live = {
        "webhooks": [{"name": n, "clientConfig": {"caBundle": f"bundle-of-{n}"}} for n in names]
    }
    helpers.write_text(text.replace(lookup, "{{- $live := " + _go_literal(live) + " -}}"))
    objects = documents(render(chart=chart))
    for name, hook in webhooks(objects).items():
        assert hook["clientConfig"]["caBundle"] == f"bundle-of-{name}"


def _go_literal(value: Any) -> str:
    """`value` as a template expression (JSON through fromJson)."""
    return "(" + json.dumps(json.dumps(value)) + " | fromJson)"


@pytest.mark.parametrize(
    ("tls", "message"),
    [
        ({"certValidityDays": 30, "certRenewBeforeDays": 30}, "certRenewBeforeDays"),
        ({"caValidityDays": 365, "caRenewBeforeDays": 400}, "caRenewBeforeDays"),
        ({"caRenewBeforeDays": 1, "overlapMinutes": 720}, "overlapMinutes"),
        ({"overlapMinutes": 1, "pollSeconds": 3600}, "pollSeconds"),
        ({"overlapMinutes": 1, "pollSeconds": 21}, "pollSeconds"),
    ],
)
def test_webhook_managed_lifetimes_that_cannot_rotate_fail_the_render(
    tls: dict[str, int], message: str
) -> None:
    with pytest.raises(Exception, match=message):
        render({"tls": {"webhookManaged": tls}})


@pytest.mark.parametrize(
    ("tls", "overlap_seconds", "poll_seconds"),
    [
        pytest.param({}, 3600, 10, id="defaults-60-minutes-10-seconds"),
        pytest.param({"overlapMinutes": 1, "pollSeconds": 20}, 60, 20, id="exactly-three-polls"),
    ],
)
def test_webhook_managed_overlap_of_three_polls_renders(
    tls: dict[str, int], overlap_seconds: int, poll_seconds: int
) -> None:
    """An overlap of at least three polls renders, and the webhook gets both as flags in seconds;
    the webhook keeps its own CA, so the chart renders its Secret empty and no caBundle."""
    objects = render_objects({"tls": {"webhookManaged": tls}})
    [container] = [
        c for c in pod_spec(deployment(objects, "webhook"))["containers"] if c["name"] == "webhook"
    ]
    flags = [a for a in container["args"] if a.startswith(("--cert-overlap", "--cert-poll"))]
    assert flags == [
        f"--cert-overlap-seconds={overlap_seconds}",
        f"--cert-poll-seconds={poll_seconds}",
    ]
    [secret] = of_kind(objects, "Secret")  # created empty: the webhook fills and rotates it
    assert (secret["metadata"]["name"], "data" in secret) == ("gpuclass-webhook-certs", False)
    assert f"--cert-secret={secret['metadata']['name']}" in container["args"]
    assert [h["clientConfig"].get("caBundle") for h in webhooks(objects).values()] == [None] * 6
