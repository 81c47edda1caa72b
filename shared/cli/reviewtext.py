"""An AdmissionReview response as a person reads it: `gpuclass review -o text`.

Pure: the response document in, lines out. The verdict first (`allowed`, or `denied`
with the status code and reason), then each cause on its own line with its field and
reason code, the warnings, and the JSON patch decoded, one operation per line. The JSON
response stays the default output: it is what the webhook sends (docs/contract.md 7.2).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from typing import Any

import orjson

from gpuclass.shared.cli.escape import guard_lines, json_text, text

_MORE = re.compile(r"; and (\d+) more$")


def _operations(response: Mapping[str, Any]) -> list[Any]:
    patch = response.get("patch")
    if not isinstance(patch, str):
        return []
    try:
        operations = orjson.loads(base64.b64decode(patch, validate=True))
    except (binascii.Error, orjson.JSONDecodeError):
        return [{"op": "(undecodable patch)", "path": "", "value": patch}]
    return operations if isinstance(operations, list) else [operations]


def _operation_line(op: object) -> str:
    if not isinstance(op, dict):
        return f"  {json_text(op, indent=False)}"
    words = [str(op.get("op", "?")), str(op.get("path", ""))]
    if "from" in op:
        words.append(f"from {op['from']}")
    if "value" in op:
        words.append(json_text(op["value"], indent=False))
    return "  " + " ".join(words)


def _denial_lines(status: Mapping[str, Any]) -> list[str]:
    lines = [f"denied: {status.get('code', '?')} {status.get('reason', '')}".rstrip()]
    details = status.get("details")
    causes = details.get("causes") if isinstance(details, dict) else None
    for cause in causes if isinstance(causes, list) else []:
        if not isinstance(cause, dict):
            continue
        field = cause.get("field") or "(request)"
        reason = f" [{cause['reason']}]" if cause.get("reason") else ""
        lines.append(f"  cause: {field}: {cause.get('message', '')}{reason}")
    more = _MORE.search(str(status.get("message", "")))
    if more:
        lines.append(f"  and {more.group(1)} more causes")
    elif not causes and status.get("message"):
        lines.append(f"  message: {status['message']}")
    return lines


def review_lines(review: Mapping[str, Any]) -> list[str]:
    """The lines of `gpuclass review -o text` for one AdmissionReview response."""
    raw = review.get("response")
    response: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
    if response.get("allowed") is True:
        lines = ["allowed"]
    else:
        status = response.get("status")
        lines = _denial_lines(status if isinstance(status, dict) else {})
    warnings = response.get("warnings")
    lines += [f"warning: {w}" for w in (warnings if isinstance(warnings, list) else [])]
    operations = _operations(response)
    if operations:
        count = len(operations)
        lines.append(f"patch ({count} operation{'' if count == 1 else 's'}):")
        lines += [_operation_line(op) for op in operations]
    return lines


def render_review_text(review: Mapping[str, Any]) -> str:
    """`gpuclass review -o text`: the response as lines a person reads (decision, causes, warnings,
    each patch operation), one per line; built from the rendered JSON, so it shows exactly what
    the webhook would send. Each line is escaped for plain text (:mod:`shared.cli.escape`): the
    messages quote what the tenant wrote."""
    return guard_lines("".join(text(line) + "\n" for line in review_lines(review)))
