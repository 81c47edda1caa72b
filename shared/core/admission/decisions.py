"""Admission decisions as values, and the one renderer to an AdmissionReview response.

A decision is `Allowed(operations, warnings)` or `Denied(causes)`. Every admitter
returns one; :func:`render_response` is the only place that knows the wire shape
(docs/contract.md section 3): uid copied, apiVersion echoed, base64 JSON patch only when
there are operations, warnings under 120 characters, a denial coded 422 when any
cause is invalid input and 403 when all are policy refusals, its message naming
every cause with its field path (after 20: "and N more").
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

import orjson

from gpuclass.shared.core.base.causes import Cause, clip_warning

MAX_LISTED_CAUSES = 20


@dataclass(frozen=True, slots=True)
class Allowed:
    """Admit, with the JSON patch operations to apply (empty: nothing to change) and warnings for
    the user."""

    operations: tuple[dict[str, Any], ...] = ()
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Denied:
    """Refuse, with every cause at once; warnings still reach the user beside the denial."""

    causes: tuple[Cause, ...]
    warnings: tuple[str, ...] = field(default=())

    @property
    def code(self) -> int:
        """422 when any cause is invalid input, 403 when all are policy refusals: a tenant can tell
        a typo from a rule."""
        return 422 if any(c.kind == "invalid" for c in self.causes) else 403


Decision = Allowed | Denied


def denial_message(causes: tuple[Cause, ...]) -> str:
    """The status message naming each cause with its field path, the first MAX_LISTED_CAUSES only,
    then "and N more" (a hostile request cannot grow the response without bound)."""
    return _message(causes, [str(c.path) for c in causes[:MAX_LISTED_CAUSES]])


def _message(causes: tuple[Cause, ...], fields: list[str]) -> str:
    listed = "; ".join([cause.render(field) for field, cause in zip(fields, causes, strict=False)])
    extra = len(causes) - MAX_LISTED_CAUSES
    if extra > 0:
        listed += f"; and {extra} more"
    return listed


def encode_response(response: dict[str, Any]) -> bytes:
    """The response bytes, the same for the webhook and `gpuclass review`."""
    return orjson.dumps(response, option=orjson.OPT_INDENT_2) + b"\n"


def render_response(decision: Decision, *, uid: str, api_version: str) -> dict[str, Any]:
    """The AdmissionReview the API server expects back, for any decision."""
    response: dict[str, Any] = {"uid": uid}
    if isinstance(decision, Allowed):
        response["allowed"] = True
        if decision.operations:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(orjson.dumps(list(decision.operations))).decode()
    else:
        code, causes = decision.code, decision.causes
        fields = [str(c.path) for c in causes[:MAX_LISTED_CAUSES]]  # each path rendered once
        response["allowed"] = False
        response["status"] = {
            "code": code,
            "reason": "Invalid" if code == 422 else "Forbidden",
            "message": _message(causes, fields),
            "details": {
                "causes": [
                    # the code is a str enum: orjson writes its value, and it equals its value
                    {"field": field, "message": c.message, "reason": c.code}
                    for field, c in zip(fields, causes, strict=False)
                ]
            },
        }
    warnings = list(dict.fromkeys(clip_warning(w) for w in decision.warnings))
    if warnings:
        response["warnings"] = warnings
    return {"apiVersion": api_version, "kind": "AdmissionReview", "response": response}
