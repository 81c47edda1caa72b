"""One code path from an AdmissionReview body to its response, for the webhook and the CLI.

:func:`review` parses the envelope (refusing what is not an AdmissionReview with
:class:`MalformedReview`, which the shells map to HTTP 400 or exit code 2),
dispatches on the object's kind to one admitter, and renders the decision.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from gpuclass.shared import names
from gpuclass.shared.admission import Allowed, Decision, Denied, render_response
from gpuclass.shared.catalog import Catalog
from gpuclass.shared.launcher import admit_launcher_pod
from gpuclass.shared.resolution import admit_vmi
from gpuclass.shared.validation import validate_class

API_VERSIONS: Final = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")

VMI: Final = ("kubevirt.io", "VirtualMachineInstance")
POD: Final = ("", "Pod")
GPUCLASS: Final = (names.GROUP, names.KIND)


class MalformedReview(ValueError):
    """The body is not an AdmissionReview we can answer: a client error, never a denial."""


def admit_gpuclass(request: Mapping[str, Any], catalog: Catalog) -> Decision:
    if request.get("operation") not in ("CREATE", "UPDATE"):
        return Allowed()
    old = request.get("oldObject") if request.get("operation") == "UPDATE" else None
    verdict = validate_class(request.get("object"), old=old, others=catalog.resource_by_class())
    if verdict.causes:
        return Denied(verdict.causes, verdict.warnings)
    return Allowed((), verdict.warnings)


ADMITTERS: Final[dict[tuple[str, str], Callable[[Mapping[str, Any], Catalog], Decision]]] = {
    VMI: admit_vmi,
    POD: admit_launcher_pod,
    GPUCLASS: admit_gpuclass,
}


OPERATIONS: Final = ("CREATE", "UPDATE", "DELETE", "CONNECT")


def parse_envelope(body: object) -> tuple[str, dict[str, Any], str, tuple[str, str]]:
    """(apiVersion, request, uid, (group, kind)) or MalformedReview naming what is wrong.

    Every envelope field a rule, a metric or a log line reads is type-checked here, so
    that nothing downstream meets a list where it expects a string: a wrong type is a
    client error (400), never an unexpected one (500).
    """
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
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise MalformedReview("request.uid: required, a string")
    kind = request.get("kind")
    if (
        not isinstance(kind, dict)
        or not isinstance(kind.get("kind"), str)
        or not _optional(kind, "group", str)
        or not _optional(kind, "version", str)
    ):
        raise MalformedReview(
            f"request.kind: required, an object with group, version and kind (got {_short(kind)})"
        )
    _check_request_fields(request)
    group = kind.get("group") or ""
    return api_version, request, uid, (str(group), kind["kind"])


def _check_request_fields(request: Mapping[str, Any]) -> None:
    operation = request.get("operation")
    if not isinstance(operation, str) or operation not in OPERATIONS:
        raise MalformedReview(
            f"request.operation: required, one of {', '.join(OPERATIONS)} (got {_short(operation)})"
        )
    for name, expected, what in _FIELD_TYPES:
        if not _optional(request, name, expected):
            raise MalformedReview(f"request.{name}: must be {what} when present")
    user = request.get("userInfo")
    if isinstance(user, dict):
        groups = user.get("groups")
        if not _optional(user, "username", str) or not _optional(user, "uid", str):
            raise MalformedReview("request.userInfo: username and uid must be strings")
        if groups is not None and not (
            isinstance(groups, list) and all(isinstance(g, str) for g in groups)
        ):
            raise MalformedReview("request.userInfo.groups: must be a list of strings")


_FIELD_TYPES: Final = (
    ("name", str, "a string"),
    ("namespace", str, "a string"),
    ("userInfo", dict, "an object"),
    ("dryRun", bool, "true or false"),
    ("object", dict, "an object"),
    ("oldObject", dict, "an object"),
)


def _optional(mapping: Mapping[str, Any], key: str, expected: type) -> bool:
    """True when `key` is absent, null, or of the expected type (bool is not an int here)."""
    value = mapping.get(key)
    return value is None or isinstance(value, expected)


def _group_kind(gk: tuple[str, str]) -> str:
    """`kubevirt.io/VirtualMachineInstance`, `core/Pod`: what was received, group included."""
    return _short(f"{gk[0] or 'core'}/{gk[1]}").strip("'")


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def decide(
    body: object, catalog: Catalog, *, expect: tuple[str, str] | None = None
) -> tuple[str, str, Decision, tuple[str, str]]:
    api_version, request, uid, gk = parse_envelope(body)
    if expect is not None and gk != expect:
        raise MalformedReview(
            f"request.kind: this endpoint admits {_group_kind(expect)}, not {_group_kind(gk)}"
        )
    admitter = ADMITTERS.get(gk)
    if admitter is None:
        raise MalformedReview(
            f"request.kind: gpuclass does not admit {_group_kind(gk)} "
            "(only GPUClass, VirtualMachineInstance and Pod)"
        )
    return api_version, uid, admitter(request, catalog), gk


def review(
    body: object, catalog: Catalog, *, expect: tuple[str, str] | None = None
) -> dict[str, Any]:
    """The AdmissionReview response for `body`, exactly as the webhook sends it."""
    api_version, uid, decision, _ = decide(body, catalog, expect=expect)
    return render_response(decision, uid=uid, api_version=api_version)
