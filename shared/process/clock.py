"""The clock, at the edge: the core takes `now` as an argument."""

from datetime import UTC, datetime


def now_rfc3339() -> str:
    """Now in UTC as RFC 3339 to the second, the form of a condition's lastTransitionTime; the one
    place the CLI reads the wall clock for a status."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
