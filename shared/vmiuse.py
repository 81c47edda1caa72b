"""What the reconciler needs to know about one VMI: which classes it uses and which licence it mounts.

Admission reads the raw VMI itself (any hand-mounted licence reference counts,
see :func:`shared.snapshot.licence_refs`). The reconciler and offline snapshots
ask two narrower questions, and this record answers them from the raw object
once, at event time:

- which classes the VMI *uses* (docs/contract.md section 6, in-use finalizer): the
  classes its selection annotation names — parsed, so a VMI is not re-parsed on
  every reconcile — and the device names of its GPU entries;
- which licence copy it mounts *through the licence volume* of section 1 (volume
  `gpulicense`, `secret.secretName: gpuclass-license-<class>`): only that volume
  triggers a copy; annotations alone never do.

Pure: a dict in, a small frozen record out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuclass.shared import names
from gpuclass.shared.selection import parse_selection


@dataclass(frozen=True, slots=True)
class VMIUse:
    namespace: str
    name: str
    classes: tuple[str, ...]
    """Classes named by valid entries of the selection annotation, first appearance first."""
    device_names: frozenset[str]
    """deviceName of every `spec.domain.devices.gpus` entry."""
    licence_secret: str | None
    """secretName of the `gpulicense` volume when it names a licence copy, else None."""


def _dict(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def selected_classes(annotation: object) -> tuple[str, ...]:
    """Class names of the selection's valid entries (a malformed entry names nothing)."""
    if not isinstance(annotation, str):
        return ()
    entries = parse_selection(annotation).entries
    return tuple(dict.fromkeys(entry.class_name for entry in entries))


def licence_volume_secret(spec: Mapping[str, Any]) -> str | None:
    """The copy the licence volume mounts: volume `gpulicense` whose secretName is a licence copy."""
    for volume in _list(spec.get("volumes")):
        volume = _dict(volume)
        if volume.get("name") != names.LICENSE_VOLUME:
            continue
        secret_name = _dict(volume.get("secret")).get("secretName")
        if isinstance(secret_name, str) and secret_name.startswith(names.LICENSE_COPY_PREFIX):
            return secret_name
    return None


def compact_vmi_use(obj: Mapping[str, Any]) -> VMIUse | None:
    """The record of a raw VMI; None when it has no name or namespace."""
    meta = _dict(obj.get("metadata"))
    name, namespace = meta.get("name"), meta.get("namespace")
    if not isinstance(name, str) or not isinstance(namespace, str):
        return None
    spec = _dict(obj.get("spec"))
    gpus = _list(_dict(_dict(spec.get("domain")).get("devices")).get("gpus"))
    devices = frozenset(
        g["deviceName"]
        for g in gpus
        if isinstance(g, dict) and isinstance(g.get("deviceName"), str)
    )
    return VMIUse(
        namespace=namespace,
        name=name,
        classes=selected_classes(_dict(meta.get("annotations")).get(names.SELECTION_ANNOTATION)),
        device_names=devices,
        licence_secret=licence_volume_secret(spec),
    )
