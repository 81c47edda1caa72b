"""GPUClass validation (docs/contract.md section 5): every cause at once, each with its path.

Two layers run on every object and their causes are merged: the strict pydantic
model (shape, types, enums, unknown fields) and the format and cross-field rules
below (names, quantities, tolerations, mode/profile/license, immutability). The
result is a list of causes and a list of warnings; the caller turns them into a
decision (webhook) or lines of output (`gpuclass validate`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from gpuclass.shared.core.base import k8s
from gpuclass.shared.core.base.causes import Cause, CauseCode, clip_warning, invalid, json_kind
from gpuclass.shared.core.base.fieldpath import FieldPath
from gpuclass.shared.core.base.raw import str_at
from gpuclass.shared.core.model.models import IDENTITY_FIELDS, GPUClassSpec

_TYPE_MESSAGES = {
    "missing": "required",
    "extra_forbidden": "unknown field; remove it (check the spelling against the GPUClass reference)",
    "string_type": "must be a string",
    "int_type": "must be an integer",
    "model_type": "must be an object",
    "model_attributes_type": "must be an object",
    "dict_type": "must be an object",
    "list_type": "must be a list",
    "string_too_short": "must not be empty",
}


_KIND_ERRORS = frozenset(
    {"string_type", "int_type", "model_type", "model_attributes_type", "dict_type", "list_type"}
)
"""Errors about the kind of a JSON value: their message names the kind received."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """Causes and warnings; `model` is the parsed spec when the class is valid (else None)."""

    causes: tuple[Cause, ...]
    warnings: tuple[str, ...]
    model: GPUClassSpec | None = None


def field_path(prefix: str, loc: Iterable[int | str]) -> FieldPath:
    """The path of a pydantic error location below `prefix`: list indexes, then fields."""
    path = FieldPath.of(prefix) if prefix else FieldPath()
    for part in loc:
        path = path.index(part) if isinstance(part, int) else path.child(str(part))
    return path


def _model_causes(spec: Mapping[str, Any]) -> tuple[GPUClassSpec | None, list[Cause]]:
    try:
        return GPUClassSpec.model_validate(spec), []
    except ValidationError as exc:
        causes = []
        for error in exc.errors():
            message = _TYPE_MESSAGES.get(error["type"]) or error["msg"].replace(
                "Input should be", "must be"
            )
            if error["type"] in _KIND_ERRORS:
                message += f" (got {json_kind(error['input'])})"
            causes.append(
                invalid(
                    field_path("spec", error["loc"]), message, code=CauseCode.FIELD_VALUE_INVALID
                )
            )
        return None, causes


def _toleration_causes(tolerations: object) -> tuple[list[Cause], list[str]]:
    causes: list[Cause] = []
    warnings: list[str] = []
    if not isinstance(tolerations, list):
        return causes, warnings
    for i, tol in enumerate(tolerations):
        if not isinstance(tol, dict):
            continue
        path = FieldPath.of("spec", "tolerations").index(i)
        key, value = str_at(tol.get("key")) or "", str_at(tol.get("value")) or ""
        operator = tol.get("operator") or "Equal"
        if key:
            error = k8s.qualified_name_error(key)
            if error:
                causes.append(invalid(path.child("key"), error))
        elif operator != "Exists":
            causes.append(invalid(path.child("key"), "may be empty only with operator Exists"))
        else:
            warnings.append(
                f"{path}: a key-less Exists tolerates every taint, control-plane ones too"
            )
        if operator == "Exists" and value:
            causes.append(invalid(path.child("value"), "must be empty when operator is Exists"))
        elif value:
            error = k8s.label_value_error(value)
            if error:
                causes.append(invalid(path.child("value"), error))
        if tol.get("tolerationSeconds") is not None and tol.get("effect") != "NoExecute":
            causes.append(
                invalid(path.child("tolerationSeconds"), "applies only with effect NoExecute")
            )
    return causes, warnings


def _format_causes(spec: Mapping[str, Any]) -> list[Cause]:
    causes: list[Cause] = []
    mode = spec.get("mode")
    if mode == "vgpu" and not spec.get("profile"):
        causes.append(
            invalid(
                FieldPath.of("spec", "profile"),
                "required for mode vgpu: name the vGPU profile the host offers",
            )
        )
    if mode == "passthrough":
        for name in ("profile", "license"):
            if name in spec:
                causes.append(
                    invalid(
                        FieldPath.of("spec", name),
                        "not permitted for mode passthrough: remove it, or use mode vgpu",
                    )
                )
    source = spec.get("source")
    device_plugin = source.get("devicePlugin") if isinstance(source, dict) else None
    resource = (
        str_at(device_plugin.get("resourceName")) if isinstance(device_plugin, dict) else None
    )
    if resource is not None:
        error = k8s.extended_resource_error(resource)
        if error:
            causes.append(
                invalid(FieldPath.of("spec", "source", "devicePlugin", "resourceName"), error)
            )
    license_ = spec.get("license")
    secret = str_at(license_.get("secretName")) if isinstance(license_, dict) else None
    if secret is not None:
        error = k8s.dns_subdomain_error(secret)
        if error:
            causes.append(invalid(FieldPath.of("spec", "license", "secretName"), error))
    memory = str_at(spec.get("memory"))
    if memory is not None:
        try:
            if k8s.parse_quantity(memory) <= 0:
                causes.append(
                    invalid(
                        FieldPath.of("spec", "memory"),
                        f"must be a positive quantity such as 16Gi (got {memory!r})",
                    )
                )
        except ValueError as exc:
            causes.append(invalid(FieldPath.of("spec", "memory"), str(exc)))
    return causes


def _immutability_causes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Cause]:
    causes = []
    for name in IDENTITY_FIELDS:
        if old.get(name) != new.get(name) or (name in old) != (name in new):
            causes.append(
                invalid(
                    FieldPath.of("spec", name),
                    f"is immutable (was {_shown(old, name)}, now {_shown(new, name)}): create a new class for a different offer",
                    code=CauseCode.FIELD_VALUE_FORBIDDEN,
                )
            )
    if ("license" in old) != ("license" in new):
        causes.append(
            invalid(
                FieldPath.of("spec", "license"),
                "adding or removing license changes the licensing mode, which is immutable: create a new class",
                code=CauseCode.FIELD_VALUE_FORBIDDEN,
            )
        )
    return causes


def _shown(spec: Mapping[str, Any], name: str) -> str:
    return repr(spec[name]) if name in spec else "unset"


def _update_warnings(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    warnings = []
    if _resource(old) != _resource(new):
        warnings.append(
            "resourceName changed: check the device plugin and KubeVirt config; running VMs keep their GPU"
        )
    old_lic, new_lic = old.get("license"), new.get("license")
    if isinstance(old_lic, dict) and isinstance(new_lic, dict):
        if old_lic.get("secretName") != new_lic.get("secretName"):
            warnings.append(
                "license.secretName changed: running VMIs get the new licence only when restarted"
            )
        if old_lic.get("featureType", 1) != new_lic.get("featureType", 1):
            warnings.append("license.featureType changed: running VMIs get it only when restarted")
    return warnings


def _resource(spec: Mapping[str, Any]) -> object:
    source = spec.get("source")
    device_plugin = source.get("devicePlugin") if isinstance(source, dict) else None
    return device_plugin.get("resourceName") if isinstance(device_plugin, dict) else None


def validate_class(
    obj: object,
    *,
    old: object = None,
    others: Mapping[str, str] | None = None,
    manifest: bool = False,
) -> Verdict:
    """Validate a GPUClass object (and, given `old`, the update from it).

    The one verdict on a class: the webhook calls it on CREATE/UPDATE, `gpuclass
    validate` on manifests, and :func:`shared.core.model.snapshot.compact_class` on every
    stored class, so a class the webhook would refuse is, once stored anyway
    (offline files, a bypassed webhook), not selectable and reports zero units.

    `others` maps the other classes' names to their resource names, for the
    shared-resource warning. `manifest=True` (GitOps lint) also refuses a status stanza.
    An update that leaves the spec and name as stored is allowed as is (ratcheting):
    finalizers and labels can always be added and removed, even on an invalid class.
    """
    if not isinstance(obj, dict):
        return Verdict(
            (invalid(FieldPath(), f"a GPUClass must be a JSON object (got {json_kind(obj)})"),), ()
        )
    if _metadata_only_update(obj, old):
        return Verdict((), ())
    causes: list[Cause] = []
    warnings: list[str] = []
    metadata = obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if not isinstance(name, str) or not name:
        causes.append(
            invalid(
                FieldPath.of("metadata", "name"),
                "required: the tenant-facing class name, a DNS label",
            )
        )
    else:
        error = k8s.dns_label_error(name)
        if error:
            causes.append(invalid(FieldPath.of("metadata", "name"), error))
    if manifest and "status" in obj:
        causes.append(
            invalid(
                FieldPath.of("status"),
                "do not put status in catalog manifests: the controller reports it",
            )
        )
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        got = "" if spec is None else f" (got {json_kind(spec)})"
        causes.append(
            invalid(
                FieldPath.of("spec"),
                f"required: an object with vendor, model, mode and source{got}",
            )
        )
        return Verdict(tuple(causes), ())
    model, model_causes = _model_causes(spec)
    causes += model_causes
    causes += _format_causes(spec)
    tol_causes, tol_warnings = _toleration_causes(spec.get("tolerations"))
    causes += tol_causes
    warnings += tol_warnings
    old_spec = old.get("spec") if isinstance(old, dict) else None
    if isinstance(old_spec, dict):
        causes += _immutability_causes(old_spec, spec)
        warnings += _update_warnings(old_spec, spec)
    resource = _resource(spec)
    for other, other_resource in sorted((others or {}).items()):
        if other != name and other_resource == resource:
            warnings.append(f"class {other} already uses {resource}: the offers share one pool")
    return Verdict(
        _dedupe(causes),
        tuple(clip_warning(w) for w in warnings),
        model if not causes else None,
    )


def _metadata_only_update(obj: Mapping[str, Any], old: object) -> bool:
    if not isinstance(old, dict) or "spec" not in old:
        return False
    return old.get("spec") == obj.get("spec") and _name(old) == _name(obj)


def _name(obj: Mapping[str, Any]) -> object:
    metadata = obj.get("metadata")
    return metadata.get("name") if isinstance(metadata, dict) else None


def _dedupe(causes: list[Cause]) -> tuple[Cause, ...]:
    """One cause per path and message; the pydantic layer and ours can agree."""
    return tuple(dict.fromkeys(causes))
