"""The Go floor of the webhook benchmarks: build it and run it beside gpuclass-webhook.

`benchmarks/gofloor/` holds a minimal controller-runtime webhook (main.go, its own
go.mod and go.sum) that answers every VMI AdmissionReview with one fixed JSON patch.
`build()` runs `benchmarks/gofloor/build.sh` (cached like the control plane: first time
minutes, then instant) and `GoFloor` runs the binary on a port with the same
certificate files gpuclass-webhook serves, answering with the patch gpuclass-webhook gave
for the benchmark's review, so both are asked the same question over the same TLS and
give the same answer. The benchmarks check every body, so a floor that answered
something else would fail the run rather than flatter it.
"""

from __future__ import annotations

import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD_SCRIPT = ROOT / "benchmarks" / "gofloor" / "build.sh"


def build() -> tuple[Path, float]:
    """The gofloor binary (built on first use) and the seconds the build step took."""
    started = time.perf_counter()
    done = subprocess.run(
        ["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True, check=False
    )
    if done.returncode != 0 or not done.stdout.strip():
        raise RuntimeError(f"{BUILD_SCRIPT} failed with exit code {done.returncode}")
    return Path(done.stdout.strip().splitlines()[-1]), time.perf_counter() - started


def wait_tls(port: int, ca: Path, timeout: float = 30) -> None:
    """Until a TLS handshake with 127.0.0.1:`port` succeeds against `ca`."""
    deadline = time.monotonic() + timeout
    context = ssl.create_default_context(cafile=str(ca))
    while time.monotonic() < deadline:
        try:
            with (
                socket.create_connection(("127.0.0.1", port), timeout=1) as raw,
                context.wrap_socket(raw, server_hostname="127.0.0.1"),
            ):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing answered TLS on 127.0.0.1:{port}")


class GoFloor:
    """The gofloor binary serving `patch` on `path`, with tls.crt/tls.key of `cert_dir`."""

    def __init__(
        self,
        binary: Path,
        *,
        port: int,
        cert_dir: Path,
        patch: bytes,
        path: str = "/mutate/virtualmachineinstances",
        cpus: str | None = None,
    ) -> None:
        self._folder = Path(tempfile.mkdtemp(prefix="gpuclass-gofloor-"))
        patch_file = self._folder / "patch.json"
        patch_file.write_bytes(patch)
        taskset = ["taskset", "-c", cpus] if cpus and shutil.which("taskset") else []
        self.port = port
        self.proc = subprocess.Popen(
            [
                *taskset,
                str(binary),
                "--host=127.0.0.1",
                f"--port={port}",
                f"--cert-dir={cert_dir}",
                f"--path={path}",
                f"--patch-file={patch_file}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_tls(port, cert_dir / "ca.crt")
        except RuntimeError:
            self.stop()
            raise

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self._folder, ignore_errors=True)
