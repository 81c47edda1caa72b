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
import ssl
import sys
import time
from collections import Counter

HOST = "127.0.0.1"  # never anything else
KINDS = ("idle", "no-handshake", "slow-header", "slow-body", "held-body")
HELD_BODY_BYTES = 7 * 1024 * 1024


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
    try:
        if kind == "slow-header":
            writer.write(b"POST /mutate/pods HTTP/1.1\r\nx-slow: ")
            while True:
                await writer.drain()
                await asyncio.sleep(trickle)
                writer.write(b"a")
        elif kind == "slow-body":
            writer.write(_head(100_000))
            while True:
                await writer.drain()
                await asyncio.sleep(trickle)
                writer.write(b" ")
        elif kind == "held-body":
            writer.write(_head(HELD_BODY_BYTES) + b" " * (HELD_BODY_BYTES - 1))
            await writer.drain()
        await reader.read()  # idle, no-handshake and held-body wait here to be cut
    finally:
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
    stats = asyncio.run(
        attack(args.port, counts, seconds=args.seconds, pause=args.pause, trickle=args.trickle)
    )
    print(json.dumps(dict(sorted(stats.items()))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
