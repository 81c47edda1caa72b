"""VirtualMachine admission (docs/contract.md 4.10): the VMI's rules on the template, at apply.

The strongest check is against the VMI answers already fixed by the golden fixtures
(reviewed, and pinned by tests/fixtures/admission/expected.yaml): every VMI CREATE
fixture, put into a VirtualMachine's template, must get the answer rule 4.10 derives
from that VMI answer — the same causes, named in the tenant's terms, except that the
class-state causes of rule 4.3 and the capacity warnings of 4.7 become warnings, and
never a patch. The mapping below is written from the rule's text, not from the code.
"""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

import pytest

from gpuclass.shared.cli.reviewcmd import offline_catalog
from gpuclass.shared.core.admission.decisions import Allowed, Denied
from gpuclass.shared.core.admission.review import review
from gpuclass.shared.core.admission.validate_vm import admit
from gpuclass.shared.core.status.catalog import Catalog, Policy
from tests.builders import admission_request
from tests.conftest import OBJECTS, golden_cases

ANNOTATION_PATH = "metadata.annotations[gpu.cozystack.io/classes]"
VM_KIND = ("kubevirt.io", "VirtualMachine")
# Rule 4.3's reasons: the state of a class now, which can change before the VM starts.
CLASS_STATE = {
    "ClassNotFound",
    "ClassInvalid",
    "ClassDeleting",
    "ResourceNameConflict",
    "ResourceNameNotPermitted",
}
VMI_CREATES = [
    c
    for c in golden_cases()
    if c.request["request"]["kind"]["kind"] == "VirtualMachineInstance"
    and c.request["request"]["operation"] == "CREATE"
    and isinstance(c.request["request"].get("object"), dict)
    and c.endpoint is None  # the VMI's mutating answer; the check after mutation is rule 4.11
]


@cache
def catalog(vgpu_entitled: bool = True) -> Catalog:
    return offline_catalog(OBJECTS, Policy(vgpu_entitled=vgpu_entitled))


def tenant_field(field: str) -> str:
    """Rule 4.10's naming: gpus[i] for an entry, gpus for the selection, spec.template.… else."""
    if field.startswith(ANNOTATION_PATH):
        return "gpus" + field[len(ANNOTATION_PATH) :]
    return "spec.template." + field


def as_vm(vmi: dict[str, Any]) -> dict[str, Any]:
    meta = vmi.get("metadata") or {}
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": meta.get("name", "vm"), "namespace": meta.get("namespace", "")},
        "spec": {
            "runStrategy": "Always",
            "template": {
                "metadata": {k: v for k, v in meta.items() if k in ("annotations", "labels")},
                "spec": copy.deepcopy(vmi.get("spec") or {}),
            },
        },
    }


def vm_review(vmi_request: dict[str, Any]) -> dict[str, Any]:
    request = copy.deepcopy(vmi_request)
    request["kind"] = {"group": "kubevirt.io", "version": "v1", "kind": "VirtualMachine"}
    request["resource"] = {"group": "kubevirt.io", "version": "v1", "resource": "virtualmachines"}
    request["object"] = as_vm(request["object"])
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


@pytest.mark.parametrize("case", VMI_CREATES, ids=[c.name for c in VMI_CREATES])
def test_a_vm_template_gets_the_vmi_answer_in_the_tenants_terms(case: Any) -> None:
    vmi_answer = case.expected()["response"]
    vmi_causes = ((vmi_answer.get("status") or {}).get("details") or {}).get("causes") or []
    refused = [c for c in vmi_causes if c["reason"] not in CLASS_STATE]
    deferred = [c for c in vmi_causes if c["reason"] in CLASS_STATE]
    answer = review(vm_review(case.request["request"]), catalog(case.vgpu_entitled))["response"]
    assert "patch" not in answer and "patchType" not in answer
    if len(vmi_causes) > 20:  # the VMI answer lists only 20; compare what both list
        assert answer["allowed"] is False
        return
    if not refused:
        assert answer["allowed"] is True, answer
    else:
        assert answer["allowed"] is False
        got = answer["status"]["details"]["causes"]
        assert [(c["field"], c["reason"]) for c in got] == [
            (tenant_field(c["field"]), c["reason"]) for c in refused
        ]
        wants_422 = any(c["reason"] not in _POLICY_REASONS for c in refused)
        assert answer["status"]["code"] == (422 if wants_422 else 403)
    warnings = answer.get("warnings") or []
    for cause in deferred:
        assert any(w.startswith(tenant_field(cause["field"]) + ": ") for w in warnings), warnings
    if vmi_answer["allowed"]:  # rule 4.7's capacity warning comes through unchanged
        assert set(vmi_answer.get("warnings") or []) <= set(warnings)


# Policy refusals (403) among the reasons of section 4: entitlement, worker pools, license by hand.
_POLICY_REASONS = {"NotEntitled", "WorkerPoolVGPU", "LicenseHandMounted", "Forbidden"}


def test_the_mapping_reached_every_kind_of_answer() -> None:
    """The table above is not vacuous: it has refused, deferred-only and clean cases."""
    kinds = {"refused": 0, "deferred": 0, "clean": 0}
    for case in VMI_CREATES:
        causes = ((case.expected()["response"].get("status") or {}).get("details") or {}).get(
            "causes"
        ) or []
        if any(c["reason"] not in CLASS_STATE for c in causes):
            kinds["refused"] += 1
        elif causes:
            kinds["deferred"] += 1
        else:
            kinds["clean"] += 1
    assert kinds["refused"] >= 20 and kinds["deferred"] >= 4 and kinds["clean"] >= 5, kinds


def selection_vm(selection: str, **template_spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "vm", "namespace": "tenant-a"},
        "spec": {
            "template": {
                "metadata": {"annotations": {"gpu.cozystack.io/classes": selection}},
                "spec": {"domain": {"devices": {}}, **template_spec},
            }
        },
    }


def test_updates_that_keep_the_template_pass_even_when_it_would_be_refused() -> None:
    stored = selection_vm('[{"className": "example-whole-gpu", "count": 0}]')
    touched = copy.deepcopy(stored)
    touched["metadata"]["finalizers"] = ["kubevirt.io/virtualMachineControllerFinalize"]
    touched["spec"]["runStrategy"] = "Halted"
    request = admission_request(
        VM_KIND, operation="UPDATE", namespace="tenant-a", object=touched, oldObject=stored
    )
    assert admit(request, catalog()) == Allowed()


def test_an_update_that_changes_the_template_is_judged() -> None:
    old = selection_vm('[{"className": "example-whole-gpu"}]')
    new = selection_vm('[{"className": "example-whole-gpu", "count": 0}]')
    request = admission_request(
        VM_KIND, operation="UPDATE", namespace="tenant-a", object=new, oldObject=old
    )
    decision = admit(request, catalog())
    assert isinstance(decision, Denied)
    assert [c.field for c in decision.causes] == ["gpus[0].count"]


@pytest.mark.parametrize("operation", ["DELETE", "CONNECT"])
def test_other_operations_pass(operation: str) -> None:
    old = selection_vm('[{"className": "example-whole-gpu", "count": 0}]')
    request = admission_request(VM_KIND, operation=operation, oldObject=old)
    assert admit(request, catalog()) == Allowed()


def test_a_vm_without_a_template_or_object() -> None:
    no_template = {"metadata": {"name": "vm", "namespace": "tenant-a"}, "spec": {}}
    request = admission_request(VM_KIND, operation="CREATE", object=no_template)
    assert admit(request, catalog()) == Allowed()
    decision = admit(admission_request(VM_KIND, operation="CREATE"), catalog())
    assert isinstance(decision, Denied)
    assert [(c.field, c.kind) for c in decision.causes] == [("object", "invalid")]


@pytest.mark.parametrize(
    "device",
    [
        pytest.param("example.com/byol-vgpu", id="a-vgpu-resource"),
        pytest.param("example.com/whole-gpu", id="a-passthrough-resource"),
        pytest.param("example.com/other", id="a-foreign-resource"),
    ],
)
def test_raw_gpus_beside_a_class_that_does_not_resolve_yet_are_refused(device: str) -> None:
    """Rule 4.10 refuses a raw GPU request beside classes at apply. A missing class is only a
    warning on a VM, so it must not leave the template's own `gpus` unjudged (on a VMI it may:
    the VMI is refused for the class)."""
    vm = selection_vm(
        '[{"className": "example-not-yet"}]',
        domain={"devices": {"gpus": [{"name": "gpu1", "deviceName": device}]}},
    )
    request = admission_request(VM_KIND, operation="CREATE", namespace="tenant-a", object=vm)
    decision = admit(request, catalog())
    assert isinstance(decision, Denied), decision
    assert [(c.field, c.code) for c in decision.causes] == [
        ("spec.template.spec.domain.devices.gpus", "RawRequestBesideClasses")
    ]
    assert any("example-not-yet" in w for w in decision.warnings)


def test_a_class_that_does_not_resolve_yet_without_gpus_is_only_a_warning() -> None:
    vm = selection_vm('[{"className": "example-not-yet"}]')
    request = admission_request(VM_KIND, operation="CREATE", namespace="tenant-a", object=vm)
    decision = admit(request, catalog())
    assert isinstance(decision, Allowed), decision
    assert decision.operations == (), "a VM's answer never carries a patch (4.10)"
    # 4.10: the missing class of 4.3 is a warning naming the tenant's field, the entry gpus[0],
    # and the VM is told the class is judged again when its VMI is created.
    first, *rest = decision.warnings
    assert first.startswith("gpus[0].className: class example-not-yet "), first
    assert len(rest) == 1 and "checked again when the VM starts" in rest[0], rest


@pytest.mark.parametrize(
    ("left", "count", "warned"),
    [
        pytest.param(1, 2, True, id="quota-short-warns"),
        pytest.param(2, 2, False, id="quota-exactly-enough"),
        pytest.param(None, 2, False, id="no-quota"),
    ],
)
def test_a_quota_that_cannot_hold_the_units_is_a_warning_never_a_refusal(
    left: int | None, count: int, warned: bool
) -> None:
    """docs/decisions.md, "Can this VM start, in full": Kubernetes refuses the launcher Pod over
    quota; admission only says so. The quota is tenant-a's, on the class's resource."""
    from dataclasses import replace
    from decimal import Decimal

    quota = {} if left is None else {"tenant-a": {"requests.example.com/whole-gpu": Decimal(left)}}
    judged = replace(catalog(), quota_left=quota)
    vm = selection_vm(f'[{{"className": "example-whole-gpu", "count": {count}}}]')
    request = admission_request(VM_KIND, operation="CREATE", namespace="tenant-a", object=vm)
    decision = admit(request, judged)
    assert isinstance(decision, Allowed)
    quota_words = [w for w in decision.warnings if "quota" in w]
    assert bool(quota_words) is warned
    if warned:
        assert quota_words == [
            f"class example-whole-gpu: the namespace's quota has {left} units left, the VM needs "
            f"{count}; it will not start until the quota has room"
        ]
