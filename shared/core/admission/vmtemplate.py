"""A VirtualMachine's template as the VMI it becomes, and causes named as the tenant wrote them.

Shared by the VirtualMachine admitter (`validate_vm`) and `gpuclass explain`, which judge a
template with the VMI rules: :func:`template_view` is the VMI a start would create (with
the worker-pool labels of the VirtualMachine itself, so a worker is known whichever of them
its template lacks), and
:func:`tenant_cause` renames a cause's field from the VMI's path to the VM's
(`spec.template.…`, or `gpus[i]` for an entry of the selection).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuclass.shared.core.base import names
from gpuclass.shared.core.base.causes import Cause
from gpuclass.shared.core.base.fieldpath import FieldPath
from gpuclass.shared.core.model.selection import SELECTION_PATH

TENANT_LIST = "gpus"
"""The tenant's list in the application charts, rendered verbatim into the annotation."""


def template_of(vm: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """`spec.template` of a VirtualMachine, or None when it has none (or not an object)."""
    spec = vm.get("spec")
    template = spec.get("template") if isinstance(spec, dict) else None
    return template if isinstance(template, dict) else None


def template_view(vm: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The VMI a VirtualMachine's template becomes, as admission judges it: the template's
    metadata and spec, plus a worker-pool label on the VM itself (a VM applied by hand may
    carry one on itself only). None when the VM has no template."""
    template = template_of(vm)
    if template is None:
        return None
    metadata = template.get("metadata")
    metadata = dict(metadata) if isinstance(metadata, dict) else {}
    vm_meta = vm.get("metadata")
    vm_labels = vm_meta.get("labels") if isinstance(vm_meta, dict) else None
    if isinstance(vm_labels, dict):
        worker = {k: v for k, v in vm_labels.items() if k in names.WORKER_POOL_LABELS}
        labels = metadata.get("labels")
        if worker:
            metadata["labels"] = {**worker, **(labels if isinstance(labels, dict) else {})}
    return {"metadata": metadata, "spec": template.get("spec") or {}}


TEMPLATE_PATH = FieldPath.of("spec", "template")
TENANT_PATH = FieldPath.of(TENANT_LIST)


def tenant_path(path: FieldPath) -> FieldPath:
    """`gpus[0].className` for an entry of the selection; `spec.template.<path>` for the rest."""
    if path.under(SELECTION_PATH):
        return path.rebase(SELECTION_PATH, TENANT_PATH)
    return FieldPath(TEMPLATE_PATH.steps + path.steps)


def tenant_cause(cause: Cause) -> Cause:
    """The cause, its field named as the tenant wrote it in the VirtualMachine."""
    return Cause(tenant_path(cause.path), cause.message, cause.kind, cause.code)
