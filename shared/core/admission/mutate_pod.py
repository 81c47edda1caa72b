"""virt-launcher Pod admission (docs/contract.md section 3): add class tolerations, never refuse.

KubeVirt copies the VMI's annotations, the selection among them, onto the launcher
Pod it creates. Only Pods labelled as launchers and created by KubeVirt's controller
user are touched; anything unreadable leaves the Pod as it is, because refusing a
launcher would strand an admitted VM.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuclass.shared.core.admission.decisions import Allowed, Decision
from gpuclass.shared.core.admission.envelope import AdmissionRequest
from gpuclass.shared.core.admission.patches import PatchBuilder
from gpuclass.shared.core.admission.rules import TOLERATIONS, annotation
from gpuclass.shared.core.base import names
from gpuclass.shared.core.model.selection import parse_selection
from gpuclass.shared.core.status.catalog import Catalog


def is_launcher(request: AdmissionRequest, catalog: Catalog) -> bool:
    """A launcher Pod being created by KubeVirt's controller user (label and username both): the
    only Pods this admitter touches, so a tenant cannot borrow a class's tolerations by labelling
    a Pod."""
    meta = request.object.get("metadata") if request.object is not None else None
    labels = meta.get("labels") if isinstance(meta, dict) else None
    return (
        request.operation == "CREATE"
        and isinstance(labels, dict)
        and labels.get(names.LAUNCHER_LABEL) == names.LAUNCHER_LABEL_VALUE
        and request.username == catalog.policy.kubevirt_controller_user
    )


def admit(request: AdmissionRequest, catalog: Catalog) -> Decision:
    """`/mutate/pods`: append the tolerations of every class the launcher's selection names, each
    once. Always allows, with a warning for an unreadable selection or a missing class: refusing
    a launcher would strand a VM already admitted."""
    if request.object is None or not is_launcher(request, catalog):
        return Allowed()
    obj: Mapping[str, Any] = request.object
    builder = PatchBuilder(obj)
    spec_tolerations = builder.get(TOLERATIONS)
    present = list(spec_tolerations) if isinstance(spec_tolerations, list) else []
    warnings = []
    selection = parse_selection(annotation(obj))
    if selection.causes:
        warnings.append("launcher pod: the GPU class selection is unreadable; no tolerations added")
    for class_name in dict.fromkeys(e.class_name for e in selection.entries):
        offer = catalog.offers.get(class_name)
        if offer is None:
            warnings.append(
                f"launcher pod: class {class_name} not found; no tolerations added for it"
            )
            continue
        for toleration in offer.record.tolerations:
            if toleration not in present:
                present.append(toleration)
                builder.append(TOLERATIONS, [toleration])
    return Allowed(tuple(builder.operations), tuple(warnings))
