"""Kubernetes value formats the rules need: names, quantities, tolerations.

Each check mirrors apimachinery's validation so that what we accept offline is
what the API server accepts. Functions return an error message or None; the
caller attaches the field path.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

# Every pattern is used with `fullmatch` (Python's `$` also matches before a final "\n", which
# the API server's patterns refuse), has no nested or adjacent overlapping quantifiers, and runs
# only after a length cap, so a check costs time linear in a string no longer than the cap.
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN_PART = _DNS_LABEL
_QUALIFIED_NAME_PART = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
# One way to split the number: digits with an optional fraction, or a bare fraction. The old
# `[0-9]*\.?[0-9]*` could split a run of digits n ways, which made a failing match quadratic.
_QUANTITY = re.compile(r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))([a-zA-Z]*|[eE][-+]?[0-9]+)")

# Length caps, the CRD's maxLength for the same fields (charts/gpuclass/templates/crd-gpuclass.yaml).
MAX_DNS_LABEL = 63
MAX_DNS_SUBDOMAIN = 253
MAX_QUALIFIED_NAME = 317  # a 253-character prefix, '/', a 63-character name
MAX_LABEL_VALUE = 63
MAX_QUANTITY = 64

_BINARY_SUFFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL_SUFFIX = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}


def dns_label_error(value: str) -> str | None:
    """RFC 1123 label: what metadata.name of a GPUClass must be."""
    if len(value) > MAX_DNS_LABEL:
        return f"must be at most {MAX_DNS_LABEL} characters (has {len(value)})"
    if not _DNS_LABEL.fullmatch(value):
        return "must be a DNS label: lowercase letters, digits and '-', starting and ending with a letter or digit"
    return None


def dns_subdomain_error(value: str) -> str | None:
    """RFC 1123 subdomain: what a Secret name must be."""
    if len(value) > MAX_DNS_SUBDOMAIN:
        return f"must be at most {MAX_DNS_SUBDOMAIN} characters (has {len(value)})"
    if not value or not all(_DNS_SUBDOMAIN_PART.fullmatch(p) for p in value.split(".")):
        return "must be a DNS subdomain: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit"
    return None


def qualified_name_error(value: str) -> str | None:
    """A label key or extended-resource name: optional DNS-subdomain prefix, '/', name part."""
    if len(value) > MAX_QUALIFIED_NAME:
        return f"must be at most {MAX_QUALIFIED_NAME} characters (has {len(value)})"
    prefix, slash, name = value.rpartition("/")
    if slash and (not prefix or dns_subdomain_error(prefix)):
        return "prefix before '/' must be a DNS subdomain such as example.com"
    if not name or len(name) > 63 or not _QUALIFIED_NAME_PART.fullmatch(name):
        return "name part must be 1-63 characters of letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
    return None


def extended_resource_error(value: str) -> str | None:
    """An extended resource a device plugin advertises: `domain/name`, not kubernetes.io."""
    if "/" not in value:
        return "must be a qualified extended-resource name such as example.com/gpu"
    error = qualified_name_error(value)
    if error:
        return error
    domain = value.split("/", 1)[0]
    if "kubernetes.io/" in value:  # apimachinery's IsPrefixedNativeResource
        return "must not be in the kubernetes.io domain: name the resource the device plugin advertises"
    if domain == "requests" or value.startswith("requests."):
        return "must not start with 'requests.'"
    return None


def label_value_error(value: str) -> str | None:
    """Why `value` is not a Kubernetes label value (apimachinery's IsValidLabelValue), or None when
    it is; the message is for the person who wrote it."""
    if len(value) > MAX_LABEL_VALUE:
        return f"must be at most {MAX_LABEL_VALUE} characters (has {len(value)})"
    if not _LABEL_VALUE.fullmatch(value):
        return "must be a label value: letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
    return None


def parse_quantity(value: str) -> Decimal:
    """Parse a Kubernetes resource quantity (`16Gi`, `500m`, `1e3`) into a Decimal.

    Raises ValueError with a message for the person who wrote it. Strings longer than
    the CRD's cap are refused before any parsing, and never echoed in full.
    """
    if len(value) > MAX_QUANTITY:
        raise ValueError(
            f"{_clip(value)} is not a Kubernetes quantity: at most {MAX_QUANTITY} characters (has {len(value)})"
        )
    match = _QUANTITY.fullmatch(value)
    if not match:
        raise ValueError(f"{value!r} is not a Kubernetes quantity (examples: 16Gi, 500m, 1e3)")
    number_text, suffix = match.groups()
    try:
        number = Decimal(number_text)
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only numbers
        raise ValueError(f"{value!r} is not a Kubernetes quantity") from exc
    if suffix in _BINARY_SUFFIX:
        return number * _BINARY_SUFFIX[suffix]
    if suffix in _DECIMAL_SUFFIX:
        return number * _DECIMAL_SUFFIX[suffix]
    if suffix[:1] in ("e", "E") and suffix[1:].lstrip("+-").isdigit():
        exponent = int(suffix[1:])
        if abs(exponent) > 1000:
            raise ValueError(f"{value!r}: exponent out of range")
        return number.scaleb(exponent)
    raise ValueError(
        f"{value!r} has an unknown suffix {suffix!r} (use Ki, Mi, Gi, k, M, G, m, ...)"
    )


def _clip(value: str) -> str:
    return repr(value) if len(value) <= 24 else repr(value[:20]) + "..."


MAX_UNITS = 2**32 - 1
"""Units one quantity is read as at most. No device plugin advertises billions of devices; the
bound keeps every sum the status writes (over fewer than 2^31 nodes or containers) inside the
int64 the API server and the JSON encoder accept."""


def quantity_units(value: object) -> int:
    """Whole units of an extended resource from an API quantity (string or number); 0 if unreadable,
    MAX_UNITS at most.

    Extended resources are integers; the API server refuses fractional ones, so
    flooring only matters for hand-written files.
    """
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return min(max(value, 0), MAX_UNITS)
    if isinstance(value, float):  # YAML/JSON numbers in hand-written files: 4.0 is 4 units
        return min(max(int(value), 0), MAX_UNITS) if value == value and abs(value) < 2**63 else 0
    if isinstance(value, str):
        return _units_of_text(value)
    return 0


@functools.lru_cache(maxsize=4096)
def _units_of_text(value: str) -> int:
    """Cached: a cluster repeats a handful of quantity strings ("1", "8") across 150,000 pods."""
    try:
        return min(max(int(parse_quantity(value)), 0), MAX_UNITS)
    except (ValueError, OverflowError):
        return 0


@dataclass(frozen=True, slots=True)
class Taint:
    """A node taint as the capacity rules read it: the three fields `tolerates` compares (timeAdded
    is not kept)."""

    key: str
    value: str
    effect: str


def tolerates(toleration: Mapping[str, Any], taint: Taint) -> bool:
    """core/v1 Toleration.ToleratesTaint, exactly."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.effect:
        return False
    key = toleration.get("key") or ""
    if key and key != taint.key:
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    if operator == "Equal":
        # An empty key with Equal matches any key by value, as upstream does.
        return (toleration.get("value") or "") == taint.value
    return False


def tolerates_all(tolerations: tuple[Mapping[str, Any], ...], taints: tuple[Taint, ...]) -> bool:
    """A class may land on a node when it tolerates every NoSchedule/NoExecute taint there."""
    return all(
        any(tolerates(t, taint) for t in tolerations)
        for taint in taints
        if taint.effect in ("NoSchedule", "NoExecute")
    )
