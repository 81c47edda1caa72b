"""VirtualMachineInstance admission (docs/contract.md section 4): a selection becomes GPU entries.

On CREATE every rule of :mod:`shared.core.admission.resolution` is judged and every cause reported
at once, the code 422 if any is invalid input; otherwise the answer carries the
patch of rule 6 and the capacity warnings of rule 7. On UPDATE only the selection's
immutability and the license hand-mount rule (rule 8) apply; DELETE and CONNECT pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuclass.shared.core.admission.decisions import Allowed, Decision, Denied
from gpuclass.shared.core.admission.envelope import AdmissionRequest
from gpuclass.shared.core.admission.licensing import (
    LICENSE_REFERENCE_CAUSES,
    license_reference_causes,
    own_license_volume_refs,
    selected_licensed_classes,
)
from gpuclass.shared.core.admission.resolution import judge_create
from gpuclass.shared.core.admission.rules import annotation
from gpuclass.shared.core.admission.secretrefs import find_secret_refs
from gpuclass.shared.core.base import names
from gpuclass.shared.core.base.causes import CauseCode, invalid
from gpuclass.shared.core.base.fieldpath import FieldPath
from gpuclass.shared.core.model.selection import SELECTION_PATH, parse_selection
from gpuclass.shared.core.status.catalog import Catalog


def admit(request: AdmissionRequest, catalog: Catalog) -> Decision:
    """`/mutate/virtualmachineinstances`: CREATE resolves the selection into GPU entries (every rule
    of section 4), UPDATE checks immutability and license mounts only, DELETE and CONNECT pass. A
    CREATE or UPDATE that carries no object is refused as invalid, never passed unjudged."""
    obj = request.object
    if obj is None:
        if request.operation in ("CREATE", "UPDATE"):
            return Denied(
                (
                    invalid(
                        FieldPath.of("object"),
                        "the request carries no VirtualMachineInstance object",
                    ),
                )
            )
        return Allowed()
    if request.operation == "CREATE":
        return admit_create(obj, request.namespace, catalog=catalog)
    if request.operation == "UPDATE":
        return admit_update(obj, request.old_object or {}, catalog=catalog)
    return Allowed()


def admit_create(obj: Mapping[str, Any], namespace: str, *, catalog: Catalog) -> Decision:
    """Every input cause and every policy cause at once; 422 if any is input (section 3)."""
    judged = judge_create(obj, namespace, catalog=catalog)
    if judged.causes:
        return Denied(judged.causes)
    return Allowed(judged.operations, judged.warnings)


def admit_update(obj: Mapping[str, Any], old: Mapping[str, Any], *, catalog: Catalog) -> Decision:
    """A running VMI's selection may not change at all, and no new reference to a license copy may
    appear; references the stored object had, and its own license volume, stay allowed so
    KubeVirt's updates pass."""
    before, after = annotation(old), annotation(obj)
    if before != after:
        verb = "added" if before is None else "removed" if after is None else "changed"
        return Denied(
            (
                invalid(
                    SELECTION_PATH,
                    f"cannot be {verb} on a running VMI: recreate the VM to change its GPUs",
                    code=CauseCode.SELECTION_IMMUTABLE,
                ),
            )
        )
    # The VMI's own license volume (its class may be deleting by now) and every reference the
    # stored object already had stay, so KubeVirt's own updates and finalizer removal keep working.
    licensed = selected_licensed_classes(parse_selection(after).entries, catalog)
    permitted = own_license_volume_refs(obj, licensed)
    # The stored object's references, as many as one spec may make causes for: past them, a
    # reference the new object keeps is refused (fail closed), never a cost without bound.
    kept, _ = find_secret_refs(
        old.get("spec"), named=names.LICENSE_COPY_PREFIX, limit=LICENSE_REFERENCE_CAUSES
    )
    permitted |= {(ref.path, ref.name) for ref in kept}
    causes = license_reference_causes(obj, permitted)
    return Denied(tuple(causes)) if causes else Allowed()
