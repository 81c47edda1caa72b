"""Secrets as the rules read them: labels, and every data value wrapped so it never prints.

Secret payloads are wrapped in :class:`Redacted` so that no repr, log line or traceback can print
a token; only the license check, the copy's body and its fingerprint call `reveal()`. Pure.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuclass.shared.core.base.raw import metadata, str_map


class Redacted:
    """A secret value that never shows itself in repr or str."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The secret itself, for the few places that must use it (the license check, the copy's
        body and fingerprint); never for a message or a log."""
        return self._value

    def __repr__(self) -> str:
        return "<redacted>"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Redacted) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


@dataclass(frozen=True, slots=True)
class SecretRecord:
    """A Secret as a record: its labels and every data value wrapped in :class:`Redacted`."""

    namespace: str
    name: str
    labels: Mapping[str, str]
    data: Mapping[str, Redacted]


def compact_secret(obj: Mapping[str, Any]) -> SecretRecord | None:
    """A Secret's record, values wrapped in :class:`Redacted`; `stringData` (only hand-written files
    carry it) is folded into `data` as the API server would. None without a name and a namespace."""
    meta = metadata(obj)
    name, namespace = meta.get("name"), meta.get("namespace")
    if not isinstance(name, str) or not isinstance(namespace, str):
        return None
    data = {k: Redacted(v) for k, v in str_map(obj.get("data")).items()}
    # stringData is write-only in the API (merged into data); hand-written files may still use it.
    for key, text in str_map(obj.get("stringData")).items():
        data[key] = Redacted(base64.b64encode(text.encode()).decode())
    return SecretRecord(namespace, name, str_map(meta.get("labels")), data)
