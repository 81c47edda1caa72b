"""How many values a JSON text holds, counted from its bytes before it is parsed.

Parsing is where a small text becomes a large tree: 7 MiB of `[],` are millions of lists and
many times their bytes in Python objects (docs/performance.md), and a list page of objects a tenant filled with empty objects
(in `managedFields`, say) grows the same way. Byte caps cannot see this; a count of values can.
Every value but the first inside a list or an object follows a comma, and every list or object
opens with `[` or `{`, so commas plus opening brackets bound the number of values a text holds
(docs/decisions.md, "Values per review"). Commas and brackets inside strings count too: the
bound can only over-count. Three C-speed byte counts, nothing built. Every counted value is
one byte of the text, so a text no longer than a limit is within it without counting (the
webhook's limit is 2^19 values, so a review under 512 KiB, nearly every one, is not counted).
"""

from __future__ import annotations


def json_values(text: bytes | bytearray) -> int:
    """Commas plus opening brackets of `text`: at least the number of values a parse would build
    (a lone scalar counts 0)."""
    return text.count(b",") + text.count(b"{") + text.count(b"[")


def values_over(text: bytes | bytearray, limit: int) -> int | None:
    """`json_values(text)` when it exceeds `limit`, else None; a text of at most `limit` bytes
    holds at most `limit` counted bytes, so it is not counted."""
    if len(text) <= limit:
        return None
    values = json_values(text)
    return values if values > limit else None
