"""Hostile HTTPS clients for the webhook's attack test and benchmark: loopback only, bounded in time.

Each client keeps one connection doing one kind of harm and, when the server cuts it,
waits `pause` seconds and does it again, until `seconds` have passed:

- `idle`: completes the TLS handshake and sends nothing;
- `no-handshake`: opens TCP and never sends a ClientHello;
- `slow-header`: sends a request line, then a header byte every `trickle` seconds;
- `slow-body`: sends headers announcing 100 kB, then a body byte every `trickle` seconds;
- `held-body`: announces 7 MiB, sends all but the last byte at once, and holds.

Run as a process (`python -m tests.attack_clients PORT KIND=COUNT ... --seconds S`) so that
the attack's own CPU use is not counted against the measured well-behaved client. It prints
one JSON line of counts when it ends.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import ssl
import sys
import threading
import time
from collections import Counter
from pathlib import Path

HOST = "127.0.0.1"  # never anything else
KINDS = ("idle", "no-handshake", "slow-header", "slow-body", "held-body")
HELD_BODY_BYTES = 7 * 1024 * 1024


def rss_mb(pid: int) -> float:
    """Resident memory of a process, from /proc (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


class PeakRss(threading.Thread):
    """Samples a process's RSS every 0.1 s until `stopped` is set; `peak` is the largest."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak, self.stopped = pid, 0.0, threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.1):
            self.peak = max(self.peak, rss_mb(self.pid))


def _context() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # an attacker does not care who answers
    return context


def _head(length: int) -> bytes:
    return (
        "POST /mutate/virtualmachineinstances HTTP/1.1\r\nhost: webhook\r\n"
        f"content-type: application/json\r\ncontent-length: {length}\r\n\r\n"
    ).encode()


async def _harm(kind: str, port: int, trickle: float, stats: Counter[str]) -> None:
    """One connection's harm; returns when the server closes it."""
    tls = None if kind == "no-handshake" else _context()
    reader, writer = await asyncio.open_connection(HOST, port, ssl=tls)
    stats[f"{kind}:opened"] += 1
    first, trickled = {
        "slow-header": (b"POST /mutate/pods HTTP/1.1\r\nx-slow: ", b"a"),
        "slow-body": (_head(100_000), b" "),
        "held-body": (_head(HELD_BODY_BYTES), b""),
    }.get(kind, (b"", b""))
    closed = asyncio.ensure_future(reader.read())  # whatever the server says, until it closes
    try:
        writer.write(first)
        if kind == "held-body":  # all but the last byte, in chunks, as fast as the server reads
            chunk = b" " * 65536
            for _ in range(HELD_BODY_BYTES // len(chunk) - 1):
                if closed.done():
                    break
                writer.write(chunk)
                await writer.drain()
            writer.write(chunk[:-1])
        while not closed.done():
            await writer.drain()
            await asyncio.wait([closed], timeout=trickle)
            if trickled and not closed.done():
                writer.write(trickled)
    finally:
        closed.cancel()
        writer.close()


async def _client(
    kind: str, port: int, deadline: float, pause: float, trickle: float, stats: Counter[str]
) -> None:
    while time.monotonic() < deadline:
        try:
            await asyncio.wait_for(
                _harm(kind, port, trickle, stats), timeout=max(deadline - time.monotonic(), 0.01)
            )
            stats[f"{kind}:cut"] += 1
        except TimeoutError:
            return
        except (OSError, ssl.SSLError, ConnectionError):
            stats[f"{kind}:cut"] += 1
        await asyncio.sleep(pause)


async def attack(
    port: int, counts: dict[str, int], *, seconds: float, pause: float = 1.0, trickle: float = 0.5
) -> Counter[str]:
    stats: Counter[str] = Counter()
    deadline = time.monotonic() + seconds
    clients = [
        _client(kind, port, deadline, pause, trickle, stats)
        for kind, count in counts.items()
        for _ in range(count)
    ]
    await asyncio.gather(*clients, return_exceptions=True)
    return stats


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("port", type=int)
    parser.add_argument("counts", nargs="+", help="KIND=COUNT, kinds: " + ", ".join(KINDS))
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--pause", type=float, default=1.0)
    parser.add_argument("--trickle", type=float, default=0.5)
    args = parser.parse_args(argv)
    counts = {k: int(n) for k, n in (item.split("=", 1) for item in args.counts)}
    if set(counts) - set(KINDS):
        parser.error(f"unknown kind in {sorted(counts)}")
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)  # writes to cut connections, by design
    stats = asyncio.run(
        attack(args.port, counts, seconds=args.seconds, pause=args.pause, trickle=args.trickle)
    )
    print(json.dumps(dict(sorted(stats.items()))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
