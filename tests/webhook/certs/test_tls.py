"""Certificate reload, checked by real TLS handshakes against the context the webhook serves with.

Rotations as cert-manager and hand-made Secrets produce them: a clean swap, a certificate
that arrives before its key, a half-written file, and a change of key type (EC to RSA).
A handshake must always succeed, with the newest *good* pair, and `expiry` (the metric's
value) must be the notAfter of the certificate a client actually receives.
"""

from __future__ import annotations

import datetime as dt
import logging
import shutil
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from gpuclass.webhook.certs.tls import CertFiles, ReloadingContext, self_signed


class Listener:
    """A loopback TLS server that completes handshakes with `tls.context`, one at a time."""

    def __init__(self, tls: ReloadingContext) -> None:
        self.tls = tls
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            try:
                with self.tls.context.wrap_socket(conn, server_side=True):
                    pass
            except (ssl.SSLError, OSError):
                conn.close()

    def served(self, *, sni: str | None = None) -> x509.Certificate:
        """The leaf certificate a client gets (with SNI when `sni` is given, else none)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        with (
            socket.create_connection(("127.0.0.1", self.port), timeout=5) as raw,
            context.wrap_socket(raw, server_hostname=sni) as tls,
        ):
            der = tls.getpeercert(binary_form=True)
        assert der is not None
        return x509.load_der_x509_certificate(der)


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[CertFiles, Path]]:
    first = self_signed(tmp_path / "first", ["127.0.0.1", "localhost"])
    folder = tmp_path / "live"
    folder.mkdir()
    shutil.copy(first.cert, folder / "tls.crt")
    shutil.copy(first.key, folder / "tls.key")
    yield first, folder


def pem(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def rsa_pair(folder: Path, days: int) -> CertFiles:
    folder.mkdir(parents=True)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = dt.datetime.now(dt.UTC)
    name = x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "localhost")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .sign(key, hashes.SHA256())
    )
    files = CertFiles(folder / "tls.crt", folder / "tls.key", folder / "tls.crt")
    files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    files.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return files


@pytest.mark.parametrize("sni", [None, "localhost"], ids=["no-sni", "sni"])
def test_a_clean_rotation_is_served_to_new_handshakes(
    live: tuple[CertFiles, Path], tmp_path: Path, sni: str | None
) -> None:
    first, folder = live
    tls = ReloadingContext(folder / "tls.crt", folder / "tls.key")
    listener = Listener(tls)
    assert listener.served(sni=sni) == pem(first.cert)
    second = self_signed(tmp_path / "second", ["127.0.0.1"], days=30)
    shutil.copy(second.key, folder / "tls.key")
    shutil.copy(second.cert, folder / "tls.crt")
    assert tls.reload() is True
    assert listener.served(sni=sni) == pem(second.cert)
    assert tls.expiry == pem(second.cert).not_valid_after_utc.timestamp()
    assert tls.reload() is False, "nothing changed since"


def test_a_certificate_before_its_key_keeps_the_old_pair_serving(
    live: tuple[CertFiles, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first, folder = live
    tls = ReloadingContext(folder / "tls.crt", folder / "tls.key")
    listener = Listener(tls)
    before = tls.expiry
    second = self_signed(tmp_path / "second", ["127.0.0.1"], days=30)
    shutil.copy(second.cert, folder / "tls.crt")  # the key has not arrived yet
    with caplog.at_level(logging.WARNING, logger="webhook.certs.tls"):
        assert tls.reload() is False
        assert tls.reload() is False
    warnings = [r for r in caplog.records if "still serving the previous one" in r.getMessage()]
    assert len(warnings) == 1, "said once per pair, not on every check"
    assert listener.served() == pem(first.cert), "handshakes keep working on the old pair"
    assert tls.expiry == before == pem(first.cert).not_valid_after_utc.timestamp()
    shutil.copy(second.key, folder / "tls.key")  # now it has
    assert tls.reload() is True
    assert listener.served() == pem(second.cert)
    assert tls.expiry == pem(second.cert).not_valid_after_utc.timestamp()


@pytest.mark.parametrize("which", ["tls.crt", "tls.key"])
def test_a_half_written_file_keeps_the_old_pair_serving(
    live: tuple[CertFiles, Path], which: str
) -> None:
    first, folder = live
    tls = ReloadingContext(folder / "tls.crt", folder / "tls.key")
    listener = Listener(tls)
    whole = (folder / which).read_bytes()
    (folder / which).write_bytes(whole[: len(whole) // 2])
    assert tls.reload() is False
    assert listener.served() == pem(first.cert)


def test_a_change_of_key_type_is_served_to_ecdsa_capable_clients(
    live: tuple[CertFiles, Path], tmp_path: Path
) -> None:
    first, folder = live
    tls = ReloadingContext(folder / "tls.crt", folder / "tls.key")
    listener = Listener(tls)
    assert isinstance(listener.served().public_key(), type(pem(first.cert).public_key()))
    rsa_files = rsa_pair(tmp_path / "rsa", days=10)
    shutil.copy(rsa_files.key, folder / "tls.key")
    shutil.copy(rsa_files.cert, folder / "tls.crt")
    assert tls.reload() is True
    served = listener.served()  # Python's default client offers ECDSA and RSA signatures
    assert isinstance(served.public_key(), rsa.RSAPublicKey)
    assert served == pem(rsa_files.cert)
    assert tls.expiry == served.not_valid_after_utc.timestamp()


def test_a_first_pair_that_does_not_load_is_an_error(tmp_path: Path) -> None:
    first = self_signed(tmp_path / "a", ["127.0.0.1"])
    second = self_signed(tmp_path / "b", ["127.0.0.1"])
    with pytest.raises(ValueError, match="do not load as a pair"):
        ReloadingContext(first.cert, second.key)
