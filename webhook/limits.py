"""Request-body limits of the admission routes: size, time, and memory held by all clients together.

The server layer (`webhook.server`) bounds connections and header reading; this module
bounds what a request may hold once its headers are in. One body may not exceed
`max_body_bytes` (413) nor take longer than `body_timeout_seconds` to arrive (408), and all bodies
being read at once share `BodyBudget`: a chunk that would overdraw it is refused (503), so
thirty clients each holding 7 MiB cannot take the process past its memory limit.
Small bodies — every real AdmissionReview — may use the whole budget, large ones only
part of it, so held large bodies cannot starve the API server's ordinary requests.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from starlette.requests import ClientDisconnect
from starlette.types import Receive

BUSY = "server busy: too many request bodies in flight; retry"
BODY_COMPLETE = "gpuclass.body_complete"
"""Scope key the server's protocol sets once the request's whole body is in (`webhook.server`):
then it is read without arming the body deadline, which has nothing left to bound."""


class BodyRefused(Exception):
    """The body was not read to the end; `status` and `reason` say why. The connection closes."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass
class BodyBudget:
    """Bytes of request bodies held in memory by all requests together.

    Bodies up to `small_bytes` draw on the whole `limit`; a body beyond that only on
    `limit - reserve`, leaving `reserve` for the small ones.
    """

    limit: int
    small_bytes: int
    reserve: int
    used: int = 0

    def has_room(self, size: int) -> bool:
        """Whether a body of `size` could be held now (checked from Content-Length, unreserved)."""
        ceiling = self.limit if size <= self.small_bytes else self.limit - self.reserve
        return self.used + size <= ceiling

    def take(self, size: int, *, body_so_far: int) -> bool:
        """Reserve `size` more bytes for a body that has `body_so_far` bytes with this chunk; False
        (nothing taken) when the budget is spent, and the request is answered 503."""
        ceiling = self.limit if body_so_far <= self.small_bytes else self.limit - self.reserve
        if self.used + size > ceiling:
            return False
        self.used += size
        return True

    def give(self, size: int) -> None:
        """Return bytes taken, once the body has been read or refused."""
        self.used -= size


@dataclass(frozen=True)
class BodyLimits:
    """Per-request limits on a body: `max_bytes` (413 beyond), `timeout` seconds to receive all of
    it (408), and the budget shared by every request in flight (503 when spent)."""

    max_bytes: int
    timeout: float
    budget: BodyBudget


async def read_body(
    receive: Receive, declared: str | None, *, limits: BodyLimits, arrived: bool = False
) -> bytes:
    """The whole body from the ASGI `receive`, or BodyRefused; `declared` is the request's
    Content-Length, `arrived` says the server holds all of it already (the usual case: a review
    comes in one read), so no deadline is armed. A client gone before the end raises starlette's
    ClientDisconnect."""
    if declared and declared.isdigit():
        if int(declared) > limits.max_bytes:
            raise BodyRefused(413, f"request body larger than {limits.max_bytes} bytes")
        if not limits.budget.has_room(int(declared)):  # refuse before reading a byte of it
            raise BodyRefused(503, BUSY)
    chunks: list[bytes] = []
    held = 0

    async def read() -> None:
        nonlocal held
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                raise ClientDisconnect
            chunk: bytes = message.get("body", b"")
            more = message.get("more_body", False)
            if held + len(chunk) > limits.max_bytes:
                raise BodyRefused(413, f"request body larger than {limits.max_bytes} bytes")
            if not limits.budget.take(len(chunk), body_so_far=held + len(chunk)):
                raise BodyRefused(503, BUSY)
            held += len(chunk)
            chunks.append(chunk)

    try:
        if arrived:
            await read()
        else:
            async with asyncio.timeout(limits.timeout):
                await read()
    except TimeoutError:
        raise BodyRefused(
            408, f"request body not received within {limits.timeout:g} seconds"
        ) from None
    finally:
        limits.budget.give(held)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)
