"""`gpuclass review -o text` (shared/cli/reviewtext.py): a response read by a person."""

from __future__ import annotations

import base64
import json

from gpuclass.shared.cli.reviewtext import review_lines


def envelope(response: dict[str, object]) -> dict[str, object]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


def test_denial_with_capped_causes() -> None:
    causes = [{"field": f"spec.f{i}", "message": "wrong", "reason": "Invalid"} for i in range(20)]
    response = {
        "uid": "u",
        "allowed": False,
        "status": {
            "code": 422,
            "reason": "Invalid",
            "message": "...; and 3 more",
            "details": {"causes": causes},
        },
        "warnings": ["careful"],
    }
    lines = review_lines(envelope(response))
    assert lines[0] == "denied: 422 Invalid"
    assert lines[1] == "  cause: spec.f0: wrong [Invalid]"
    assert "  and 3 more causes" in lines
    assert lines[-1] == "warning: careful"


def test_allowed_with_patch_one_operation_per_line() -> None:
    operations = [
        {"op": "add", "path": "/spec/tolerations/-", "value": {"key": "k"}},
        {"op": "remove", "path": "/metadata/labels/x"},
        {"op": "move", "from": "/a", "path": "/b"},
    ]
    patch = base64.b64encode(json.dumps(operations).encode()).decode()
    lines = review_lines(
        envelope({"uid": "u", "allowed": True, "patchType": "JSONPatch", "patch": patch})
    )
    assert lines == [
        "allowed",
        "patch (3 operations):",
        '  add /spec/tolerations/- {"key":"k"}',
        "  remove /metadata/labels/x",
        "  move /b from /a",
    ]


def test_allowed_without_patch() -> None:
    assert review_lines(envelope({"uid": "u", "allowed": True})) == ["allowed"]
