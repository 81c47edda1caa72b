"""`compact_class` given the record held before: the verdict is kept only when nothing it reads changed.

The reconciler passes the record it holds (`previous`) so that its own status writes,
coming back through the watch, are not validated again. Whatever the pair of objects,
the record equals the one `compact_class` makes without `previous`.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuclass.shared.core.model.snapshot import ClassRecord, compact_class
from tests.builders import gpuclass

STATUS = {"free": 3, "conditions": [{"type": "Ready", "status": "True", "reason": "Ready"}]}


def variant(change: str) -> dict[str, Any]:
    obj = gpuclass("c", "example.com/gpu")
    if change == "status":
        obj["status"] = copy.deepcopy(STATUS)
    elif change == "finalizers":
        obj["metadata"]["finalizers"] = ["gpu.cozystack.io/in-use"]
    elif change == "invalid-mode":
        obj["spec"]["mode"] = "neither"
    elif change == "other-resource":
        obj["spec"]["source"]["devicePlugin"]["resourceName"] = "example.com/other"
    elif change == "tolerations":
        obj["spec"]["tolerations"] = [{"key": "gpu", "operator": "Exists"}]
    elif change == "renamed":
        obj["metadata"]["name"] = "d"
    elif change == "bad-name":
        obj["metadata"]["name"] = "Not_A_Label"
    return obj


CHANGES = [
    "none",
    "status",
    "finalizers",
    "invalid-mode",
    "other-resource",
    "tolerations",
    "renamed",
    "bad-name",
]


def record(obj: dict[str, Any], previous: ClassRecord | None = None) -> ClassRecord:
    made = compact_class(obj, previous=previous)
    assert made is not None
    return made


@pytest.mark.parametrize(
    ("change", "kept"),
    [
        pytest.param("status", True, id="status-only-keeps-the-verdict"),
        pytest.param("finalizers", True, id="metadata-only-keeps-the-verdict"),
        pytest.param("invalid-mode", False, id="changed-spec-is-validated-again"),
        pytest.param("renamed", False, id="other-name-is-validated-again"),
    ],
)
def test_verdict_kept_only_for_the_same_name_and_spec(change: str, kept: bool) -> None:
    previous = record(variant("none"))
    made = record(variant(change), previous)
    assert (made.spec is previous.spec) == kept
    assert made == record(variant(change))


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(CHANGES), st.sampled_from(CHANGES))
def test_a_previous_record_never_changes_the_result(before: str, after: str) -> None:
    previous = record(variant(before))
    assert record(variant(after), previous) == record(variant(after))
