"""Logging setup for both binaries: one JSON object per line, or plain text.

Structured fields are passed with `extra={"fields": {...}}`. Nothing here knows
about secrets: callers never put payloads in log records (the core wraps secret
values in `Redacted`, whose repr is `<redacted>`). What does come from a request
(a uid, a name, an error message quoting input) can be of any size, so every
string field and every message is cut to a bounded length before it is written:
a 5 MB uid makes a short line, not a 5 MB one.
"""

from __future__ import annotations

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

    _second: tuple[int, str] = (-1, "")  # the last second formatted, and its text

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON; values orjson cannot encode are written with str()."""
        second = int(record.created)
        if second != self._second[0]:  # one strftime a second, not one a line
            self._second = (second, self.formatTime(record, "%Y-%m-%dT%H:%M:%S"))
        entry: dict[str, Any] = {
            "ts": self._second[1] + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            entry.update(fields)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


def setup_logging(level: str = "info", fmt: str = "json") -> None:
    """Route every logger to stderr in `fmt` (`json` or `text`) at `level`, with records bounded;
    replaces any handler set before, quiets uvicorn's access log (the webhook logs each review
    itself) and stops collecting the caller, thread and process of each record (no line shows
    them)."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        formatter: logging.Formatter = JsonFormatter()
        formatter.converter = time.gmtime
    else:
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
