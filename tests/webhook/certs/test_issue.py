"""The certificate edge with real keys: facts read back, and months of rotations walked.

The walk runs the plan and `apply_update` against an in-memory Secret and two webhook
configurations, ticking a clock through several CA and certificate lifetimes. At every tick it
checks, with signatures rather than the plan's own facts, what the API server would check: the
certificate in the Secret, and the one before it (a replica that has not reloaded yet), verify
against every caBundle; and no certificate is ever signed by a CA that every bundle has not
carried for at least one overlap, except the very first.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from cryptography import x509
from cryptography.exceptions import InvalidSignature

from gpuclass.webhook.certs import issue as ci
from gpuclass.webhook.certs.rotation import CertPolicy, UpdateSecret, Wait, WriteBundles, plan

HOUR = dt.timedelta(hours=1)
START = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
HOSTS = frozenset({"gpuclass-webhook.cozy-system.svc", "127.0.0.1"})
POLICY = CertPolicy(
    ca_validity=100 * HOUR,
    ca_renew_before=30 * HOUR,
    cert_validity=20 * HOUR,
    cert_renew_before=5 * HOUR,
    overlap=HOUR,
    hosts=HOSTS,
)


@dataclass
class World:
    data: dict[str, bytes] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    bundles: dict[str, list[bytes]] = field(
        default_factory=lambda: {"mutating": [b"", b""], "validating": [b""]}
    )
    writes: int = 0

    def settle(self, now: dt.datetime) -> Wait:
        for _ in range(10):
            state = ci.inspect_secret(self.data, self.notes)
            seen = {n: [ci.inspect_bundle(b) for b in e] for n, e in self.bundles.items()}
            step = plan(state, seen, now=now, policy=POLICY)
            if isinstance(step, Wait):
                return step
            self.writes += 1
            if isinstance(step, WriteBundles):
                for name in step.configurations:
                    pem = ci.bundle_pem(step.certs)
                    self.bundles[name] = [pem for _ in self.bundles[name]]
            else:
                assert isinstance(step, UpdateSecret)
                self.data, self.notes = ci.apply_update(
                    self.data, self.notes, step=step, now=now, policy=POLICY
                )
        raise AssertionError("the plan did not settle in 10 steps")


def verifies(cert_pem: bytes, bundle: bytes, now: dt.datetime) -> bool:
    leaf = x509.load_pem_x509_certificate(cert_pem)
    if not leaf.not_valid_before_utc <= now < leaf.not_valid_after_utc:
        return False
    for ca in x509.load_pem_x509_certificates(bundle) if bundle.strip() else []:
        try:
            leaf.verify_directly_issued_by(ca)
        except (ValueError, InvalidSignature):
            continue
        if ca.not_valid_after_utc > now:
            return True
    return False


def test_facts_of_a_fresh_secret() -> None:
    world = World()
    world.settle(START)
    state = ci.inspect_secret(world.data, world.notes)
    assert state.current is not None and state.serving is not None
    assert state.serving.issuer == state.current.cert.fingerprint
    assert state.serving.key_matches and state.serving.hosts >= HOSTS
    assert state.serving.not_after == START + POLICY.cert_validity
    assert world.data["ca.crt"] == world.bundles["validating"][0]
    assert world.writes == 3  # the CA, the bundles, then the certificate it signs


def test_corrupt_data_reads_as_absent() -> None:
    world = World()
    world.settle(START)
    broken = {
        **world.data,
        "ca-current.key": b"garbage",
        "tls.crt": b"-----BEGIN CERTIFICATE-----\nxx",
    }
    state = ci.inspect_secret(broken, {})
    assert state.current is None and state.current_cert is not None and state.serving is None
    assert not ci.inspect_bundle(b"-----BEGIN CERTIFICATE-----\nxx-----END CERTIFICATE-----").clean


def test_a_walk_through_many_rotations_never_serves_an_untrusted_certificate() -> None:
    world = World()
    now = START
    world.settle(now)
    first_ca = world.data["ca-current.crt"]
    trusted_since: dict[bytes, dt.datetime] = {}
    cas, certs = {first_ca}, {world.data["tls.crt"]}
    previous = world.data["tls.crt"]
    while now < START + 400 * HOUR:
        now += dt.timedelta(minutes=15)
        world.settle(now)
        for pem in {ca for e in world.bundles.values() for b in e for ca in _split(b)}:
            if all(pem in _split(b) for e in world.bundles.values() for b in e):
                trusted_since.setdefault(pem, now)
        cert, ca = world.data["tls.crt"], world.data["ca-current.crt"]
        for bundle in (b for e in world.bundles.values() for b in e):
            assert verifies(cert, bundle, now), f"served certificate untrusted at {now}"
            assert verifies(previous, bundle, now), f"lagging replica untrusted at {now}"
        if ca != first_ca:
            assert now - trusted_since[ca] >= POLICY.overlap
        cas.add(ca)
        certs.add(cert)
        previous = cert
    assert len(cas) >= 4  # a CA lives 100 h and is replaced with 30 h left
    assert len(certs) >= 20


def _split(bundle: bytes) -> set[bytes]:
    end = b"-----END CERTIFICATE-----\n"
    return {part + end for part in bundle.split(end) if part.strip()}
