"""Why an object is refused: a cause with its field path, and the words messages share.

Every validator and admitter reports what is wrong as :class:`Cause` values, all of
them at once (docs/conventions.md): the field path, a message written for the person
who gets it, whether it is invalid input or a policy refusal, and the reason code
the API server shows. Rendering causes into a response is the admission layer's job
(`shared.core.admission.decisions`); this module only says what a cause is.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal, NamedTuple

from gpuclass.shared.core.base.fieldpath import FieldPath

CauseKind = Literal["invalid", "forbidden"]
MAX_WARNING_CHARS = 119


class CauseCode(StrEnum):
    """Every reason a cause may carry in `details.causes[].reason`, in one place.

    The API server passes a webhook's causes to the client unchanged, and clients treat
    `reason` as an opaque word. Two kinds share the field, and this enum says which is which:

    - Kubernetes' own words: `FieldValueInvalid` and `FieldValueForbidden` are apimachinery
      CauseTypes (`k8s.io/apimachinery/pkg/apis/meta/v1`, `CauseType`), used where our
      check mirrors a schema rule the API server itself would report (a GPUClass spec);
      `Invalid` and `Forbidden` are its StatusReasons, the default for a cause that has no
      better word.
    - Ours: one word per rule of docs/contract.md, stable across releases, because the
      webhook's denial metric (`cause` label), its decision log and alert runbooks select on
      them. docs/webhook.md, "Cause codes", lists them with their rule.

    The values are part of the wire format: a member may be added, never renamed, except to
    the wire's one spelling of a word (`LicenceHandMounted` became `LicenseHandMounted`; the old
    word is still read as input for one release, :data:`DEPRECATED_REASONS`).
    Logic that depends on a cause's meaning asks a property of the code (`is_class_state`),
    never compares the word.
    """

    # Kubernetes' words
    INVALID = "Invalid"
    FORBIDDEN = "Forbidden"
    FIELD_VALUE_INVALID = "FieldValueInvalid"
    FIELD_VALUE_FORBIDDEN = "FieldValueForbidden"
    # the selection (contract 4.1) and what is beside it (4.2, 4.6, 4.8)
    SELECTION_TOO_LARGE = "SelectionTooLarge"
    RAW_REQUEST_BESIDE_CLASSES = "RawRequestBesideClasses"
    RESERVED_NAME = "ReservedName"
    LICENSE_HAND_MOUNTED = "LicenseHandMounted"
    # the classes a selection names (4.3)
    CLASS_NOT_FOUND = "ClassNotFound"
    CLASS_INVALID = "ClassInvalid"
    CLASS_DELETING = "ClassDeleting"
    RESOURCE_NAME_CONFLICT = "ResourceNameConflict"
    RESOURCE_NAME_NOT_PERMITTED = "ResourceNameNotPermitted"
    # limits and vGPU rules (4.4, 4.5)
    TOO_MANY_UNITS = "TooManyUnits"
    MAX_COUNT_EXCEEDED = "MaxCountExceeded"
    MULTIPLE_VGPU_CLASSES = "MultipleVGPUClasses"
    WORKER_POOL_VGPU = "WorkerPoolVGPU"
    NOT_ENTITLED = "NotEntitled"
    # updates (4.7) and the check after every mutation (4.11)
    SELECTION_IMMUTABLE = "SelectionImmutable"
    GPU_ENTRIES_MISMATCH = "GPUEntriesMismatch"
    LICENSE_VOLUME_MISSING = "LicenseVolumeMissing"
    # Deprecated Python names, for one release (CHANGELOG): the same members, the new words.
    LICENCE_HAND_MOUNTED = "LicenseHandMounted"
    LICENCE_VOLUME_MISSING = "LicenseVolumeMissing"

    @classmethod
    def _missing_(cls, value: object) -> CauseCode | None:
        """Read a reason of the previous release's spelling as today's member (one release):
        `CauseCode("LicenceHandMounted")` is :attr:`LICENSE_HAND_MOUNTED`."""
        renamed = DEPRECATED_REASONS.get(value) if isinstance(value, str) else None
        return cls(renamed) if renamed is not None else None

    @property
    def is_kubernetes(self) -> bool:
        """A word of Kubernetes' own vocabulary (a CauseType or a StatusReason), not one of ours."""
        return self in _KUBERNETES_WORDS

    @property
    def is_class_state(self) -> bool:
        """The cause is about the state of a class the tenant named (unknown, invalid, deleting,
        unavailable), not about the tenant's input: something the hoster can change later,
        so a VirtualMachine only warns about it (contract 4.10)."""
        return self in _CLASS_STATE


DEPRECATED_REASONS: dict[str, str] = {
    "LicenceHandMounted": "LicenseHandMounted",
    "LicenceVolumeMissing": "LicenseVolumeMissing",
}
"""Reasons renamed to the wire's spelling, old word to new: accepted where a reason is read as
input (CauseCode lookups, golden expectations) for one release (CHANGELOG, Unreleased)."""

_KUBERNETES_WORDS = frozenset(
    {
        CauseCode.INVALID,
        CauseCode.FORBIDDEN,
        CauseCode.FIELD_VALUE_INVALID,
        CauseCode.FIELD_VALUE_FORBIDDEN,
    }
)
_CLASS_STATE = frozenset(
    {
        CauseCode.CLASS_NOT_FOUND,
        CauseCode.CLASS_INVALID,
        CauseCode.CLASS_DELETING,
        CauseCode.RESOURCE_NAME_CONFLICT,
        CauseCode.RESOURCE_NAME_NOT_PERMITTED,
    }
)


class Cause(NamedTuple):
    """One reason for a refusal: where (field path), what to do (message), and its class.

    A named tuple rather than a frozen dataclass: as immutable, and made in half the time, which
    counts when a hostile review makes dozens (benchmarks/bench_decision.py)."""

    path: FieldPath
    message: str
    kind: CauseKind = "invalid"
    code: CauseCode = CauseCode.INVALID

    @property
    def field(self) -> str:
        """The path as the API server writes it in `details.causes[].field`."""
        return str(self.path)

    def render(self, field: str | None = None) -> str:
        """`field: message`, or the message alone for a cause about the whole object; `field` is
        the rendered path when the caller has it already."""
        field = self.field if field is None else field
        return f"{field}: {self.message}" if field else self.message

    def moved(self, prefix: FieldPath, new: FieldPath) -> Cause:
        """The same cause, its path re-rooted from `prefix` to `new` (see `FieldPath.rebase`)."""
        return Cause(self.path.rebase(prefix, new), self.message, self.kind, self.code)


def invalid(path: FieldPath, message: str, *, code: CauseCode = CauseCode.INVALID) -> Cause:
    """A cause the client can fix in its input (a 422 when it refuses)."""
    return _made(Cause, (path, message, "invalid", code))


def forbidden(path: FieldPath, message: str, *, code: CauseCode = CauseCode.FORBIDDEN) -> Cause:
    """A cause that is policy, not a malformed input (a 403 when every cause is one)."""
    return _made(Cause, (path, message, "forbidden", code))


# A named tuple's constructor is a generated function around this call; the two makers above,
# which a hostile review calls dozens of times, make the tuple directly with every field given.
_made = tuple.__new__


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
