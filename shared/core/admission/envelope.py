"""The AdmissionReview envelope, checked once and typed (docs/contract.md section 3).

:func:`parse_envelope` turns a decoded body into an :class:`AdmissionRequest` or
raises :class:`MalformedReview` naming what is wrong, which the shells map to HTTP
400 or exit code 2. Every field a rule, a metric or a log line reads is type-checked
here, so nothing downstream meets a list where it expects a string: a wrong type is
a client error (400), never an unexpected one (500). Admitters read the typed fields;
they never see the raw envelope.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal, NamedTuple

from gpuclass.shared.core.base import names
from gpuclass.shared.core.base.jsonsize import values_over

API_VERSIONS: Final = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")
Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
OPERATIONS: Final[tuple[Operation, ...]] = ("CREATE", "UPDATE", "DELETE", "CONNECT")


class GroupKind(NamedTuple):
    """The request's `kind` without its version: endpoints dispatch on group and kind alone, so
    every served version of a kind reaches the same admitter."""

    group: str  # "" for the core group
    kind: str

    def __str__(self) -> str:
        """`kubevirt.io/VirtualMachineInstance`, `core/Pod`: what was received, group included."""
        return _short(f"{self.group or 'core'}/{self.kind}").strip("'")


VMI: Final = GroupKind("kubevirt.io", "VirtualMachineInstance")
VM: Final = GroupKind("kubevirt.io", "VirtualMachine")
POD: Final = GroupKind("", "Pod")
GPUCLASS: Final = GroupKind(names.GROUP, names.KIND)


class MalformedReview(ValueError):
    """The body is not an AdmissionReview we can answer: a client error, never a denial."""


class AdmissionRequest(NamedTuple):
    """What an admitter may read of one AdmissionReview request, every field of its JSON type
    (a named tuple: immutable, and made per review at a quarter of a frozen dataclass's cost)."""

    api_version: str
    uid: str
    kind: GroupKind
    operation: Operation
    object: Mapping[str, Any] | None = None
    old_object: Mapping[str, Any] | None = None
    request_namespace: str = ""  # request.namespace as sent
    name: str = ""
    username: str = ""
    groups: tuple[str, ...] = ()
    dry_run: bool = False

    @property
    def namespace(self) -> str:
        """`request.namespace`, else `object.metadata.namespace` (docs/contract.md section 3)."""
        if self.request_namespace:
            return self.request_namespace
        meta = self.object.get("metadata") if self.object is not None else None
        namespace = meta.get("namespace") if isinstance(meta, dict) else None
        return namespace if isinstance(namespace, str) else ""


MAX_REVIEW_VALUES: Final = 2**19
"""JSON values a review body may hold, counted from its bytes before parsing
(:func:`too_many_values`). Parsed, a value costs up to about 100 bytes (a one-key object in a
list), so this bounds one review's tree near 50 MB; an honest review holds a few thousand, and
even an UPDATE of two 1.5 MiB objects (etcd's limit) of dense JSON stays under it."""


def too_many_values(body: bytes, limit: int = MAX_REVIEW_VALUES) -> str | None:
    """Why `body` is refused unparsed, or None: it holds more than `limit` JSON values
    (:func:`shared.core.base.jsonsize.values_over`, an over-count). The webhook answers 413 and
    `gpuclass review` exits 2, before anything is built."""
    values = values_over(body, limit)
    if values is None:
        return None
    return (
        f"request body holds more than {limit} JSON values (counted {values} commas and "
        "brackets): an AdmissionReview never needs that many"
    )


def parse_envelope(body: object) -> AdmissionRequest:
    """The typed request of `body`, or MalformedReview naming the first thing that is wrong."""
    if not isinstance(body, dict):
        raise MalformedReview("body must be a JSON object: an AdmissionReview")
    api_version = body.get("apiVersion")
    if api_version not in API_VERSIONS:
        raise MalformedReview(
            f"apiVersion must be one of {', '.join(API_VERSIONS)} (got {_short(api_version)})"
        )
    if body.get("kind") != "AdmissionReview":
        raise MalformedReview(f"kind must be AdmissionReview (got {_short(body.get('kind'))})")
    request = body.get("request")
    if not isinstance(request, dict):
        raise MalformedReview("request: required, an object")
    return request_from(request, api_version=str(api_version))


def request_from(request: Mapping[str, Any], *, api_version: str) -> AdmissionRequest:
    """The typed form of one `request` object (the envelope's inner part)."""
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise MalformedReview("request.uid: required, a string")
    kind = request.get("kind")
    if (
        not isinstance(kind, dict)
        or not isinstance(kind.get("kind"), str)
        or not _optional(kind, "group", expected=str)
        or not _optional(kind, "version", expected=str)
    ):
        raise MalformedReview(
            f"request.kind: required, an object with group, version and kind (got {_short(kind)})"
        )
    operation = request.get("operation")
    if not isinstance(operation, str) or operation not in OPERATIONS:
        raise MalformedReview(
            f"request.operation: required, one of {', '.join(OPERATIONS)} (got {_short(operation)})"
        )
    for field, expected, what in _FIELD_TYPES:
        value = request.get(field)  # absent or null, or of its type (bool is not an int here)
        if value is not None and not isinstance(value, expected):
            raise MalformedReview(f"request.{field}: must be {what} when present")
    username, groups = _user(request.get("userInfo"))
    return AdmissionRequest(  # positional: a named tuple is made faster so, in field order
        api_version,
        uid,
        GroupKind(kind.get("group") or "", kind["kind"]),
        operation,
        request.get("object"),
        request.get("oldObject"),
        request.get("namespace") or "",
        request.get("name") or "",
        username,
        groups,
        bool(request.get("dryRun")),
    )


def _user(user: object) -> tuple[str, tuple[str, ...]]:
    if not isinstance(user, dict):
        return "", ()
    if not _optional(user, "username", expected=str) or not _optional(user, "uid", expected=str):
        raise MalformedReview("request.userInfo: username and uid must be strings")
    groups = user.get("groups")
    if groups is not None and not (
        isinstance(groups, list) and all(isinstance(g, str) for g in groups)
    ):
        raise MalformedReview("request.userInfo.groups: must be a list of strings")
    return user.get("username") or "", tuple(groups or ())


_FIELD_TYPES: Final = (
    ("name", str, "a string"),
    ("namespace", str, "a string"),
    ("userInfo", dict, "an object"),
    ("dryRun", bool, "true or false"),
    ("object", dict, "an object"),
    ("oldObject", dict, "an object"),
)


def _optional(mapping: Mapping[str, Any], key: str, *, expected: type) -> bool:
    """True when `key` is absent, null, or of the expected type (bool is not an int here)."""
    value = mapping.get(key)
    return value is None or isinstance(value, expected)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
