"""GPUClass admission (docs/contract.md section 5): the stored-class verdict, at the door.

The same :func:`shared.core.model.validation.validate_class` verdict judges a class at admission,
in its status and in `gpuclass validate`; on UPDATE it sees the old object, so
immutability and the ratchet of metadata-only updates apply.
"""

from __future__ import annotations

from gpuclass.shared.core.admission.decisions import Allowed, Decision, Denied
from gpuclass.shared.core.admission.envelope import AdmissionRequest
from gpuclass.shared.core.model.validation import validate_class
from gpuclass.shared.core.status.catalog import Catalog


def admit(request: AdmissionRequest, catalog: Catalog) -> Decision:
    """`/validate/gpuclasses`: CREATE and UPDATE get the stored-class verdict (all causes at once,
    shared-resource and changed-field warnings kept); DELETE passes, since the in-use finalizer,
    not admission, holds a used class."""
    if request.operation not in ("CREATE", "UPDATE"):
        return Allowed()
    old = request.old_object if request.operation == "UPDATE" else None
    verdict = validate_class(request.object, old=old, others=catalog.resource_by_class())
    if verdict.causes:
        return Denied(verdict.causes, verdict.warnings)
    return Allowed((), verdict.warnings)
