"""TLS for the webhook: a self-signed certificate when none is given, and hot reload.

`self_signed` makes a throwaway CA and a serving certificate for the given host
names with `cryptography`. `ReloadingContext` keeps one `ssl.SSLContext` for the
server's life and loads a new chain into it when the files change (cert-manager
rotates them): new handshakes get the new certificate, open connections finish
on the old one, nothing restarts.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import logging
import os
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

log = logging.getLogger(__name__)

MODERN_TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"


@dataclass(frozen=True)
class CertFiles:
    cert: Path
    key: Path
    ca: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def self_signed(directory: Path, hosts: list[str], *, days: int = 365) -> CertFiles:
    """Write ca.crt, tls.crt and tls.key (mode 0600) into `directory` and return their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("gpuclass-webhook-ca"))
        .issuer_name(_name("gpuclass-webhook-ca"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(hosts[0] if hosts else "gpuclass-webhook"))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    files = CertFiles(directory / "tls.crt", directory / "tls.key", directory / "ca.crt")
    files.ca.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    fd = os.open(files.key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    return files


def certificate_expiry(cert_file: Path) -> float:
    """notAfter of the first certificate in the file, as a Unix timestamp."""
    cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
    return cert.not_valid_after_utc.timestamp()


class ReloadingContext:
    """One server SSLContext whose certificate chain follows the files."""

    def __init__(self, cert: Path, key: Path) -> None:
        self.cert, self.key = cert, key
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.context.set_ciphers(MODERN_TLS12_CIPHERS)
        self._stamp: tuple[int, int] | None = None
        self.expiry = 0.0
        self.reload()

    def _current(self) -> tuple[int, int]:
        return (self.cert.stat().st_mtime_ns, self.key.stat().st_mtime_ns)

    def reload(self) -> bool:
        """Load the chain if the files changed; keep the old one if the new pair is unusable."""
        stamp = self._current()
        if stamp == self._stamp:
            return False
        try:
            self.context.load_cert_chain(self.cert, self.key)
            self.expiry = certificate_expiry(self.cert)
        except (ssl.SSLError, ValueError, OSError) as exc:
            if self._stamp is None:
                raise
            log.warning(
                "new certificate not loaded; serving the previous one",
                extra={"fields": {"error": str(exc)}},
            )
            return False
        self._stamp = stamp
        log.info(
            "certificate loaded",
            extra={"fields": {"cert": str(self.cert), "not_after": self.expiry}},
        )
        return True
