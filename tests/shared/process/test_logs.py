"""Log lines stay bounded whatever a request carries (shared/process/logs.py)."""

from __future__ import annotations

import asyncio
import io
import json
import logging

import pytest

from gpuclass.shared.process.logs import (
    MAX_FIELD_CHARS,
    MAX_MESSAGE_CHARS,
    BoundedFields,
    JsonLines,
    _direct_handler,
    log_fields,
    setup_logging,
)


@pytest.fixture
def stream(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    out = io.StringIO()
    monkeypatch.setattr("sys.stderr", out)
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    setup_logging("info", "json")
    yield out
    root.handlers[:], root.level = handlers, level


def test_long_fields_and_messages_are_cut(stream: io.StringIO) -> None:
    uid = "u" * 5_000_000
    logging.getLogger("test").info(
        "got %s", "m" * 100_000, extra={"fields": {"uid": uid, "causes": ["c" * 10_000], "n": 3}}
    )
    [line] = stream.getvalue().splitlines()
    entry = json.loads(line)
    assert len(line) < MAX_MESSAGE_CHARS + 2 * MAX_FIELD_CHARS + 500
    assert entry["uid"].startswith("u" * MAX_FIELD_CHARS) and entry["uid"].endswith("more)")
    assert len(entry["causes"][0]) < MAX_FIELD_CHARS + 20
    assert entry["n"] == 3 and entry["msg"].startswith("got mmm")


def test_short_values_are_untouched(stream: io.StringIO) -> None:
    logging.getLogger("test").info("admission", extra={"fields": {"uid": "abc", "causes": []}})
    entry = json.loads(stream.getvalue())
    assert (entry["msg"], entry["uid"], entry["causes"]) == ("admission", "abc", [])


def test_fields_bounded_by_their_maker_are_written_as_given(stream: io.StringIO) -> None:
    """The webhook clips its decision fields itself (BoundedFields); a plain dict is still cut."""
    made = BoundedFields({"uid": "u" * (MAX_FIELD_CHARS + 1), "causes": ["a"]})
    logging.getLogger("test").info("admission", extra={"fields": made})
    logging.getLogger("test").info("admission", extra={"fields": dict(made)})
    given, cut = (json.loads(line) for line in stream.getvalue().splitlines())
    assert given["uid"] == "u" * (MAX_FIELD_CHARS + 1)
    assert cut["uid"].startswith("u" * MAX_FIELD_CHARS) and cut["uid"].endswith("(1 more)")


def _only_ours() -> None:
    """Only our handler on the root logger: pytest adds its capture handler when a test's body
    starts, which would send every line through logging."""
    root = logging.getLogger()
    root.handlers[:] = [h for h in root.handlers if isinstance(h, JsonLines)]
    assert _direct_handler(logging.getLogger("gpuclass.test")) is not None


def _without_ts(line: str) -> dict[str, object]:
    entry = json.loads(line)
    assert entry.pop("ts").endswith("Z")
    return entry


def test_the_direct_line_is_the_line_logging_writes(stream: io.StringIO) -> None:
    """`log_fields` skips logging's record for the line per review; the line is the same."""
    _only_ours()
    logger = logging.getLogger("gpuclass.test")
    fields = BoundedFields({"uid": "u-1", "allowed": True, "causes": ["A"], "ms": 0.5})
    log_fields(logger, "admission", fields=fields)
    logger.info("admission", extra={"fields": fields})
    written, through_logging = stream.getvalue().splitlines()
    assert _without_ts(written) == _without_ts(through_logging)
    assert list(json.loads(written)) == list(json.loads(through_logging))  # same key order


def test_the_direct_line_gives_way_to_anything_else_configured(stream: io.StringIO) -> None:
    """A handler or filter on the way, or a level above info, gets the record as before."""
    _only_ours()
    logger = logging.getLogger("gpuclass.test.other")
    seen: list[logging.LogRecord] = []
    extra = logging.Handler()
    extra.emit = seen.append  # type: ignore[method-assign]
    logger.addHandler(extra)
    try:
        log_fields(logger, "admission", fields=BoundedFields({"uid": "u-2"}))
    finally:
        logger.removeHandler(extra)
    assert [r.fields for r in seen] == [{"uid": "u-2"}]  # type: ignore[attr-defined]
    assert json.loads(stream.getvalue())["uid"] == "u-2"  # and the root handler's line too
    logging.getLogger().setLevel(logging.WARNING)
    log_fields(logger, "admission", fields=BoundedFields({"uid": "u-3"}))
    assert "u-3" not in stream.getvalue()


def test_direct_lines_of_one_loop_turn_are_written_at_its_end_in_order(
    stream: io.StringIO,
) -> None:
    """Inside an event loop the direct lines of a turn go out together when it ends; a record
    through logging writes the held ones first, so the order is the order of logging."""
    _only_ours()
    logger = logging.getLogger("gpuclass.test.turn")
    written_in_turn: list[str] = []

    async def turn() -> None:
        log_fields(logger, "admission", fields=BoundedFields({"uid": "a"}))
        log_fields(logger, "admission", fields=BoundedFields({"uid": "b"}))
        written_in_turn.append(stream.getvalue())
        logger.warning("between", extra={"fields": {"uid": "c"}})
        log_fields(logger, "admission", fields=BoundedFields({"uid": "d"}))
        await asyncio.sleep(0)  # the turn ends: what is held is written
        written_in_turn.append(stream.getvalue())

    asyncio.run(turn())
    assert written_in_turn[0] == ""
    assert [json.loads(line)["uid"] for line in written_in_turn[1].splitlines()] == list("abcd")
