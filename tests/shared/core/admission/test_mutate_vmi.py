"""The VMI mutating admitter (docs/contract.md section 4) beyond CREATE: on UPDATE (4.9) the
selection is immutable and rule 4.8 applies to the new object, everything else passes;
DELETE and CONNECT pass; a CREATE or UPDATE without an object is refused.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from gpuclass.shared.core.admission.decisions import Allowed, Denied
from gpuclass.shared.core.admission.mutate_vmi import admit
from gpuclass.shared.core.model.snapshot import SnapshotBuilder
from gpuclass.shared.core.status.catalog import Policy, build_catalog
from tests.builders import admission_request
from tests.shared.core.admission.vmi_admission import (
    ANN,
    CATALOG,
    COPY,
    LICENSE_VOLUME,
    OBJECTS,
    REFERENCE_ROWS,
    SSH_KEY,
    _credential,
    applied,
    causes_of,
    cls,
    create,
    update,
    vmi,
)


@pytest.mark.parametrize(
    ("old", "new", "verb"),
    [
        pytest.param(vmi(), vmi([cls("whole")]), "added", id="added"),
        pytest.param(vmi([cls("whole")]), vmi([cls("whole", 2)]), "changed", id="changed"),
        pytest.param(vmi([cls("whole")]), vmi(), "removed", id="removed"),
        pytest.param(
            vmi([cls("whole")]),
            vmi(raw='[{"className":"whole"}]'),
            "changed",
            id="reformatted-is-changed",
        ),
    ],
)
def test_update_selection_immutable(old: dict[str, Any], new: dict[str, Any], verb: str) -> None:
    decision = update(new, old)
    assert causes_of(decision) == [(ANN, "invalid", "SelectionImmutable")]
    assert isinstance(decision, Denied) and f"cannot be {verb}" in decision.causes[0].message


def test_update_unrelated_change_passes_untouched() -> None:
    old = vmi([cls("whole")])
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"kubevirt.io/nodeName": "n1"}
    new["spec"]["domain"]["devices"]["gpus"] = [{"name": "anything", "deviceName": "x/y"}]
    assert update(new, old) == Allowed()


@pytest.mark.parametrize(("selection", "change", "paths"), REFERENCE_ROWS)
def test_update_new_license_copy_reference_refused(
    selection: Any, change: Any, paths: list[str]
) -> None:
    old = vmi(selection)
    new = copy.deepcopy(old)
    change(new["spec"])
    decision = update(new, old)
    if paths:
        assert causes_of(decision) == [(p, "forbidden", "LicenseHandMounted") for p in paths]
    else:
        assert decision == Allowed()


def test_update_keeps_references_the_stored_object_already_had() -> None:
    old = vmi()
    _credential(SSH_KEY)(old["spec"])
    new = copy.deepcopy(old)
    new["metadata"]["finalizers"] = []
    assert update(new, old) == Allowed()


def test_update_pointing_an_existing_reference_at_a_copy_refused() -> None:
    old = vmi()
    _credential({"sshPublicKey": {"source": {"secret": {"secretName": "my-keys"}}}})(old["spec"])
    new = copy.deepcopy(old)
    new["spec"]["accessCredentials"][0]["sshPublicKey"]["source"]["secret"]["secretName"] = COPY
    assert causes_of(update(new, old)) == [
        (
            "spec.accessCredentials[0].sshPublicKey.source.secret.secretName",
            "forbidden",
            "LicenseHandMounted",
        )
    ]


def test_update_keeps_the_license_it_was_admitted_with_even_if_class_is_gone() -> None:
    old = applied(vmi([cls("lic")]), create(vmi([cls("lic")])))
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"x": "y"}
    without_class = build_catalog(
        SnapshotBuilder().add_all([o for o in OBJECTS if o["metadata"]["name"] != "lic"]),
        Policy(vgpu_entitled=True),
        figures="computed",
    )
    assert update(new, old, without_class) == Allowed()
    assert update(new, old) == Allowed()


def test_update_of_a_vmi_stored_before_the_caps_passes() -> None:
    """A VMI admitted with 17 entries before docs/contract.md 4.1 capped them keeps its license."""
    old = vmi(raw=json.dumps([cls("lic")] * 17))
    old["spec"]["volumes"].append(copy.deepcopy(LICENSE_VOLUME))
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"kubevirt.io/nodeName": "n3"}
    assert update(new, old) == Allowed()
    moved = copy.deepcopy(new)
    moved["spec"]["volumes"].append({"name": "x", "secret": {"secretName": "gpuclass-license-lic"}})
    assert causes_of(update(moved, old)) == [
        ("spec.volumes[2].secret.secretName", "forbidden", "LicenseHandMounted")
    ]


@pytest.mark.parametrize("operation", ["DELETE", "CONNECT"])
def test_other_operations_pass(operation: str) -> None:
    assert (
        admit(admission_request(operation=operation, oldObject=vmi([cls("gone")])), CATALOG)
        == Allowed()
    )


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_missing_object_refused(operation: str) -> None:
    decision = admit(admission_request(operation=operation), CATALOG)
    assert causes_of(decision) == [("object", "invalid", "Invalid")]
