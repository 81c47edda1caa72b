"""A real etcd + kube-apiserver for tests, started the envtest way, from Python.

`ControlPlane` runs both binaries on free 127.0.0.1 ports inside one temporary
folder: throwaway PKI, etcd data, an admin kubeconfig, and each process's log
(whose tail is quoted when something fails to start). RBAC is on; the
ServiceAccount admission plugin is off because no controller-manager creates
service accounts, but the token issuer flags are passed so the API is complete.
`stop()` ends both process groups and removes the folder; `restart_apiserver()`
restarts only kube-apiserver on the same etcd and port (fault tests).

Boundary: process and PKI plumbing only. Which CRDs exist and when the plane
starts is the pytest plugin's business (tests/controlplane/plugin.py).
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import ctypes
import hashlib
import itertools
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TypeVar

import httpx
import yaml

from tests.controlplane.api import Api, RawObject
from tests.controlplane.pki import (
    CertificateAuthority,
    new_private_key_pem,
    public_key_pem,
    write_private,
)

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "build.sh"
BINARIES = ("kube-apiserver", "etcd")
ADMIN_USER = "gpuclass-test-admin"
T = TypeVar("T")


class AssetsUnavailable(RuntimeError):
    """kube-apiserver/etcd could neither be found nor built (tests skip or fail on it)."""


def _printed_path(label: str, build_script: Path, hint: str, timeout: float) -> Path:
    """The path a build script prints on its last line; AssetsUnavailable, saying `hint`,
    when it cannot run, fails or prints nothing."""
    try:
        done = subprocess.run(
            ["bash", str(build_script)],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise AssetsUnavailable(f"{label}: {build_script} did not finish: {exc}") from exc
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        raise AssetsUnavailable(
            f"{label}: {build_script} exited {done.returncode}; {hint}, or install Go. "
            f"Last output:\n{tail}"
        )
    return Path(lines[-1])


def built_binary(label: str, build_script: Path, env: str, *, timeout: float = 3600.0) -> Path:
    """The program `label` the tests build from a Go module: the executable `env` names, else
    the path `build_script` prints on its last line (it builds once into the assets cache)."""
    configured = os.environ.get(env)
    if configured and os.access(configured, os.X_OK):
        return Path(configured)
    binary = _printed_path(label, build_script, f"set {env} to a built binary", timeout)
    if not os.access(binary, os.X_OK):
        raise AssetsUnavailable(f"{label}: {build_script} printed {binary}, not an executable")
    return binary


class ControlPlaneError(RuntimeError):
    """A control-plane process did not start or did not become ready."""


def _has_binaries(folder: Path) -> bool:
    return all(os.access(folder / name, os.X_OK) for name in BINARIES)


def find_assets(*, build_script: Path = BUILD_SCRIPT, timeout: float = 3600.0) -> Path:
    """The folder holding both binaries: `KUBEBUILDER_ASSETS` if complete, else build.sh
    (cached and idempotent; the first build compiles both from their Go modules)."""
    configured = os.environ.get("KUBEBUILDER_ASSETS")
    if configured and _has_binaries(Path(configured)):
        return Path(configured)
    hint = "set KUBEBUILDER_ASSETS to a folder with kube-apiserver and etcd"
    folder = _printed_path(build_script.name, build_script, hint, timeout)
    if not _has_binaries(folder):
        raise AssetsUnavailable(f"{build_script.name} printed {folder}, which lacks {BINARIES}")
    return folder


def unique_name(prefix: str) -> str:
    """A DNS-label name no other test uses: `prefix` plus 8 random hex digits."""
    return f"{prefix[:50].rstrip('-')}-{secrets.token_hex(4)}"


# Ports handed to processes a test starts come from below Linux's ephemeral range
# (32768-60999), where the kernel picks the ports of outgoing connections and of
# bind(0): a client connecting between free_port() and the child's bind cannot take
# the port. Each process of a test session (pytest-xdist worker) owns its own block,
# so two workers never hand out the same port; the blocks start at an offset drawn
# from the session's id, so concurrent sessions on one machine rarely share one.
_PORTS_FIRST, _PORTS_END, _PORTS_PER_BLOCK = 10_000, 32_768, 1_000
_BLOCKS = (_PORTS_END - _PORTS_FIRST) // _PORTS_PER_BLOCK
_handed_out = itertools.count(secrets.randbelow(_PORTS_PER_BLOCK))


def _port_block() -> int:
    """The first port of this process's block."""
    session = os.environ.get("PYTEST_XDIST_TESTRUNUID") or secrets.token_hex(8)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    offset = int(hashlib.sha256(session.encode()).hexdigest(), 16) + int(worker or 0)
    return _PORTS_FIRST + (offset % _BLOCKS) * _PORTS_PER_BLOCK


_PORT_BLOCK = _port_block()


def free_port() -> int:
    """A TCP port on 127.0.0.1, free now, that no other worker of this session hands out
    (see above); the next call in this process gives another one."""
    for _ in range(_PORTS_PER_BLOCK):
        port = _PORT_BLOCK + next(_handed_out) % _PORTS_PER_BLOCK
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue  # in use by something else on the machine
            return port
    raise OSError(f"no free port in {_PORT_BLOCK}-{_PORT_BLOCK + _PORTS_PER_BLOCK - 1}")


def eventually(
    check: Callable[[], T | None], *, timeout: float, what: str, every: float = 0.2
) -> T:
    """Poll `check` until it returns something other than None/False; raise TimeoutError."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result is not None and result is not False:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: the child gets SIGKILL if the test process dies without cleaning up.

    The kernel ties this to the thread that started the child: start a ControlPlane
    from a thread that outlives it (pytest's main thread does)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class _Process:
    """One binary in its own process group, its output appended to a log file."""

    def __init__(self, name: str, argv: Sequence[str], log: Path) -> None:
        self.name, self.argv, self.log = name, list(argv), log
        self._popen: subprocess.Popen[bytes] | None = None
        self._log_handle: IO[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen else None

    def start(self) -> None:
        self._log_handle = self.log.open("ab")
        self._popen = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log_handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )

    def exit_code(self) -> int | None:
        return self._popen.poll() if self._popen else None

    def stop(self, grace: float = 10.0) -> None:
        if self._popen is not None:
            self._signal(signal.SIGTERM)
            try:
                self._popen.wait(grace)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self._popen.wait(grace)
            self._signal(signal.SIGKILL)  # anything left in the group
            self._popen = None
        if self._log_handle is not None:
            self._log_handle.close()
            self._log_handle = None

    def _signal(self, signum: int) -> None:
        assert self._popen is not None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._popen.pid, signum)

    def tail(self, lines: int = 25) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return f"({self.name}: no log)"
        return "\n".join(text.splitlines()[-lines:])


@dataclass(frozen=True, slots=True)
class User:
    """Credentials of one user: client certificate files and a kubeconfig embedding them."""

    name: str
    groups: tuple[str, ...]
    kubeconfig: Path
    cert_file: Path
    key_file: Path
    ca_file: Path
    server: str

    def api(self) -> Api:
        """A new synchronous client acting as this user (close it when done)."""
        return Api(
            self.server, ca_file=self.ca_file, cert_file=self.cert_file, key_file=self.key_file
        )


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _kubeconfig(server: str, ca_pem: bytes, user: str, cert_pem: bytes, key_pem: bytes) -> str:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "gpuclass-test",
                "cluster": {"server": server, "certificate-authority-data": _b64(ca_pem)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": _b64(cert_pem),
                    "client-key-data": _b64(key_pem),
                },
            }
        ],
        "contexts": [
            {"name": "gpuclass-test", "context": {"cluster": "gpuclass-test", "user": user}}
        ],
        "current-context": "gpuclass-test",
        "preferences": {},
    }
    return yaml.safe_dump(config, sort_keys=False)


class ControlPlane:
    """etcd + kube-apiserver on 127.0.0.1, for one test session. Use as a context manager
    or call `start()` and `stop()`; `admin` is a synchronous client in system:masters."""

    def __init__(
        self,
        assets: Path,
        *,
        apiserver_flags: Iterable[str] = (),
        start_timeout: float = 90.0,
    ) -> None:
        self.assets = assets
        self.start_timeout = start_timeout
        self._extra_flags = list(apiserver_flags)
        self.workdir = Path(tempfile.mkdtemp(prefix="gpuclass-controlplane-"))
        self.etcd_port, self.etcd_peer_port, self.port = free_port(), free_port(), free_port()
        self.server = f"https://127.0.0.1:{self.port}"
        self._ca = CertificateAuthority()
        self.ca_pem = self._ca.cert_pem
        self.ca_file = self.workdir / "pki" / "ca.crt"
        self._etcd = _Process("etcd", self._etcd_argv(), self.workdir / "etcd.log")
        self._apiserver = _Process(
            "kube-apiserver", self._apiserver_argv(), self.workdir / "kube-apiserver.log"
        )
        self._admin: User | None = None
        self._admin_api: Api | None = None
        self._user_count = 0

    # -- lifecycle ----------------------------------------------------------------------------

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def start(self) -> ControlPlane:
        """Start etcd, then kube-apiserver; return once /readyz answers ok."""
        atexit.register(self.stop)
        try:
            self._write_pki()
            self._etcd.start()
            self._wait_etcd()
            self._apiserver.start()
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def restart_apiserver(self, while_down: Callable[[], None] = lambda: None) -> None:
        """Stop kube-apiserver and start it again on the same port, etcd and certificates;
        `while_down` runs in between (e.g. `compact_etcd`)."""
        if self._admin_api is not None:  # its pooled connections die with the server
            self._admin_api.close()
            self._admin_api = None
        self._apiserver.stop()
        while_down()
        self._apiserver.start()
        self._wait_ready()

    def compact_etcd(self) -> int:
        """Compact etcd's history up to its current revision (what kube-apiserver does every
        5 minutes): any watch or list from an older resourceVersion then gets 410 Gone.
        Returns the revision. etcd's JSON gateway on its client port (plain HTTP, 127.0.0.1)."""
        base = f"http://127.0.0.1:{self.etcd_port}/v3"
        probe = {"key": base64.b64encode(b"/").decode(), "limit": 1}
        revision = int(
            httpx.post(f"{base}/kv/range", json=probe, timeout=5).json()["header"]["revision"]
        )
        done = httpx.post(
            f"{base}/kv/compaction", json={"revision": revision, "physical": True}, timeout=30
        )
        done.raise_for_status()
        return revision

    def stop(self) -> None:
        """End both process groups and remove the working folder. Safe to call twice."""
        atexit.unregister(self.stop)
        if self._admin_api is not None:
            self._admin_api.close()
            self._admin_api = None
        self._apiserver.stop()
        self._etcd.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)

    @property
    def pids(self) -> dict[str, int | None]:
        return {"etcd": self._etcd.pid, "kube-apiserver": self._apiserver.pid}

    # -- users --------------------------------------------------------------------------------

    @property
    def admin(self) -> Api:
        """The admin's client (system:masters): the one set-up code uses."""
        if self._admin_api is None:
            self._admin_api = self.admin_user.api()
        return self._admin_api

    @property
    def admin_user(self) -> User:
        if self._admin is None:
            self._admin = self.user(ADMIN_USER, ["system:masters"], stem="admin")
        return self._admin

    @property
    def admin_kubeconfig(self) -> Path:
        return self.admin_user.kubeconfig

    def user(self, name: str, groups: Sequence[str] = (), *, stem: str | None = None) -> User:
        """Credentials for any user and groups, e.g. a service account
        (`system:serviceaccount:<ns>:<name>` in `system:serviceaccounts` and
        `system:serviceaccounts:<ns>`). RBAC decides what it may do."""
        self._user_count += 1
        stem = stem or f"user-{self._user_count}-{re.sub(r'[^A-Za-z0-9.-]+', '-', name)[:60]}"
        pair = self._ca.issue(name, organizations=groups, client=True)
        folder = self.workdir / "users"
        cert, key = pair.write(folder, stem)
        kubeconfig = folder / f"{stem}.kubeconfig"
        kubeconfig.touch(mode=0o600)
        kubeconfig.write_text(
            _kubeconfig(self.server, self.ca_pem, name, pair.cert_pem, pair.key_pem)
        )
        return User(name, tuple(groups), kubeconfig, cert, key, self.ca_file, self.server)

    def serving_cert(
        self, stem: str, hosts: Sequence[str] = ("127.0.0.1", "localhost")
    ) -> tuple[Path, Path]:
        """A serving certificate signed by this plane's CA (for a webhook under test; its
        caBundle is `ca_pem`). Returns the certificate and key paths."""
        pair = self._ca.issue(hosts[0], hosts=hosts, server=True)
        return pair.write(self.workdir / "serving", stem)

    # -- CRDs ---------------------------------------------------------------------------------

    def install_crds(
        self, sources: Iterable[Path | list[RawObject]], *, timeout: float = 60.0
    ) -> list[str]:
        """Apply CRDs and wait until each is Established and served; return their names."""
        names: list[str] = []
        for source in sources:
            for crd in self.admin.apply(source):
                names.append(crd["metadata"]["name"])
                self._wait_served(crd, timeout)
        return names

    def _wait_served(self, crd: RawObject, timeout: float) -> None:
        name = crd["metadata"]["name"]

        seen: list[RawObject] = []

        def established() -> bool:
            current = self.admin.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", name)
            seen[:] = ((current or {}).get("status") or {}).get("conditions") or []
            return any(c["type"] == "Established" and c["status"] == "True" for c in seen)

        try:
            eventually(established, timeout=timeout, what=f"CRD {name} to be Established")
        except TimeoutError as exc:
            raise ControlPlaneError(f"{exc}; its conditions: {seen}") from exc
        spec = crd["spec"]
        for version in spec["versions"]:
            if version.get("served", True):
                api_version = f"{spec['group']}/{version['name']}"

                def served(api_version: str = api_version) -> bool:
                    try:
                        self.admin.resource_path(api_version, spec["names"]["kind"], namespace="x")
                    except LookupError:
                        return False
                    return True

                eventually(
                    served,
                    timeout=timeout,
                    what=f"{api_version} {spec['names']['kind']} in discovery",
                )

    # -- internals ----------------------------------------------------------------------------

    def _pki(self, name: str) -> Path:
        return self.workdir / "pki" / name

    def _write_pki(self) -> None:
        self.ca_file.parent.mkdir(parents=True, exist_ok=True)
        self.ca_file.write_bytes(self.ca_pem)
        self._ca.issue("kube-apiserver", hosts=["127.0.0.1", "localhost"], server=True).write(
            self.ca_file.parent, "apiserver"
        )
        signing_key = new_private_key_pem()
        write_private(self._pki("sa.key"), signing_key)
        self._pki("sa.pub").write_bytes(public_key_pem(signing_key))

    def _etcd_argv(self) -> list[str]:
        client = f"http://127.0.0.1:{self.etcd_port}"
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        return [
            str(self.assets / "etcd"),
            "--name=default",
            f"--data-dir={self.workdir / 'etcd-data'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}",
            "--unsafe-no-fsync=true",  # throwaway data: speed over durability
            "--log-level=warn",
        ]

    def _apiserver_argv(self) -> list[str]:
        return [
            str(self.assets / "kube-apiserver"),
            "--advertise-address=127.0.0.1",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.port}",
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            f"--cert-dir={self._pki('generated')}",
            f"--tls-cert-file={self._pki('apiserver.crt')}",
            f"--tls-private-key-file={self._pki('apiserver.key')}",
            f"--client-ca-file={self.ca_file}",
            "--authorization-mode=Node,RBAC",
            "--disable-admission-plugins=ServiceAccount",
            f"--service-account-issuer={self.server}",
            f"--service-account-key-file={self._pki('sa.pub')}",
            f"--service-account-signing-key-file={self._pki('sa.key')}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--allow-privileged=true",
            "--enable-priority-and-fairness=false",  # two cores: no APF bookkeeping
            "--profiling=false",
            *self._extra_flags,
        ]

    def _failure(self, process: _Process, reason: str) -> ControlPlaneError:
        return ControlPlaneError(
            f"{process.name} {reason}; its log ({process.log}) ends with:\n{process.tail()}"
        )

    def _wait_etcd(self) -> None:
        url = f"http://127.0.0.1:{self.etcd_port}/health"

        def healthy() -> bool:
            if self._etcd.exit_code() is not None:
                raise self._failure(self._etcd, f"exited with code {self._etcd.exit_code()}")
            try:
                health = httpx.get(url, timeout=2.0).json()
            except (httpx.HTTPError, ValueError):
                return False
            return isinstance(health, dict) and health.get("health") == "true"

        try:
            eventually(healthy, timeout=self.start_timeout, what="etcd /health")
        except TimeoutError as exc:
            raise self._failure(self._etcd, str(exc)) from exc

    def _wait_ready(self) -> None:
        def ready() -> bool:
            if self._apiserver.exit_code() is not None:
                raise self._failure(
                    self._apiserver, f"exited with code {self._apiserver.exit_code()}"
                )
            try:
                response = self.admin.request("GET", "/readyz", accept="text/plain")
            except (httpx.HTTPError, OSError):
                return False
            return response.status_code == 200

        try:
            eventually(ready, timeout=self.start_timeout, what="kube-apiserver /readyz", every=0.25)
        except TimeoutError as exc:
            raise self._failure(self._apiserver, str(exc)) from exc
