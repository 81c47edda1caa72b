"""Keys, certificates and their facts for the webhook's own CA (the I/O-free crypto edge).

`webhook.certs.rotation` decides from facts; this module turns the Secret's bytes into those facts
(`inspect_secret`, `inspect_bundle`) and carries a decision out on the Secret's data
(`apply_update`), making keys with `cryptography` where asked. Nothing here reads the network or
the environment, but key generation draws randomness and `apply_update` stamps `now`, so it sits
outside the pure core.

The Secret's layout (docs/operations.md, Certificates):

| key | what |
|---|---|
| `ca.crt` | every CA the bundles carry now (the trust bundle a client of the webhook needs) |
| `ca-current.crt`, `ca-current.key` | the CA that signs |
| `ca-next.crt`, `ca-next.key` | a CA being introduced: in the bundles, not signing yet |
| `ca-retired.crt` | CAs being retired: still in the bundles until `retire-after` |
| `tls.crt`, `tls.key` | the serving certificate (signed by the current CA) and its key |

and the annotations `gpuclass.cozystack.io/next-ca-trusted-at`, `.../current-ca-trusted-at`,
`.../retire-after` (RFC 3339) and
`.../rotate` (`ca` or `certificate`: a rotation asked for by hand).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from gpuclass.webhook.certs.rotation import (
    BundleEntry,
    CAFacts,
    CertPolicy,
    CertRef,
    RotateRequest,
    SecretState,
    ServingFacts,
    UpdateSecret,
    trusted_set,
)

ANNOTATION = "gpuclass.cozystack.io/"
TRUSTED_AT = ANNOTATION + "next-ca-trusted-at"
CURRENT_TRUSTED_AT = ANNOTATION + "current-ca-trusted-at"
RETIRE_AFTER = ANNOTATION + "retire-after"
ROTATE = ANNOTATION + "rotate"
CA_NOT_AFTER = ANNOTATION + "ca-not-after"
CERT_NOT_AFTER = ANNOTATION + "cert-not-after"
BUNDLE = "ca.crt"
CURRENT, CURRENT_KEY = "ca-current.crt", "ca-current.key"
NEXT, NEXT_KEY = "ca-next.crt", "ca-next.key"
RETIRED = "ca-retired.crt"
CERT, KEY = "tls.crt", "tls.key"
BACKDATE = dt.timedelta(minutes=5)  # clocks of the API servers may be a little behind ours
_PEM_END = b"-----END CERTIFICATE-----"


@dataclass(frozen=True, slots=True)
class Pair:
    """A certificate and its private key, both PEM (the key PKCS#8, unencrypted: it lives in a
    Secret or a mode-0600 file)."""

    cert: bytes
    key: bytes


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def new_ca(*, now: dt.datetime, validity: dt.timedelta) -> Pair:
    """A fresh self-signed CA (ECDSA P-256) that may sign server certificates only."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name(f"gpuclass-webhook-ca-{now:%Y%m%dT%H%M%S}")
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Pair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def new_serving(
    ca: Pair, hosts: Iterable[str], *, now: dt.datetime, validity: dt.timedelta
) -> Pair:
    """A serving certificate for `hosts` signed by `ca`, ending no later than the CA."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert)
    ca_key = serialization.load_pem_private_key(ca.key, None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key is not an EC key")
    names = sorted(hosts)
    sans: list[x509.GeneralName] = []
    for host in names:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(names[0] if names else "gpuclass-webhook"))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(min(now + validity, ca_cert.not_valid_after_utc))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return Pair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


# -- facts ------------------------------------------------------------------------------------------


def _ref(cert: x509.Certificate) -> CertRef:
    pem = cert.public_bytes(serialization.Encoding.PEM).decode()
    fingerprint = hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest()
    return CertRef(fingerprint, pem, cert.not_valid_after_utc)


def _certs(pem: bytes) -> tuple[list[x509.Certificate], bool]:
    """Every certificate in a PEM bundle, and whether all of it parsed."""
    certs: list[x509.Certificate] = []
    clean = True
    for block in pem.split(_PEM_END):
        if not block.strip():
            continue
        try:
            certs.append(x509.load_pem_x509_certificate(block + _PEM_END))
        except ValueError:
            clean = False
    return certs, clean


def _same_key(cert: x509.Certificate, key_pem: bytes) -> bool:
    try:
        key = serialization.load_pem_private_key(key_pem, None)
    except (ValueError, TypeError):
        return False
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        return False
    public = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    return bool(key.public_key().public_bytes(*public) == cert.public_key().public_bytes(*public))


def _ca(
    data: Mapping[str, bytes], cert_key: str, *, key_key: str
) -> tuple[CertRef | None, CAFacts | None]:
    certs, _ = _certs(data.get(cert_key, b""))
    if len(certs) != 1:
        return None, None
    cert = certs[0]
    ref = _ref(cert)
    if not _same_key(cert, data.get(key_key, b"")):
        return ref, None
    return ref, CAFacts(ref, cert.not_valid_before_utc)


def _signed_by(cert: x509.Certificate, ca: CertRef) -> bool:
    try:
        cert.verify_directly_issued_by(x509.load_pem_x509_certificate(ca.pem.encode()))
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _serving(data: Mapping[str, bytes], cas: Iterable[CertRef]) -> ServingFacts | None:
    certs, _ = _certs(data.get(CERT, b""))
    if not certs:
        return None
    leaf = certs[0]
    try:
        sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        hosts: frozenset[str] = frozenset()
    else:
        hosts = frozenset(
            [*sans.get_values_for_type(x509.DNSName)]
            + [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)]
        )
    issuer = next((ca.fingerprint for ca in cas if _signed_by(leaf, ca)), "")
    return ServingFacts(
        leaf.not_valid_before_utc,
        leaf.not_valid_after_utc,
        issuer,
        hosts,
        _same_key(leaf, data.get(KEY, b"")),
    )


def _time(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def _stamp(value: dt.datetime | None) -> str | None:
    """RFC 3339 in whole seconds, rounded up: every stamp is a time before which something must
    not happen (a CA signing, a CA leaving), so later is the safe side."""
    if value is None:
        return None
    utc = value.astimezone(dt.UTC)
    if utc.microsecond:
        utc = utc.replace(microsecond=0) + dt.timedelta(seconds=1)
    return utc.strftime("%Y-%m-%dT%H:%M:%SZ")


def inspect_secret(data: Mapping[str, bytes], annotations: Mapping[str, str]) -> SecretState:
    """The Secret's facts; anything missing, unparseable or mismatched counts as absent."""
    current_cert, current = _ca(data, CURRENT, key_key=CURRENT_KEY)
    _, upcoming = _ca(data, NEXT, key_key=NEXT_KEY)
    retired, _ = _certs(data.get(RETIRED, b""))
    signers = [c.cert for c in (current, upcoming) if c is not None]
    if current_cert is not None and current is None:
        signers.append(current_cert)
    asked = annotations.get(ROTATE, "")
    rotate: RotateRequest = (
        "ca" if asked == "ca" else "certificate" if asked == "certificate" else ""
    )
    return SecretState(
        current=current,
        current_cert=current_cert,
        next=upcoming,
        retired=tuple(_ref(c) for c in retired),
        serving=_serving(data, signers),
        next_trusted_at=_time(annotations.get(TRUSTED_AT)) if upcoming else None,
        retire_after=_time(annotations.get(RETIRE_AFTER)),
        rotate=rotate,
        current_trusted_at=_time(annotations.get(CURRENT_TRUSTED_AT)) if current else None,
    )


def inspect_bundle(pem: bytes) -> BundleEntry:
    """The CAs a `caBundle` (decoded from base64) carries."""
    certs, clean = _certs(pem)
    return BundleEntry(tuple(_ref(c) for c in certs), clean)


def bundle_pem(certs: Iterable[CertRef]) -> bytes:
    """The certificates concatenated as one PEM bundle, in the order given: the `caBundle` a
    configuration trusts and the Secret's `ca.crt`."""
    return "".join(c.pem for c in certs).encode()


# -- carrying out a decision --------------------------------------------------------------------------


def apply_update(
    data: Mapping[str, bytes],
    annotations: Mapping[str, str],
    *,
    step: UpdateSecret,
    now: dt.datetime,
    policy: CertPolicy,
) -> tuple[dict[str, bytes], dict[str, str]]:
    """The Secret's new data and annotations after `step` (keys made here where asked)."""
    out = dict(data)
    if step.promote:
        out[CURRENT], out[CURRENT_KEY] = out.pop(NEXT, b""), out.pop(NEXT_KEY, b"")
    if step.drop_next:
        out.pop(NEXT, None)
        out.pop(NEXT_KEY, None)
    if step.new_ca:
        made = new_ca(now=now, validity=policy.ca_validity)
        slot = (CURRENT, CURRENT_KEY) if step.new_ca == "current" else (NEXT, NEXT_KEY)
        out[slot[0]], out[slot[1]] = made.cert, made.key
    if step.issue_certificate:
        pair = new_serving(
            Pair(out[CURRENT], out[CURRENT_KEY]),
            policy.hosts,
            now=now,
            validity=policy.cert_validity,
        )
        out[CERT], out[KEY] = pair.cert, pair.key
    if step.retired:
        out[RETIRED] = bundle_pem(step.retired)
    else:
        out.pop(RETIRED, None)
    notes = dict(annotations)
    _set(notes, TRUSTED_AT, value=_stamp(step.next_trusted_at))
    _set(notes, RETIRE_AFTER, value=_stamp(step.retire_after))
    _set(notes, CURRENT_TRUSTED_AT, value=_stamp(step.current_trusted_at))
    if step.clear_rotate:
        notes.pop(ROTATE, None)
    state = inspect_secret(out, notes)
    out[BUNDLE] = bundle_pem(trusted_set(state, now))
    _set(notes, CA_NOT_AFTER, value=_stamp(state.current.cert.not_after) if state.current else None)
    _set(notes, CERT_NOT_AFTER, value=_stamp(state.serving.not_after) if state.serving else None)
    return out, notes


def _set(notes: dict[str, str], key: str, *, value: str | None) -> None:
    if value is None:
        notes.pop(key, None)
    else:
        notes[key] = value
