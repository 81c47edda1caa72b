"""A plain manifest wrapped as the AdmissionReview the API server would send for it:
`gpuclass review --manifest` (docs/contract.md 7.2). CLI-only, so it lives beside the command,
not in the core's envelope; the review it builds goes through the same
:func:`shared.core.admission.review.review` as a posted one. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from gpuclass.shared.core.admission.envelope import (
    API_VERSIONS,
    GPUCLASS,
    POD,
    VM,
    VMI,
    GroupKind,
    MalformedReview,
    Operation,
)
from gpuclass.shared.core.base.raw import metadata

RESOURCES: Final = {
    VMI: "virtualmachineinstances",
    VM: "virtualmachines",
    POD: "pods",
    GPUCLASS: "gpuclasses",
}
CLUSTER_SCOPED: Final = frozenset({GPUCLASS})


def wrap_manifest(
    obj: object,
    *,
    operation: Operation = "CREATE",
    namespace: str = "",
    old: object = None,
    username: str = "",
    uid: str = "00000000-0000-4000-8000-000000000000",
) -> dict[str, Any]:
    """The AdmissionReview (v1) the API server would send for `operation` on `obj`.

    The namespace is `namespace`, else the manifest's own, else `default` (as kubectl
    applies it); the object carries it, as a stored object does. On DELETE the manifest is
    the old object. A kind gpuclass does not admit is a MalformedReview.
    """
    subject = old if operation == "DELETE" and old is not None else obj
    if not isinstance(subject, dict):
        raise MalformedReview("the manifest must be one Kubernetes object (a mapping)")
    kind = _group_kind_of(subject)
    if kind not in RESOURCES:
        raise MalformedReview(
            f"{kind} is not a kind gpuclass admits "
            "(GPUClass, VirtualMachine, VirtualMachineInstance or Pod)"
        )
    if operation == "UPDATE" and not isinstance(old, dict):
        raise MalformedReview("an UPDATE needs the old object as well")
    meta = metadata(subject)
    if kind in CLUSTER_SCOPED:
        namespace = ""
    else:
        namespace = namespace or str(meta.get("namespace") or "") or "default"
    group, _, version = str(subject.get("apiVersion", "")).rpartition("/")
    request: dict[str, Any] = {
        "uid": uid,
        "kind": {"group": group, "version": version, "kind": kind.kind},
        "resource": {"group": group, "version": version, "resource": RESOURCES[kind]},
        "operation": operation,
        "userInfo": {"username": username, "groups": ["system:authenticated"]},
        "object": None if operation == "DELETE" else _in_namespace(obj, namespace),
        "oldObject": _in_namespace(old, namespace) if isinstance(old, dict) else None,
        "dryRun": False,
    }
    if isinstance(meta.get("name"), str):
        request["name"] = meta["name"]
    if namespace:
        request["namespace"] = namespace
    return {"apiVersion": API_VERSIONS[0], "kind": "AdmissionReview", "request": request}


def _group_kind_of(obj: Mapping[str, Any]) -> GroupKind:
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        raise MalformedReview("the manifest needs apiVersion and kind")
    group = api_version.rpartition("/")[0]
    return GroupKind(group, kind)


def _in_namespace(obj: object, namespace: str) -> object:
    if not isinstance(obj, dict) or not namespace:
        return obj
    return {**obj, "metadata": {**metadata(obj), "namespace": namespace}}
