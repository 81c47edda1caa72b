"""Run `gpuclass-webhook` as a real subprocess on a free loopback port, for tests and benchmarks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parent.parent
WEBHOOK = Path(sys.executable).with_name("gpuclass-webhook")


class WebhookProcess:
    def __init__(
        self, args: list[str], *, tls_dir: Path, env: dict[str, str] | None = None
    ) -> None:
        self.tls_dir = tls_dir
        self.lines: list[str] = []
        self.port = 0
        self._ready = threading.Event()
        command = [str(WEBHOOK), "--bind-address", "127.0.0.1", "--port", "0", *args]
        if not any(a.startswith("--drain-seconds") for a in args):
            command += ["--drain-seconds", "0"]  # tests stop at once unless they test the drain
        if "--tls-cert-file" not in args:
            command += ["--tls-dir", str(tls_dir)]
        self.proc = subprocess.Popen(
            command,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
        assert self.proc.stderr is not None
        threading.Thread(target=self._read, args=(self.proc.stderr,), daemon=True).start()
        # a busy 2-core CI machine can take long to import; a process that exits ends the wait
        if not self._ready.wait(60) or not self.port:
            self.stop()
            raise RuntimeError("webhook did not start:\n" + "\n".join(self.lines[-30:]))

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.append(line.rstrip("\n"))
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("msg") == "serving" and entry.get("ports"):
                self.port = int(entry["ports"][0])
                self._ready.set()
        self._ready.set()  # the process closed its stderr: it has exited (or is exiting)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca(self) -> str:
        return str(self.tls_dir / "ca.crt")

    def logs(self) -> list[dict[str, object]]:
        out = []
        for line in list(self.lines):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            deadline = time.monotonic() + timeout
            while self.proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
        return self.proc.wait()
