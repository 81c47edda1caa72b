"""A plain manifest wrapped as the API server would (`gpuclass review MANIFEST`).

Every golden fixture with an object, its object taken out alone and wrapped again with
the request's operation, namespace, user and uid, must get exactly the golden answer:
the wrapper adds nothing an admitter reads that the API server would not send.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest

from gpuclass.shared.cli.manifest import wrap_manifest
from gpuclass.shared.cli.reviewcmd import offline_catalog
from gpuclass.shared.core.admission.envelope import MalformedReview
from gpuclass.shared.core.admission.review import review
from gpuclass.shared.core.status.catalog import Catalog, Policy
from tests.conftest import OBJECTS, golden_cases

WRAPPABLE = [
    c
    for c in golden_cases()
    if isinstance(c.request["request"].get("object"), dict)
    and c.request["request"]["operation"] in ("CREATE", "UPDATE")
    and c.request["apiVersion"] == "admission.k8s.io/v1"
]


@cache
def catalog(vgpu_entitled: bool) -> Catalog:
    return offline_catalog(OBJECTS, Policy(vgpu_entitled=vgpu_entitled))


@pytest.mark.parametrize("case", WRAPPABLE, ids=[c.name for c in WRAPPABLE])
def test_a_wrapped_manifest_gets_the_golden_answer(case: Any) -> None:
    request = case.request["request"]
    if request["kind"]["kind"] != "GPUClass" and not request.get("namespace"):
        pytest.skip("the fixture has no request.namespace; a wrapped manifest always has one")
    body = wrap_manifest(
        request["object"],
        operation=request["operation"],
        namespace=request.get("namespace") or "",
        old=request.get("oldObject"),
        username=request["userInfo"]["username"],
        uid=request["uid"],
    )
    assert review(body, catalog(case.vgpu_entitled), endpoint=case.endpoint) == case.expected()


def test_the_set_is_not_vacuous() -> None:
    kinds = {c.request["request"]["kind"]["kind"] for c in WRAPPABLE}
    assert kinds == {"GPUClass", "VirtualMachine", "VirtualMachineInstance", "Pod"}
    assert len(WRAPPABLE) >= 80


def test_namespace_comes_from_the_flag_then_the_manifest_then_default() -> None:
    vm = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": {"name": "v"}}
    assert wrap_manifest(vm)["request"]["namespace"] == "default"
    vm["metadata"]["namespace"] = "tenant-a"
    assert wrap_manifest(vm)["request"]["namespace"] == "tenant-a"
    wrapped = wrap_manifest(vm, namespace="tenant-b")["request"]
    assert wrapped["namespace"] == wrapped["object"]["metadata"]["namespace"] == "tenant-b"
    gpuclass = {
        "apiVersion": "cozystack.io/v1alpha1",
        "kind": "GPUClass",
        "metadata": {"name": "c"},
    }
    assert "namespace" not in wrap_manifest(gpuclass, namespace="tenant-b")["request"]


@pytest.mark.parametrize(
    ("obj", "kwargs", "says"),
    [
        ({"apiVersion": "v1", "kind": "ConfigMap"}, {}, "not a kind gpuclass admits"),
        ([], {}, "one Kubernetes object"),
        ({"kind": "Pod"}, {}, "apiVersion and kind"),
        ({"apiVersion": "v1", "kind": "Pod"}, {"operation": "UPDATE"}, "old object"),
    ],
)
def test_what_cannot_be_wrapped_is_a_malformed_review(
    obj: object, kwargs: dict[str, Any], says: str
) -> None:
    with pytest.raises(MalformedReview, match=says):
        wrap_manifest(obj, **kwargs)
