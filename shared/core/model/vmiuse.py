"""What the reconciler needs to know about one VMI: which classes it uses and which license it mounts.

Admission reads the raw VMI itself (any Secret reference to a license copy counts,
see :mod:`shared.core.admission.secretrefs`). The reconciler and offline snapshots
ask two narrower questions, and this record answers them from the raw object
once, at event time:

- which classes the VMI *uses* (docs/contract.md section 6, in-use finalizer): the
  classes its selection annotation names — parsed, so a VMI is not re-parsed on
  every reconcile — and the device names of its GPU entries;
- which license copy it mounts *through the license volume* of section 1 (volume
  `gpulicense`, `secret.secretName: gpuclass-license-<class>`): only that volume
  triggers a copy; annotations alone never do.

Pure: a dict in, a small frozen record out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from gpuclass.shared.core.base import names
from gpuclass.shared.core.base.raw import dict_at, list_at
from gpuclass.shared.core.model.selection import parse_selection


@dataclass(frozen=True, slots=True)
class VMIUse:
    """One VMI reduced to what holds a class and a license copy, and the units it takes; built once
    per event by :func:`compact_vmi_use`, so the reconciler never keeps the raw VMI."""

    namespace: str
    name: str
    classes: tuple[str, ...]
    """Classes named by valid entries of the selection annotation, first appearance first."""
    device_names: frozenset[str]
    """deviceName of every `spec.domain.devices.gpus` entry."""
    license_secret: str | None
    """secretName of the `gpulicense` volume when it names a license copy, else None."""
    admitted: frozenset[str] = frozenset()
    """Classes this VMI passed admission with (:func:`admitted_classes`): what holds a class."""
    units: tuple[tuple[str, int], ...] = ()
    """(class, units) for each admitted class: what the VMI takes (usage metrics)."""
    phase: str = ""
    """`status.phase` as KubeVirt reports it ("" before it sets one)."""

    def same_use(self, other: VMIUse | None) -> bool:
        """Equal but for the phase: a phase change moves usage metrics, nothing else."""
        return (
            other is not None
            and self.phase != other.phase
            and self == replace(other, phase=self.phase)
        )


def selected_classes(annotation: object) -> tuple[str, ...]:
    """Class names of the selection's valid entries (a malformed entry names nothing)."""
    if not isinstance(annotation, str):
        return ()
    # Uncapped: a VMI stored before admission capped the selection still holds its classes.
    entries = parse_selection(annotation, capped=False).entries
    return tuple(dict.fromkeys(entry.class_name for entry in entries))


def admitted_units(
    annotation: object, gpus: list[Any], *, namespace: str
) -> tuple[tuple[str, int], ...]:
    """(class, units) of each class a VMI passed admission with, read from what only admission
    can produce (:func:`admitted_classes` takes the names).

    The webhook sees every VMI CREATE outside `kube-system`; for a class selection it
    accepts `spec.domain.devices.gpus` only empty or exactly as resolution writes it
    (docs/contract.md section 4, rules 2 and 6): entries `gpu1` … `gpuN`, grouped by class in
    order of first appearance, `count` each, every entry of a class with that class's
    resourceName at the time. The annotation cannot change on UPDATE and KubeVirt keeps
    a VMI's devices. So a valid annotation together with GPU entries of exactly that
    shape is an admission record a tenant cannot forge — and it does not depend on the
    class's *current* resourceName, so renaming a class releases no VM (the
    documentation: a rename does not move an existing VM). Any other shape (names
    not `gpuN`, another count, mixed device names within one class) records nothing.
    """
    if not isinstance(annotation, str) or namespace == names.WEBHOOK_EXCLUDED_NAMESPACE:
        return ()
    selection = parse_selection(annotation, capped=False)  # as in selected_classes
    if selection.causes or not selection.entries:
        return ()
    counts: dict[str, int] = {}
    for entry in selection.entries:
        counts[entry.class_name] = counts.get(entry.class_name, 0) + entry.units
    if len(gpus) != sum(counts.values()):
        return ()
    position = 0
    for count in counts.values():
        block = gpus[position : position + count]
        devices = [dict_at(g).get("deviceName") for g in block]
        named = all(dict_at(g).get("name") == f"gpu{position + i + 1}" for i, g in enumerate(block))
        position += count
        same = all(isinstance(d, str) and d for d in devices) and len(set(devices)) == 1
        if not named or not same:  # (a name of the wrong type is not hashed)
            return ()  # not admission's output: the whole record is void
    return tuple(counts.items())


def admitted_classes(annotation: object, gpus: list[Any], *, namespace: str) -> frozenset[str]:
    """The classes a VMI passed admission with (:func:`admitted_units`)."""
    return frozenset(name for name, _ in admitted_units(annotation, gpus, namespace=namespace))


def license_volume_secret(spec: Mapping[str, Any]) -> str | None:
    """The copy the license volume mounts: volume `gpulicense` whose secretName is a license copy."""
    for volume in list_at(spec.get("volumes")):
        volume = dict_at(volume)
        if volume.get("name") != names.LICENSE_VOLUME:
            continue
        secret_name = dict_at(volume.get("secret")).get("secretName")
        if isinstance(secret_name, str) and secret_name.startswith(names.LICENSE_COPY_PREFIX):
            return secret_name
    return None


def compact_vmi_use(obj: Mapping[str, Any]) -> VMIUse | None:
    """The record of a raw VMI; None when it has no name or namespace."""
    meta = dict_at(obj.get("metadata"))
    name, namespace = meta.get("name"), meta.get("namespace")
    if not isinstance(name, str) or not isinstance(namespace, str):
        return None
    spec = dict_at(obj.get("spec"))
    gpus = list_at(dict_at(dict_at(spec.get("domain")).get("devices")).get("gpus"))
    devices = frozenset(
        g["deviceName"]
        for g in gpus
        if isinstance(g, dict) and isinstance(g.get("deviceName"), str)
    )
    annotation = dict_at(meta.get("annotations")).get(names.SELECTION_ANNOTATION)
    units = admitted_units(annotation, gpus, namespace=namespace)
    phase = dict_at(obj.get("status")).get("phase")
    return VMIUse(
        namespace=namespace,
        name=name,
        classes=selected_classes(annotation),
        device_names=devices,
        license_secret=license_volume_secret(spec),
        admitted=frozenset(c for c, _ in units),
        units=units,
        phase=phase if isinstance(phase, str) else "",
    )
