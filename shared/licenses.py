"""Licence copies (docs/contract.md sections 1 and 6): which copies should exist, and what to do about them.

A copy `gpuclass-license-<class>` is wanted in a namespace when a VMI there mounts
it through the licence volume *and* the namespace is entitled to vGPU now (the
entitlement is re-checked here: a selection annotation alone never triggers a
copy). Its content is the source Secret's token plus `gridd.conf`.

Three outcomes per referenced copy:
- *desired*: the class is licensed and its source Secret is usable; create or update;
- *held*: referenced, but the content cannot be produced now (class gone or not
  licensed, source Secret missing or empty); an existing copy is left exactly as it
  is — deleting it would break a running VM's next boot, writing it would guess;
- not referenced by any entitled VMI: an existing managed copy is deleted.

Only Secrets carrying the managed-by label are ever updated or deleted; a Secret of
that name without the label is *foreign*: reported, never touched. Values stay
:class:`Redacted` until :func:`secret_body` renders the request body.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from gpuclass.shared import names
from gpuclass.shared.entitlement import entitlement_problem
from gpuclass.shared.snapshot import ClassRecord, Redacted, SecretRecord
from gpuclass.shared.vmiuse import VMIUse

SecretKey = tuple[str, str]
"""(namespace, name)."""

MANAGED_LABELS: Mapping[str, str] = {names.MANAGED_BY_LABEL: names.MANAGED_BY_VALUE}


@dataclass(frozen=True, slots=True)
class DesiredCopy:
    namespace: str
    name: str
    class_name: str
    data: Mapping[str, Redacted]
    """Secret `data` as the API stores it: base64 strings, wrapped so they never print."""


@dataclass(frozen=True, slots=True)
class CopyPlan:
    desired: Mapping[SecretKey, DesiredCopy]
    held: frozenset[SecretKey]


@dataclass(frozen=True, slots=True)
class CopyAction:
    action: Literal["create", "update", "delete", "foreign"]
    namespace: str
    name: str
    copy: DesiredCopy | None = None

    @property
    def key(self) -> SecretKey:
        return (self.namespace, self.name)

    @property
    def class_name(self) -> str:
        return self.name.removeprefix(names.LICENSE_COPY_PREFIX)


def gridd_conf(feature_type: int) -> str:
    return f"FeatureType={feature_type}\n"


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def is_managed(secret: SecretRecord) -> bool:
    return secret.labels.get(names.MANAGED_BY_LABEL) == names.MANAGED_BY_VALUE


def is_copy_name(name: str) -> bool:
    return name.startswith(names.LICENSE_COPY_PREFIX) and len(name) > len(names.LICENSE_COPY_PREFIX)


def copy_content(
    record: ClassRecord | None, secrets: Mapping[SecretKey, SecretRecord], license_namespace: str
) -> dict[str, Redacted] | None:
    """The copy's `data` for a class, or None when it cannot be produced now."""
    if record is None or record.spec is None or record.spec.license is None:
        return None
    license = record.spec.license
    source = secrets.get((license_namespace, license.secret_name))
    token = source.data.get(names.TOKEN_KEY) if source else None
    if token is None or not token.reveal():
        return None
    return {
        names.TOKEN_KEY: token,
        names.GRIDD_KEY: Redacted(_b64(gridd_conf(license.feature_type))),
    }


def desired_copies(
    vmis: Iterable[VMIUse],
    classes: Mapping[str, ClassRecord],
    *,
    secrets: Mapping[SecretKey, SecretRecord],
    namespaces: Mapping[str, Mapping[str, str]],
    license_namespace: str,
    vgpu_entitled: bool,
) -> CopyPlan:
    """Every copy an entitled VMI mounts, with its content, or held when none can be made."""
    desired: dict[SecretKey, DesiredCopy] = {}
    held: set[SecretKey] = set()
    entitled: dict[str, bool] = {}
    for vmi in vmis:
        name = vmi.license_secret
        if name is None or not is_copy_name(name):
            continue
        key = (vmi.namespace, name)
        if key in desired or key in held:
            continue
        if vmi.namespace not in entitled:
            problem = entitlement_problem(vmi.namespace, namespaces, vgpu_entitled=vgpu_entitled)
            entitled[vmi.namespace] = problem is None
        if not entitled[vmi.namespace]:
            continue
        class_name = name.removeprefix(names.LICENSE_COPY_PREFIX)
        data = copy_content(classes.get(class_name), secrets, license_namespace)
        if data is None:
            held.add(key)
        else:
            desired[key] = DesiredCopy(vmi.namespace, name, class_name, data)
    return CopyPlan(desired, frozenset(held))


def plan_copies(plan: CopyPlan, existing: Mapping[SecretKey, SecretRecord]) -> list[CopyAction]:
    """Writes that bring the visible copies to the plan, sorted by namespace and name.

    `existing` holds the Secrets we can see; in a cluster that is only labelled ones,
    so a foreign Secret shows up as a refused create instead (the caller reports it).
    """
    actions: list[CopyAction] = []
    for key, copy in desired_items(plan):
        secret = existing.get(key)
        if secret is None:
            actions.append(CopyAction("create", *key, copy=copy))
        elif not is_managed(secret):
            actions.append(CopyAction("foreign", *key, copy=copy))
        elif dict(secret.data) != dict(copy.data):
            actions.append(CopyAction("update", *key, copy=copy))
    for key, secret in sorted(existing.items()):
        if (
            is_managed(secret)
            and is_copy_name(key[1])
            and key not in plan.desired
            and key not in plan.held
        ):
            actions.append(CopyAction("delete", *key))
    return sorted(actions, key=lambda a: a.key)


def desired_items(plan: CopyPlan) -> list[tuple[SecretKey, DesiredCopy]]:
    return sorted(plan.desired.items())


def secret_body(copy: DesiredCopy, *, resource_version: str | None = None) -> dict[str, Any]:
    """The Secret to create or replace. The only place a token is revealed: into the request."""
    metadata: dict[str, Any] = {
        "name": copy.name,
        "namespace": copy.namespace,
        "labels": dict(MANAGED_LABELS),
    }
    if resource_version:
        metadata["resourceVersion"] = resource_version
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata,
        "type": "Opaque",
        "data": {key: value.reveal() for key, value in sorted(copy.data.items())},
    }
