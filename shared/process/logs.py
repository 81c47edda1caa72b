"""Logging setup for both binaries: one JSON object per line, or plain text.

Structured fields are passed with `extra={"fields": {...}}`. Nothing here knows
about secrets: callers never put payloads in log records (the core wraps secret
values in `Redacted`, whose repr is `<redacted>`). What does come from a request
(a uid, a name, an error message quoting input) can be of any size, so every
string field and every message is cut to a bounded length before it is written:
a 5 MB uid makes a short line, not a 5 MB one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from typing import Any

import orjson

MAX_FIELD_CHARS = 512
MAX_MESSAGE_CHARS = 2048


def clip(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, saying how many were dropped, so a log line stays bounded
    whatever a request held."""
    return text if len(text) <= limit else text[:limit] + f"...({len(text) - limit} more)"


class BoundedFields(dict[str, object]):
    """Fields its maker has bounded already (strings within MAX_FIELD_CHARS, lists within 50
    items, nothing nested), so the filter passes them as they are: the webhook's line per review,
    where the walk cost a fifth of the line."""


class BoundedRecords(logging.Filter):
    """Cuts long strings in a record's message and fields (in place, before formatting)."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Cut the record's message and string fields in place; never drops a record."""
        message = record.getMessage()
        if len(message) > MAX_MESSAGE_CHARS:
            record.msg, record.args = clip(message, MAX_MESSAGE_CHARS), None
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict) and not isinstance(fields, BoundedFields):
            record.fields = {key: _bounded(value) for key, value in fields.items()}
        return True


def _bounded(value: object) -> object:
    if isinstance(value, str):
        return clip(value, MAX_FIELD_CHARS)
    if isinstance(value, (list, tuple)):  # a tuple: faster than a union in isinstance
        return [_bounded(item) for item in value[:50]]
    return value


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts (UTC, milliseconds), level, logger, msg, then the record's
    `fields` at the top level and `exc` for a traceback."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON; values orjson cannot encode are written with str()."""
        fields = getattr(record, "fields", None)
        entry = _entry(
            record.created,
            record.levelname.lower(),
            logger=record.name,
            msg=record.getMessage(),
            fields=fields if isinstance(fields, dict) else None,
        )
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


def _entry(
    created: float, level: str, *, logger: str, msg: str, fields: dict[str, Any] | None
) -> dict[str, Any]:
    """A line's keys in their order: ts, level, logger, msg, then the fields."""
    entry: dict[str, Any] = {"ts": timestamp(created), "level": level, "logger": logger}
    entry["msg"] = msg
    if fields:
        entry.update(fields)
    return entry


_second: tuple[int, str] = (-1, "")  # the last second formatted, and its text


def timestamp(created: float) -> str:
    """`created` (seconds since the epoch) as the lines write it: UTC, milliseconds, one
    `strftime` a second rather than one a line."""
    global _second
    second = int(created)
    if second != _second[0]:
        _second = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
    return f"{_second[1]}.{int((created - second) * 1000):03d}Z"


class JsonLines(logging.StreamHandler):  # type: ignore[type-arg]
    """The JSON handler `setup_logging` installs; :func:`log_fields` writes through it directly.

    Direct lines written inside a running event loop are held until the end of the loop's turn
    and written together: a write to stderr is a system call, and a turn under load answers
    several reviews. A line waits less than a turn (the loop runs its `call_soon` callbacks
    before it next waits); a record through logging, and the interpreter's exit
    (`logging.shutdown`), write what is held first, so lines keep their order and only a
    process killed within that turn loses its last lines."""

    def __init__(self, stream: Any = None) -> None:
        super().__init__(stream)
        self.held: list[str] = []

    def write_fields(self, name: str, msg: str, *, fields: BoundedFields) -> None:
        """One info line of `fields`, as JsonFormatter writes a record of them, without the
        record: the webhook's line per review spent more on logging's machinery than on its
        JSON."""
        entry = _entry(time.time(), "info", logger=name, msg=msg, fields=fields)
        self.held.append(orjson.dumps(entry, default=str).decode())
        if len(self.held) == 1:
            try:
                asyncio.get_running_loop().call_soon(self.flush)
            except RuntimeError:  # no loop in this thread: now
                self.flush()

    def emit(self, record: logging.LogRecord) -> None:
        """Write what is held, then the record, as StreamHandler does."""
        if self.held:
            self.flush()
        super().emit(record)

    def flush(self) -> None:
        """Write what is held as one piece, then flush the stream."""
        with self.lock or contextlib.nullcontext():
            try:
                if self.held:
                    text = "\n".join(self.held) + "\n"
                    self.held = []
                    self.stream.write(text)
                self.stream.flush()
            except (OSError, ValueError):  # stderr closed or broken: nowhere left to write
                self.held = []


def log_fields(logger: logging.Logger, msg: str, *, fields: BoundedFields) -> None:
    """`logger.info(msg, extra={"fields": fields})`, the same line, written directly when nothing
    but `setup_logging`'s JSON handler would see the record: no handler or filter on the logger
    or its ancestors, one root handler with no level above info. `msg` is a constant (never
    longer than MAX_MESSAGE_CHARS), and `fields` are bounded by their maker."""
    handler = _direct_handler(logger)
    if handler is None:
        logger.info(msg, extra={"fields": fields})
    elif logger.isEnabledFor(logging.INFO):
        handler.write_fields(logger.name, msg, fields=fields)


def _direct_handler(logger: logging.Logger) -> JsonLines | None:
    node: logging.Logger | None = logger
    root = logging.root
    while node is not None and node is not root:
        if node.handlers or node.filters or not node.propagate or node.disabled:
            return None
        node = node.parent
    handlers = root.handlers
    if len(handlers) != 1 or root.filters:
        return None
    handler = handlers[0]
    if type(handler) is not JsonLines or handler.level > logging.INFO:
        return None
    if not all(type(f) is BoundedRecords for f in handler.filters):
        return None
    return handler


def setup_logging(level: str = "info", fmt: str = "json") -> None:
    """Route every logger to stderr in `fmt` (`json` or `text`) at `level`, with records bounded;
    replaces any handler set before, quiets uvicorn's access log (the webhook logs each review
    itself) and stops collecting the caller, thread and process of each record (no line shows
    them)."""
    handler: logging.StreamHandler[Any]
    formatter: logging.Formatter
    if fmt == "json":
        handler, formatter = JsonLines(sys.stderr), JsonFormatter()
    else:
        handler = logging.StreamHandler(sys.stderr)
        formatter = logging.Formatter(
            "%(asctime)s %(levelname)s %(name)s %(message)s %(fields)s", defaults={"fields": ""}
        )
    handler.setFormatter(formatter)
    handler.addFilter(BoundedRecords())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("uvicorn.access",):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # No line shows where it was logged from, nor the thread or process: skip collecting them
    # for every record (the logging HOWTO's "Optimization"; the webhook logs a line per review).
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
