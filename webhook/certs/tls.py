"""TLS for the webhook: a self-signed certificate when none is given, and hot reload.

`self_signed` makes a throwaway CA and a serving certificate for the given host
names (with `webhook.certs.issue`, the webhook-managed mode's issuer). `ReloadingContext` follows the certificate files
(cert-manager and kubelet rotate them) the way cert-manager's dynamic certificate
source does: it builds a complete new `ssl.SSLContext` from a pair read at one
moment, checks that key and certificate belong together, and only then makes it
the one new handshakes get (an SNI callback on the listener's context points each
handshake at the current one; it runs with and without SNI). A half-written or
mismatched pair never touches the serving context: the previous certificate keeps
being served and the log says so, once per pair seen. Building a fresh context also
makes key-type changes (EC to RSA) complete. `expiry` is the notAfter of the
certificate actually served.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509

from gpuclass.webhook.certs import issue as certissue

log = logging.getLogger(__name__)

MODERN_TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"


@dataclass(frozen=True)
class CertFiles:
    """The paths :func:`self_signed` wrote: the serving pair the webhook loads, and the CA a client
    must trust."""

    cert: Path
    key: Path
    ca: Path


def self_signed(directory: Path, hosts: list[str], *, days: int = 365) -> CertFiles:
    """Write ca.crt, tls.crt and tls.key (mode 0600) into `directory` and return their paths.

    The CA and the serving certificate come from the same issuer the webhook-managed mode
    uses (`webhook.certs.issue`), so both modes serve certificates of one shape.
    """
    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    validity = dt.timedelta(days=days)
    ca = certissue.new_ca(now=now, validity=validity)
    serving = certissue.new_serving(ca, hosts, now=now, validity=validity)
    files = CertFiles(directory / "tls.crt", directory / "tls.key", directory / "ca.crt")
    files.ca.write_bytes(ca.cert)
    files.cert.write_bytes(serving.cert)
    write_private(files.key, serving.key)
    return files


def write_private(path: Path, content: bytes) -> None:
    """Replace `path` by a complete file of mode 0600, in one rename (a reader never sees half)."""
    partial = path.with_name(path.name + ".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(content)
    os.replace(partial, path)


def certificate_expiry(cert_file: Path) -> float:
    """notAfter of the first certificate in the file, as a Unix timestamp."""
    return _leaf_expiry(cert_file.read_bytes())


def _leaf_expiry(pem: bytes) -> float:
    return x509.load_pem_x509_certificate(pem).not_valid_after_utc.timestamp()


def server_context() -> ssl.SSLContext:
    """A server context with our protocol floor and TLS 1.2 ciphers, and no certificate yet."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(MODERN_TLS12_CIPHERS)
    return context


class PairUnusable(ValueError):
    """The certificate files do not (yet) hold a matching, loadable pair."""


class ReloadingContext:
    """The listener's SSLContext, whose handshakes are handed to the latest good pair."""

    def __init__(self, cert: Path, key: Path) -> None:
        self.cert, self.key = cert, key
        pair = self._read()
        self.current, self.expiry = self._build(pair)
        self._served, self._refused = pair, pair
        self.context = self.current  # the listener's: built from the first pair, never changed
        self.context.sni_callback = self._select

    def _select(self, sock: ssl.SSLObject, _server_name: str | None, _ctx: ssl.SSLContext) -> None:
        current = self.current  # one reference read: a reload swapping it is atomic here
        if sock.context is not current:
            sock.context = current

    def _read(self) -> tuple[bytes, bytes]:
        return self.cert.read_bytes(), self.key.read_bytes()

    def _build(self, pair: tuple[bytes, bytes]) -> tuple[ssl.SSLContext, float]:
        """A new context holding exactly these bytes, or PairUnusable saying why."""
        try:
            expiry = _leaf_expiry(pair[0])
        except ValueError as exc:
            raise PairUnusable(f"certificate unreadable: {exc}") from None
        context = server_context()
        try:
            # load_cert_chain reads paths: load, then check the files still hold the bytes read.
            context.load_cert_chain(self.cert, self.key)  # raises if the key does not match
        except (ssl.SSLError, ValueError) as exc:
            raise PairUnusable(f"certificate and key do not load as a pair: {exc}") from None
        if self._read() != pair:
            raise PairUnusable("certificate files changed while loading")
        return context, expiry

    def serves(self, cert: bytes, key: bytes) -> bool:
        """Whether new handshakes get exactly this pair."""
        return (cert, key) == self._served

    def reload(self) -> bool:
        """Serve the files' pair if it changed and is good; keep the previous one if not."""
        pair = self._read()
        if pair == self._served:
            return False
        try:
            context, expiry = self._build(pair)
        except PairUnusable as exc:
            if pair != self._refused:
                self._refused = pair
                log.warning(
                    "new certificate not loaded; still serving the previous one",
                    extra={"fields": {"error": str(exc), "serving_not_after": self.expiry}},
                )
            return False
        context.sni_callback = None
        self.current, self.expiry, self._served = context, expiry, pair
        log.info(
            "certificate loaded",
            extra={"fields": {"cert": str(self.cert), "not_after": self.expiry}},
        )
        return True
