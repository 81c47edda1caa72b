"""Rule 4.1 (docs/contract.md section 4): the annotation is a JSON list of class or raw
entries, counts are JSON integers >= 1; `[]` and no annotation leave the VMI untouched.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuclass.shared.core.admission.decisions import Allowed, Denied
from tests.shared.core.admission.vmi_admission import (
    ANN,
    RES,
    causes_of,
    cls,
    create,
    vmi,
)


def test_no_annotation_untouched() -> None:
    assert create(vmi()) == Allowed()


def test_empty_list_untouched() -> None:
    assert create(vmi([])) == Allowed()


@pytest.mark.parametrize(
    ("obj", "causes"),
    [
        pytest.param(vmi(raw="[{className"), [(ANN, "invalid", "Invalid")], id="not-json"),
        pytest.param(vmi({"className": "whole"}), [(ANN, "invalid", "Invalid")], id="not-a-list"),
        pytest.param(
            vmi([cls("whole", 0)]), [(f"{ANN}[0].count", "invalid", "Invalid")], id="count-zero"
        ),
        pytest.param(
            vmi([{"className": "whole", "count": 2.0}]),
            [(f"{ANN}[0].count", "invalid", "Invalid")],
            id="count-float",
        ),
        pytest.param(
            vmi([{"className": "whole", "count": "2"}]),
            [(f"{ANN}[0].count", "invalid", "Invalid")],
            id="count-string",
        ),
        pytest.param(
            vmi([{"className": "whole", "count": True}]),
            [(f"{ANN}[0].count", "invalid", "Invalid")],
            id="count-bool",
        ),
        pytest.param(vmi([{"name": RES["whole"]}]), [(ANN, "invalid", "Invalid")], id="raw-only"),
        pytest.param(
            vmi([cls("whole"), {"name": RES["whole"]}]), [(ANN, "invalid", "Invalid")], id="mixed"
        ),
        pytest.param(
            vmi([{"className": "whole", "cnt": 2}]),
            [(f"{ANN}[0].cnt", "invalid", "Invalid")],
            id="unknown-key",
        ),
    ],
)
def test_4_1_selection_refused(obj: dict[str, Any], causes: list[tuple[str, str, str]]) -> None:
    decision = create(obj)
    assert causes_of(decision) == causes
    assert isinstance(decision, Denied) and decision.code == 422
