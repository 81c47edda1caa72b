"""Why an object is refused: a cause with its field path, and the words messages share.

Every validator and admitter reports what is wrong as :class:`Cause` values, all of
them at once (docs/conventions.md): the field path, a message written for the person
who gets it, whether it is invalid input or a policy refusal, and the reason code
the API server shows. Rendering causes into a response is the admission layer's job
(`shared.core.admission.decisions`); this module only says what a cause is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

CauseKind = Literal["invalid", "forbidden"]
MAX_WARNING_CHARS = 119


@dataclass(frozen=True, slots=True)
class Cause:
    """One reason for a refusal: where (field path), what to do (message), and its class."""

    field: str
    message: str
    kind: CauseKind = "invalid"
    code: str = "Invalid"

    def render(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


def invalid(path: str, message: str, code: str = "Invalid") -> Cause:
    return Cause(path, message, "invalid", code)


def forbidden(path: str, message: str, code: str = "Forbidden") -> Cause:
    return Cause(path, message, "forbidden", code)


_JSON_KINDS: tuple[tuple[type, str], ...] = (
    (bool, "a boolean"),  # before int: True is an int in Python
    (int, "an integer"),
    (float, "a number"),
    (str, "a string"),
    (list, "a list"),
    (dict, "an object"),
)


def json_kind(value: object) -> str:
    """What kind of JSON value a message says it received ("got a string"), never the value itself."""
    if value is None:
        return "null"
    for kind, name in _JSON_KINDS:
        if isinstance(value, kind):
            return name
    return type(value).__name__


def clip_warning(text: str) -> str:
    """Kubernetes shows warnings verbatim; keep each under 120 characters."""
    return text if len(text) <= MAX_WARNING_CHARS else text[: MAX_WARNING_CHARS - 3] + "..."
