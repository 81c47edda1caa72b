"""Rule 4.8 (docs/contract.md section 4): no license copy reaches a guest except as the license
volume of its own licensed class. Every place KubeVirt resolves a Secret from
(shared/core/admission/secretrefs.py lists them) is one row of `REFERENCE_ROWS`.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuclass.shared.core.admission.decisions import Allowed, Denied
from tests.shared.core.admission.vmi_admission import (
    COPY,
    LICENSE_DISK_OP,
    LICENSE_VOLUME,
    REFERENCE_ROWS,
    RES,
    causes_of,
    cls,
    create,
    gpus_op,
    vmi,
)


@pytest.mark.parametrize(("selection", "change", "paths"), REFERENCE_ROWS)
def test_4_8_license_copy_references(selection: Any, change: Any, paths: list[str]) -> None:
    obj = vmi(selection)
    change(obj["spec"])
    decision = create(obj)
    if paths:
        assert causes_of(decision) == [(p, "forbidden", "LicenseHandMounted") for p in paths]
        assert isinstance(decision, Denied) and decision.code == 403
    elif selection:  # the own license volume is there: rule 4.6 adds the GPU and the disk only
        assert decision == Allowed((gpus_op(RES["lic"]), LICENSE_DISK_OP))
    else:  # no selection: nothing to add
        assert decision == Allowed()


def test_4_8_license_volume_not_exactly_ours_is_invalid_and_forbidden() -> None:
    obj = vmi([cls("lic")])
    obj["spec"]["volumes"].append({**LICENSE_VOLUME, "secret": {"secretName": COPY}})
    decision = create(obj)
    assert causes_of(decision) == [
        ("spec.volumes[1].secret.secretName", "forbidden", "LicenseHandMounted"),
        ("spec.volumes[1]", "invalid", "ReservedName"),
    ]
    assert isinstance(decision, Denied) and decision.code == 422
