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

from gpuclass.shared.core.base.fieldpath import FieldPath

CauseKind = Literal["invalid", "forbidden"]
MAX_WARNING_CHARS = 119


@dataclass(frozen=True, slots=True)
class Cause:
    """One reason for a refusal: where (field path), what to do (message), and its class."""

    path: FieldPath
    message: str
    kind: CauseKind = "invalid"
    code: str = "Invalid"

    @property
    def field(self) -> str:
        """The path as the API server writes it in `details.causes[].field`."""
        return str(self.path)

    def render(self) -> str:
        """`field: message`, or the message alone for a cause about the whole object."""
        return f"{self.field}: {self.message}" if self.path else self.message

    def moved(self, prefix: FieldPath, new: FieldPath) -> Cause:
        """The same cause, its path re-rooted from `prefix` to `new` (see `FieldPath.rebase`)."""
        return Cause(self.path.rebase(prefix, new), self.message, self.kind, self.code)


def _path(path: FieldPath | str) -> FieldPath:
    return path if isinstance(path, FieldPath) else FieldPath.parse(path)


def invalid(path: FieldPath | str, message: str, code: str = "Invalid") -> Cause:
    """A cause the client can fix in its input (a 422 when it refuses)."""
    return Cause(_path(path), message, "invalid", code)


def forbidden(path: FieldPath | str, message: str, code: str = "Forbidden") -> Cause:
    """A cause that is policy, not a malformed input (a 403 when every cause is one)."""
    return Cause(_path(path), message, "forbidden", code)


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
