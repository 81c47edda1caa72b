"""License copies (docs/contract.md sections 1 and 6): which copies should exist, and what to do about them.

A copy `gpuclass-license-<class>` is wanted in a namespace when a VMI there mounts
it through the license volume, its virt-launcher Pod is bound to a node and mounts
the copy too (the VMI is really starting: :func:`launcher_license`), *and* the
namespace is entitled to vGPU now (the entitlement is re-checked here: a selection
annotation alone never triggers a copy). Its content is the source Secret's token
plus `gridd.conf`.

Three outcomes per referenced copy:
- *desired*: the class is licensed and its source Secret is usable; create or update;
- *held*: referenced, but the content cannot be produced now (class gone or not
  licensed, source Secret missing or empty); an existing copy is left exactly as it
  is: deleting it would break a running VM's next boot, writing it would guess;
- not referenced by any started, entitled VMI: a recorded copy is deleted.

The reconciler never reads tenant Secrets. What copies exist is known from its own
*record* (:func:`parse_record`, a ConfigMap in its namespace): every copy it may have
written, with a digest of the content it last wrote. An entry is added (pending,
digest "") before the first write and dropped only after the copy is deleted, so a
crash at any point loses no copy: at worst a pending one is written again.
Values stay :class:`Redacted` until :func:`secret_body` renders the request body.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from gpuclass.shared.core.base import names
from gpuclass.shared.core.base.meta import Key
from gpuclass.shared.core.base.raw import dict_at, list_at
from gpuclass.shared.core.model.secrets import Redacted, SecretRecord
from gpuclass.shared.core.model.snapshot import ClassRecord
from gpuclass.shared.core.model.vmiuse import VMIUse
from gpuclass.shared.core.status.entitlement import entitlement_problem

Started = tuple[str, str, str]
"""(namespace, VMI name, copy name) of a bound virt-launcher Pod that mounts a license copy."""

MANAGED_LABELS: Mapping[str, str] = {names.MANAGED_BY_LABEL: names.MANAGED_BY_VALUE}
PENDING = ""
"""Record digest of a copy whose first write has not been confirmed yet."""
MAX_RECORD_BYTES = 900 * 1024
"""Below the 1 MiB a ConfigMap may hold: about 9,000 copies (docs/decisions.md, "License copies")."""


@dataclass(frozen=True, slots=True)
class DesiredCopy:
    """A license copy that should exist now: where, for which class, and its full `data` (token and
    gridd.conf), wrapped so it never prints."""

    namespace: str
    name: str
    class_name: str
    data: Mapping[str, Redacted]
    """Secret `data` as the API stores it: base64 strings, wrapped so they never print."""

    @property
    def digest(self) -> str:
        """The fingerprint the record keeps for this content: a changed digest means the copy must
        be written again."""
        return copy_digest(self.data)


@dataclass(frozen=True, slots=True)
class CopyPlan:
    """What the store wants: `desired` copies with their content, and `held` copies that are wanted
    but cannot be made now (class invalid or gone, source Secret missing or empty), which are
    left as they are rather than deleted."""

    desired: Mapping[Key, DesiredCopy]
    held: frozenset[Key]


@dataclass(frozen=True, slots=True)
class CopyAction:
    """One write: `create` (not recorded), `update` (recorded with another digest or pending),
    `verify` (recorded as is; written again so a copy removed or changed by hand comes back),
    `delete` (recorded, no longer wanted)."""

    action: Literal["create", "update", "verify", "delete"]
    namespace: str
    name: str
    copy: DesiredCopy | None = None

    @property
    def key(self) -> Key:
        """(namespace, name) of the copy, the record's key and the backoff's."""
        return (self.namespace, self.name)

    @property
    def class_name(self) -> str:
        """The class the copy is named after (`gpuclass-license-<class>`), for Events and metrics."""
        return self.name.removeprefix(names.LICENSE_COPY_PREFIX)


def gridd_conf(feature_type: int) -> str:
    """The copy's gridd.conf: the one line `FeatureType=<featureType>` (contract table, license
    copy)."""
    return f"FeatureType={feature_type}\n"


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def is_copy_name(name: str) -> bool:
    """A name of our copies: `gpuclass-license-` and something after it; no other Secret is ever
    planned, written or deleted."""
    return name.startswith(names.LICENSE_COPY_PREFIX) and len(name) > len(names.LICENSE_COPY_PREFIX)


def copy_digest(data: Mapping[str, Redacted]) -> str:
    """A fingerprint of a copy's content for the record: says whether to write, reveals nothing."""
    digest = hashlib.sha256()
    for key in sorted(data):
        digest.update(key.encode() + b"\0" + data[key].reveal().encode() + b"\0")
    return digest.hexdigest()[:32]


def launcher_license(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """(VMI name, copy name) when `pod` is a bound, unfinished virt-launcher Pod of a VMI that
    mounts a license copy.

    KubeVirt's controller renders each VMI Secret volume as a Pod volume of the same
    Secret and makes the VMI the Pod's controlling owner (docs/decisions.md, "License
    copies"). Only KubeVirt's controller may create a Pod that mounts a
    `gpuclass-license-*` Secret (the chart's policy), so such a Pod, once bound, says
    the VMI is really starting. Anything else answers None.
    """
    meta, spec = dict_at(pod.get("metadata")), dict_at(pod.get("spec"))
    node, phase = spec.get("nodeName"), dict_at(pod.get("status")).get("phase")
    if not isinstance(node, str) or not node or phase in ("Succeeded", "Failed"):
        return None
    owner = next(
        (
            ref
            for ref in list_at(meta.get("ownerReferences"))
            if isinstance(ref, dict)
            and ref.get("controller") is True
            and ref.get("kind") == "VirtualMachineInstance"
            and str(ref.get("apiVersion", "")).startswith("kubevirt.io/")
            and isinstance(ref.get("name"), str)
        ),
        None,
    )
    if owner is None:
        return None
    for volume in list_at(spec.get("volumes")):
        secret_name = dict_at(dict_at(volume).get("secret")).get("secretName")
        if isinstance(secret_name, str) and is_copy_name(secret_name):
            return (owner["name"], secret_name)
    return None


launcher_licence = launcher_license
"""Deprecated name of :func:`launcher_license`, for one release (CHANGELOG, Unreleased)."""


def copy_content(
    record: ClassRecord | None, secrets: Mapping[Key, SecretRecord], *, license_namespace: str
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
    secrets: Mapping[Key, SecretRecord],
    namespaces: Mapping[str, Mapping[str, str]],
    license_namespace: str,
    vgpu_entitled: bool,
    started: Collection[Started],
) -> CopyPlan:
    """Every copy a started, entitled VMI mounts, with its content, or held when none can be made.

    `started` holds what bound launcher Pods mount (:func:`launcher_license`): a VMI that
    never gets a node (pinned to a node that does not exist, or waiting for capacity)
    gets no copy, so no token reaches a namespace without a licensed guest starting there.
    """
    desired: dict[Key, DesiredCopy] = {}
    held: set[Key] = set()
    entitled: dict[str, bool] = {}
    for vmi in vmis:
        name = vmi.license_secret
        if name is None or not is_copy_name(name):
            continue
        key = (vmi.namespace, name)
        if key in desired or key in held or (vmi.namespace, vmi.name, name) not in started:
            continue
        if vmi.namespace not in entitled:
            problem = entitlement_problem(vmi.namespace, namespaces, vgpu_entitled=vgpu_entitled)
            entitled[vmi.namespace] = problem is None
        if not entitled[vmi.namespace]:
            continue
        class_name = name.removeprefix(names.LICENSE_COPY_PREFIX)
        data = copy_content(classes.get(class_name), secrets, license_namespace=license_namespace)
        if data is None:
            held.add(key)
        else:
            desired[key] = DesiredCopy(vmi.namespace, name, class_name, data)
    return CopyPlan(desired, frozenset(held))


def plan_copies(
    plan: CopyPlan, recorded: Mapping[Key, str], *, verify: bool = False
) -> list[CopyAction]:
    """Writes that bring the recorded copies to the plan, sorted by namespace and name.

    `recorded` is the record (:func:`parse_record`): key -> digest of the content last
    written, :data:`PENDING` when a write was started but not confirmed. With `verify`,
    copies recorded as they should be are written again too (the periodic resync: a
    copy its tenant deleted or changed is restored; an unchanged one costs the API
    server a no-op).
    """
    actions: list[CopyAction] = []
    for key, copy in sorted(plan.desired.items()):
        digest = recorded.get(key)
        if digest is None:
            actions.append(CopyAction("create", *key, copy=copy))
        elif digest != copy.digest:
            actions.append(CopyAction("update", *key, copy=copy))
        elif verify:
            actions.append(CopyAction("verify", *key, copy=copy))
    for key in sorted(recorded):
        if key not in plan.desired and key not in plan.held:
            actions.append(CopyAction("delete", *key))
    return sorted(actions, key=lambda a: a.key)


def parse_record(obj: Mapping[str, Any] | None) -> dict[Key, str]:
    """The record ConfigMap's entries; what cannot be read (edited by hand) is skipped.

    Format of `data["copies.json"]`: a JSON object `{"<namespace>/<name>": "<digest>"}`.
    """
    text = dict_at(dict_at(obj).get("data")).get(names.COPY_RECORD_KEY) if obj else None
    if not isinstance(text, str) or len(text) > 2 * MAX_RECORD_BYTES:
        return {}
    try:
        raw = orjson.loads(text)
    except orjson.JSONDecodeError:
        return {}
    entries: dict[Key, str] = {}
    for key, digest in dict_at(raw).items():
        namespace, _, name = str(key).partition("/")
        if namespace and is_copy_name(name) and isinstance(digest, str):
            entries[(namespace, name)] = digest
    return entries


def render_record(entries: Mapping[Key, str]) -> str:
    """`data["copies.json"]` for the entries, sorted, so equal records are equal strings."""
    return orjson.dumps(
        {f"{ns}/{name}": digest for (ns, name), digest in sorted(entries.items())}
    ).decode()


def record_body(
    entries: Mapping[Key, str], *, namespace: str, resource_version: str = ""
) -> dict[str, Any]:
    """The record ConfigMap to create (no version) or replace (pinned to `resource_version`)."""
    metadata: dict[str, Any] = {
        "name": names.COPY_RECORD_NAME,
        "namespace": namespace,
        "labels": dict(MANAGED_LABELS),
    }
    if resource_version:
        metadata["resourceVersion"] = resource_version
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata,
        "data": {names.COPY_RECORD_KEY: render_record(entries)},
    }


def copy_patch(copy: DesiredCopy) -> list[dict[str, Any]]:
    """The JSON patch (RFC 6902) that brings an existing copy to `copy`, only if it is ours.

    Its first operation tests our label, so the API server applies nothing to a Secret of
    that name that does not carry it, whatever identity sends the patch (the chart's policy
    refuses that too, for the chart's identity only). The rest sets the whole `data` and
    clears what another writer may have added that the copy may not carry (annotations,
    ownerReferences, finalizers), so a copy a tenant edited is repaired, not stuck.
    A token is revealed here, into the request body, as in :func:`secret_body`.
    """
    label = names.MANAGED_BY_LABEL.replace("~", "~0").replace("/", "~1")
    return [
        {"op": "test", "path": f"/metadata/labels/{label}", "value": names.MANAGED_BY_VALUE},
        {"op": "add", "path": "/data", "value": secret_body(copy)["data"]},
        {"op": "add", "path": "/metadata/annotations", "value": {}},
        {"op": "add", "path": "/metadata/ownerReferences", "value": []},
        {"op": "add", "path": "/metadata/finalizers", "value": []},
    ]


def secret_body(copy: DesiredCopy) -> dict[str, Any]:
    """The Secret to create. The only place a token is revealed, with :func:`copy_patch`: into the request."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": copy.name,
            "namespace": copy.namespace,
            "labels": dict(MANAGED_LABELS),
        },
        "type": "Opaque",
        "data": {key: value.reveal() for key, value in sorted(copy.data.items())},
    }
