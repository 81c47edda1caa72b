"""VirtualMachineInstance admission (docs/contract.md section 4): a selection becomes GPU entries.

On CREATE every rule of :mod:`shared.resolution` is judged and every cause reported
at once, the code 422 if any is invalid input; otherwise the answer carries the
patch of rule 6 and the capacity warnings of rule 7. On UPDATE only the selection's
immutability and the licence hand-mount rule (rule 8) apply; DELETE and CONNECT pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuclass.shared.admission import Allowed, Decision, Denied, invalid
from gpuclass.shared.catalog import Catalog
from gpuclass.shared.envelope import AdmissionRequest
from gpuclass.shared.resolution import (
    Plan,
    annotation,
    capacity_warnings,
    class_causes,
    gpu_operations,
    license_reference_causes,
    limit_causes,
    own_license_volume_refs,
    policy_causes,
    raw_request_causes,
    selected_licensed_classes,
)
from gpuclass.shared.secretrefs import secret_refs
from gpuclass.shared.selection import ANNOTATION_PATH, parse_selection


def admit(request: AdmissionRequest, catalog: Catalog) -> Decision:
    obj = request.object
    if obj is None:
        if request.operation in ("CREATE", "UPDATE"):
            return Denied(
                (invalid("object", "the request carries no VirtualMachineInstance object"),)
            )
        return Allowed()
    if request.operation == "CREATE":
        return admit_create(obj, request.namespace, catalog)
    if request.operation == "UPDATE":
        return admit_update(obj, request.old_object or {}, catalog)
    return Allowed()


def admit_create(obj: Mapping[str, Any], namespace: str, catalog: Catalog) -> Decision:
    """Every input cause and every policy cause at once; 422 if any is input (section 3)."""
    selection = parse_selection(annotation(obj))
    causes = list(selection.causes)
    with_classes = bool(selection.entries) or any(
        c.field.endswith(".count") or c.field.endswith(".className") for c in causes
    )
    causes += raw_request_causes(obj, catalog, with_classes=with_classes, namespace=namespace)
    licensed = selected_licensed_classes(selection.entries, catalog)
    license_causes = license_reference_causes(obj, own_license_volume_refs(obj, licensed))
    if not selection.entries:
        causes += license_causes
        return Denied(tuple(causes)) if causes else Allowed()
    offers, unresolved = class_causes(selection.entries, catalog)
    totals, over_limit = limit_causes(selection.entries, offers)
    causes += unresolved + over_limit
    causes += policy_causes(obj, namespace, selection.entries, offers, catalog)
    causes += license_causes
    plan = Plan(totals, offers)
    operations, op_causes = gpu_operations(
        obj, plan, licensed=licensed[0] if licensed else None, complete=not unresolved
    )
    causes += op_causes
    if causes:
        return Denied(tuple(causes))
    return Allowed(tuple(operations), tuple(capacity_warnings(plan)))


def admit_update(obj: Mapping[str, Any], old: Mapping[str, Any], catalog: Catalog) -> Decision:
    before, after = annotation(old), annotation(obj)
    if before != after:
        verb = "added" if before is None else "removed" if after is None else "changed"
        return Denied(
            (
                invalid(
                    ANNOTATION_PATH,
                    f"cannot be {verb} on a running VMI: recreate the VM to change its GPUs",
                    "SelectionImmutable",
                ),
            )
        )
    # The VMI's own licence volume (its class may be deleting by now) and every reference the
    # stored object already had stay, so KubeVirt's own updates and finalizer removal keep working.
    licensed = selected_licensed_classes(parse_selection(after).entries, catalog)
    permitted = own_license_volume_refs(obj, licensed)
    permitted |= {(ref.path, ref.name) for ref in secret_refs(old.get("spec"))}
    causes = license_reference_causes(obj, permitted)
    return Denied(tuple(causes)) if causes else Allowed()
