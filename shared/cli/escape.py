"""One escaping function per output format, for every string our code did not write.

`gpuclass validate`, `review`, `explain` and `plan` run in a hoster's CI on pull requests, and
their output becomes a PR comment, workflow annotations and the CI log. A class name, a spec key
or a file name comes from the pull request; a VM's name or a GPU's `deviceName` comes from a
tenant. Each lands in one of these formats through the function for that format
(docs/decisions.md, "Outputs nobody can take over"):

- :func:`text`: a line of plain text (the CI log): control characters, DEL and C1 controls
  (ANSI escape sequences among them) shown as `\\xNN`/`\\uNNNN`, so a value can neither colour
  the log nor start a new line; :func:`guard_lines` is the net after it: a line whose first
  non-blank characters are `::` (a GitHub workflow command such as `::add-mask::` or
  `::stop-commands::`) gets its first colon escaped, so only lines we write as commands are ones;
- :func:`md_code` (an inline code span whose fence is longer than any backtick run in the
  value), :func:`md_text` (HTML-escaped, `|` escaped for table cells, no `@` mention, no
  `<!--`) and :func:`md_fence` (a code block fence longer than any backtick run in the block);
- :func:`xml_text`: text JUnit XML can hold (characters XML 1.0 forbids shown escaped;
  ElementTree escapes the markup itself);
- GitHub annotations use :func:`text` with newlines kept, then the Actions toolkit's own
  escaping (`shared.cli.lintformat.workflow_command`); JSON is escaped by its encoder
  (:func:`json_text`, which also writes a lone surrogate as its escape).

Pure.
"""

from __future__ import annotations

import html
import json
import re
from typing import Any

import orjson

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")
_CONTROL_ALL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_XML_FORBIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
_BACKTICKS = re.compile("`+")
_COMMAND_LINE = re.compile(r"^(\s*):(?=:)", re.M)


def _shown(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def text(value: object, *, keep_newlines: bool = False) -> str:
    """`value` for plain text output: every control character shown escaped (newlines too, unless
    `keep_newlines`: a multi-line message the format carries escaped itself)."""
    pattern = _CONTROL if keep_newlines else _CONTROL_ALL
    return pattern.sub(_shown, str(value))


def guard_lines(output: str) -> str:
    """No line of `output` reads as a GitHub workflow command unless it is one of ours: a line
    starting (after blanks) with `::` has its first colon written `\\x3a`. Run on the whole text
    output of a command, after :func:`text` on every value in it."""
    return _COMMAND_LINE.sub(lambda m: m.group(1) + "\\x3a", output)


def _longest_backticks(value: str) -> int:
    return max((len(run) for run in _BACKTICKS.findall(value)), default=0)


def md_code(value: object) -> str:
    """An inline code span showing `value` literally: its fence one backtick longer than any run
    in it, padded when it starts or ends with a backtick; control characters escaped and `|`
    escaped (GitHub tables split cells on it even inside code spans)."""
    shown = text(value).replace("|", "\\|")
    fence = "`" * (_longest_backticks(shown) + 1)
    pad = " " if shown.startswith("`") or shown.endswith("`") or not shown.strip() else ""
    return f"{fence}{pad}{shown}{pad}{fence}"


def md_text(value: object) -> str:
    """`value` as Markdown text (a table cell, a list item): HTML-escaped (no tag, no `<!--`
    comment, no `</details>`), backticks, `*`, `_`, `[`, `]`, `\\` and `|` escaped, `@` followed by
    a zero-width space so it mentions nobody (GitHub finds mentions in the rendered text, where an
    entity would be `@` again), control characters escaped and lines joined."""
    shown = html.escape(text(value), quote=True)
    for char in ("\\", "`", "*", "_", "[", "]", "|", "#", "~"):
        shown = shown.replace(char, "\\" + char)
    return shown.replace("@", "@\u200b")


def md_fence(block: str) -> str:
    """A code block fence for `block`: backticks, at least three, one more than its longest run."""
    return "`" * max(3, _longest_backticks(block) + 1)


def xml_text(value: object) -> str:
    """`value` as text XML 1.0 can hold: forbidden characters (most C0 controls, lone surrogates,
    U+FFFE and U+FFFF) shown escaped; ElementTree escapes `<`, `&` and quotes."""
    return _XML_FORBIDDEN.sub(_shown, str(value))


def json_text(value: Any, *, indent: bool = True) -> str:
    """`value` as a JSON document; a string holding a lone surrogate (a YAML file can write one
    as an escape) is written as its `\\uXXXX` escape instead of failing the command."""
    try:
        return orjson.dumps(value, option=orjson.OPT_INDENT_2 if indent else 0).decode()
    except TypeError:
        return json.dumps(value, indent=2 if indent else None, ensure_ascii=True)
