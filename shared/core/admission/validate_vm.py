"""VirtualMachine admission (docs/contract.md 4.10): the template's selection, judged when applied.

A VirtualMachine carries the tenant's selection in `spec.template`; KubeVirt makes a
VMI of that template each time the VM starts, and the VMI admitter decides then. This
admitter runs the same rules (:func:`shared.core.admission.resolution.judge_create`) on the template
when the VM is created or its template changes, so a tenant learns at `kubectl apply`
what would be refused at every start:

- what cannot change before the VM starts (annotation syntax, mixing, counts and
  per-VM limits, one vGPU class, worker pools passthrough-only, entitlement, a hand-
  mounted license, raw GPU requests beside classes) is refused;
- what can (a class missing, invalid, deleting, losing its resource name, not
  permitted, and capacity) is a warning: the VMI admitter checks it again at start.

Fields are named as the tenant wrote them: an entry of the selection is `gpus[i]`
(the application chart renders the tenant's `gpus` list verbatim into the
annotation, docs/contract.md section 2); any other field is its path in the VM,
`spec.template.…`. It never patches: the VM is stored as applied.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuclass.shared.core.admission.decisions import Allowed, Decision, Denied
from gpuclass.shared.core.admission.envelope import AdmissionRequest
from gpuclass.shared.core.admission.resolution import judge_create
from gpuclass.shared.core.admission.rules import raw_gpus_beside_classes
from gpuclass.shared.core.admission.vmtemplate import (
    template_of,
    template_view,
    tenant_cause,
    tenant_path,
)
from gpuclass.shared.core.base.causes import invalid
from gpuclass.shared.core.base.fieldpath import FieldPath
from gpuclass.shared.core.status.catalog import Catalog

RECHECKED = "the classes are checked again when the VM starts: the VM is stored"


def admit(request: AdmissionRequest, catalog: Catalog) -> Decision:
    """`/validate/virtualmachines`: judge the template on CREATE and on an UPDATE that changes it;
    an update that leaves it alone (KubeVirt's finalizers, run strategy) and DELETE pass. Never
    patches."""
    obj = request.object
    if request.operation not in ("CREATE", "UPDATE"):
        return Allowed()
    if obj is None:
        return Denied(
            (invalid(FieldPath.of("object"), "the request carries no VirtualMachine object"),)
        )
    old = request.old_object if request.operation == "UPDATE" else None
    if old is not None and template_of(obj) == template_of(old):
        return Allowed()  # KubeVirt's own updates (finalizers, run strategy) pass untouched
    view = template_view(obj)
    if view is None:
        return Allowed()  # the API server's schema requires a template; nothing of ours to judge
    return judge_template(view, request.namespace, catalog=catalog)


def judge_template(view: Mapping[str, Any], namespace: str, *, catalog: Catalog) -> Decision:
    """The rules of a VMI CREATE on the template's view (:func:`template_view`): refusals for
    what cannot change before the VM starts, warnings for the rest."""
    judged = judge_create(view, namespace, catalog=catalog)
    refusals = tuple(tenant_cause(c) for c in judged.causes if not c.code.is_class_state)
    if judged.gpus_unjudged:
        # The class that left them unjudged is only a warning here, and the template's `gpus`
        # are the tenant's own (a VM is never patched): a raw request beside classes (rule 4.2).
        refusals += (tenant_cause(raw_gpus_beside_classes()),)
    # One line per cause, in full (a warning is cut at 120 characters), then one that says why
    # it is only a warning.
    later = [f"{tenant_path(c.path)}: {c.message}" for c in judged.causes if c.code.is_class_state]
    if later:
        later.append(RECHECKED)
    warnings = (*later, *judged.warnings)
    if refusals:
        return Denied(refusals, warnings)
    return Allowed((), warnings)
