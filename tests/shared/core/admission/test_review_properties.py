"""Properties of the admission path (docs/conventions.md rule 17), checked with Hypothesis.

- Any JSON value as a review body, any JSON object as `request`, and arbitrary
  VMI-shaped objects never raise anything but `MalformedReview`, and the response
  always serializes.
- Every patch applies with jsonpatch, only adds, and touches only our paths (or a
  missing parent of them); existing list items are never removed or reordered.
- Resolving an already resolved VMI yields no operations.
- Everything outside our paths survives untouched.
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import jsonpatch
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gpuclass.shared.cli.reviewcmd import offline_catalog
from gpuclass.shared.core.admission.decisions import encode_response
from gpuclass.shared.core.admission.review import ENDPOINTS, MalformedReview, review
from gpuclass.shared.core.status.catalog import Policy
from tests.conftest import OBJECTS

CATALOG = offline_catalog(OBJECTS, Policy(vgpu_entitled=True))
ANN = "gpu.cozystack.io/classes"
V1 = "admission.k8s.io/v1"

PROFILE = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

OUR_LISTS = (
    ("spec", "domain", "devices", "gpus"),
    ("spec", "tolerations"),
    ("spec", "volumes"),
    ("spec", "domain", "devices", "disks"),
)
OUR_PARENTS = (("spec", "domain", "devices"), ("spec", "domain"), ("spec",))
ALLOWED_PATHS = (
    {"/" + "/".join(p) for p in OUR_LISTS}
    | {"/" + "/".join(p) + "/-" for p in OUR_LISTS}
    | {"/" + "/".join(p) for p in OUR_PARENTS}
)
MANAGED_KEYS = {
    "gpus",
    "disks",
    "hostDevices",
    "tolerations",
    "volumes",
    "domain",
    "devices",
    "resources",
    "spec",
}

CLASS_NAMES = sorted(CATALOG.offers)
RESOURCES = sorted(CATALOG.resources)
CLASS_TOLERATIONS = [dict(t) for o in CATALOG.offers.values() for t in o.record.tolerations]
LICENSED = [n for n, o in CATALOG.offers.items() if o.record.spec and o.record.spec.license]

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
json_objects = st.dictionaries(st.text(max_size=8), json_values, max_size=5)


def review_body(request: Any, api_version: str = V1) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": "AdmissionReview", "request": request}


def answer(body: Any) -> dict[str, Any] | None:
    """The rendered response, or None for a MalformedReview; anything else propagates and fails."""
    try:
        rendered = review(body, CATALOG)
    except MalformedReview:
        return None
    json.loads(encode_response(rendered))  # what the webhook writes always serializes
    return rendered


REVIEW_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")


@PROFILE
@given(
    json_values
    | st.fixed_dictionaries(
        {"apiVersion": st.sampled_from(REVIEW_VERSIONS)},
        optional={"kind": json_values, "request": json_values | json_objects},
    )
)
def test_any_json_value_as_body(body: Any) -> None:
    """docs/contract.md 3.1: a body that is not an AdmissionReview of v1 or v1beta1 is refused
    as malformed (400), never answered; one that is answered carries its own apiVersion."""
    rendered = answer(body)
    version = body.get("apiVersion") if isinstance(body, dict) else None
    if version not in REVIEW_VERSIONS:
        assert rendered is None, rendered
    elif rendered is not None:
        assert rendered["apiVersion"] == version


@PROFILE
@given(json_objects)
def test_any_json_object_as_request(request: dict[str, Any]) -> None:
    """docs/contract.md 3.1 and 3.2: any `request` object is either malformed (400) or answered
    in the request's apiVersion, with its uid copied."""
    rendered = answer(review_body(request))
    if rendered is not None:
        assert rendered["apiVersion"] == V1
        assert rendered["response"]["uid"] == request["uid"]


kinds = st.sampled_from(
    [
        {"group": "kubevirt.io", "version": "v1", "kind": "VirtualMachineInstance"},
        {"group": "", "version": "v1", "kind": "Pod"},
        {"group": "cozystack.io", "version": "v1alpha1", "kind": "GPUClass"},
        {"kind": "Pod"},
    ]
)
operations = st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT"])


@PROFILE
@given(
    st.fixed_dictionaries(
        {"uid": st.just("u")},
        optional={
            "kind": kinds | json_values,
            "operation": operations | json_values,
            "object": json_values,
            "oldObject": json_values,
            "namespace": st.sampled_from(["tenant-a", "tenant-root", "default"]) | json_values,
            "userInfo": st.just(
                {"username": "system:serviceaccount:cozy-kubevirt:kubevirt-controller"}
            )
            | json_values,
        },
    ),
    st.sampled_from([V1, "admission.k8s.io/v1beta1"]),
)
def test_well_enveloped_request_with_any_fields(request: dict[str, Any], api_version: str) -> None:
    rendered = answer(review_body(request, api_version))
    if rendered is not None:
        assert rendered["apiVersion"] == api_version
        assert rendered["response"]["uid"] == "u"


# Pods at every endpoint: the vGPU Pod check never raises and never patches.

pod_resources = st.dictionaries(
    st.sampled_from([*sorted(CATALOG.vgpu_resources), *RESOURCES, "cpu"]) | st.text(max_size=8),
    json_values,
    max_size=3,
)
pod_containers = st.lists(
    st.fixed_dictionaries(
        {},
        optional={
            "name": st.text(max_size=4),
            "resources": st.fixed_dictionaries(
                {}, optional={"requests": pod_resources | json_values, "limits": pod_resources}
            )
            | json_values,
        },
    )
    | json_values,
    max_size=3,
)
pods = st.fixed_dictionaries(
    {},
    optional={
        "metadata": json_values,
        "spec": st.fixed_dictionaries(
            {}, optional={"containers": pod_containers, "initContainers": pod_containers}
        )
        | json_values,
    },
)


@PROFILE
@given(
    st.sampled_from(sorted(ENDPOINTS)),
    pods,
    st.sampled_from(["tenant-a", "tenant-c", "default", ""]),
    operations,
)
def test_any_pod_at_any_endpoint(endpoint: str, obj: Any, namespace: str, operation: str) -> None:
    request = {
        "uid": "u",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "operation": operation,
        "namespace": namespace,
        "object": obj,
    }
    try:
        rendered = review(review_body(request), CATALOG, endpoint=endpoint)
    except MalformedReview:
        return
    json.loads(encode_response(rendered))
    if endpoint == "/validate/pods":
        assert "patch" not in rendered["response"]


# VMI-shaped objects: the paths we touch drawn from meaningful values and junk, plus foreign fields.

counts = st.integers(min_value=-1, max_value=12) | st.sampled_from(
    [2.0, 1.5, "2", True, None, 10**30, 1025]
)
entries = st.one_of(
    st.fixed_dictionaries(
        {"className": st.sampled_from([*CLASS_NAMES, "no-such-class", "Bad_Name"])},
        optional={"count": counts},
    ),
    st.fixed_dictionaries(
        {"name": st.sampled_from([*RESOURCES, "other.example/gpu"])}, optional={"count": counts}
    ),
    json_values,
)
annotation_values = st.one_of(
    st.lists(entries, max_size=4).map(json.dumps),
    st.lists(
        st.fixed_dictionaries(
            {"className": st.sampled_from(CLASS_NAMES)}, optional={"count": st.integers(1, 3)}
        ),
        min_size=1,
        max_size=3,
    ).map(json.dumps),
    st.text(max_size=20),
    json_values.map(json.dumps),
)
foreign_keys = st.text(min_size=1, max_size=8).filter(lambda k: k not in MANAGED_KEYS)
foreign = st.dictionaries(foreign_keys, json_values, max_size=2)
device_entries = st.fixed_dictionaries(
    {"name": st.text(max_size=6), "deviceName": st.sampled_from([*RESOURCES, "other.example/gpu"])}
)
volumes = st.sampled_from(
    [
        {"name": "root", "containerDisk": {"image": "example.org/guest:1"}},
        {"name": "gpulicense", "emptyDisk": {"capacity": "1Gi"}},
        {"name": "lic", "secret": {"secretName": "gpuclass-license-example-licensed-vgpu"}},
        *(
            {
                "name": "gpulicense",
                "secret": {"secretName": f"gpuclass-license-{n}", "volumeLabel": "GPULICENSE"},
            }
            for n in LICENSED
        ),
    ]
)
disks = st.sampled_from(
    [
        {"name": "root", "disk": {"bus": "virtio"}},
        {"name": "gpulicense", "serial": "GPULICENSE", "disk": {"bus": "virtio"}},
        {"name": "gpulicense", "cdrom": {}},
    ]
)


def with_foreign(base: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    return st.builds(lambda b, f: {**f, **b}, base, foreign)


def optional_lists(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {}, optional={k: st.lists(v, max_size=3) for k, v in fields.items()}
    )


devices = with_foreign(
    optional_lists(
        gpus=device_entries | json_values, disks=disks | json_values, hostDevices=device_entries
    )
)
resources = st.fixed_dictionaries(
    {},
    optional={
        section: st.dictionaries(st.sampled_from([*RESOURCES, "memory"]), st.just("1"), max_size=2)
        for section in ("requests", "limits")
    },
)
domain = with_foreign(
    st.fixed_dictionaries({}, optional={"devices": devices, "resources": resources})
)
spec = with_foreign(
    st.fixed_dictionaries(
        {},
        optional={
            "domain": domain,
            "tolerations": st.lists(st.sampled_from(CLASS_TOLERATIONS) | json_values, max_size=3),
            "volumes": st.lists(volumes | json_values, max_size=3),
        },
    )
)
metadata = st.fixed_dictionaries(
    {"name": st.just("vm")},
    optional={
        "namespace": st.sampled_from(
            ["tenant-a", "tenant-a-b", "tenant-root", "tenant-c", "default"]
        ),
        "annotations": st.builds(
            lambda other, sel: {**other, **({ANN: sel} if sel is not None else {})},
            st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=2),
            st.none() | annotation_values,
        ),
        "labels": st.sampled_from([{}, {"cluster.x-k8s.io/cluster-name": "pool"}]),
    },
)
vmis = with_foreign(
    st.fixed_dictionaries(
        {
            "apiVersion": st.just("kubevirt.io/v1"),
            "kind": st.just("VirtualMachineInstance"),
            "metadata": metadata,
        },
        optional={"spec": spec},
    )
)


# Objects most of which resolve: an available class selected, no raw GPU request, junk elsewhere.
AVAILABLE = sorted(
    n
    for n, o in CATALOG.offers.items()
    if o.record.spec and not o.record.deleting and not o.conflict_with and o.permitted
)
resolvable_devices = with_foreign(optional_lists(disks=disks | json_values))
resolvable_vmis = st.builds(
    lambda base, sel, dev, rest: {
        **base,
        "metadata": {
            "name": "vm",
            "namespace": "tenant-root",
            "annotations": {ANN: json.dumps(sel)},
        },
        "spec": {**rest, "domain": {**rest.get("domain", {}), "devices": dev}},
    },
    foreign,
    st.lists(
        st.fixed_dictionaries(
            {"className": st.sampled_from(AVAILABLE)}, optional={"count": st.integers(1, 2)}
        ),
        min_size=1,
        max_size=3,
    ),
    resolvable_devices,
    with_foreign(
        st.fixed_dictionaries(
            {},
            optional={
                "domain": foreign,
                "tolerations": st.lists(
                    st.sampled_from(CLASS_TOLERATIONS) | json_values, max_size=3
                ),
                "volumes": st.lists(volumes | json_values, max_size=2),
            },
        )
    ),
)


def vmi_review(
    obj: dict[str, Any], *, operation: str = "CREATE", old: Any = None
) -> dict[str, Any]:
    request: dict[str, Any] = {
        "uid": "u",
        "kind": {"group": "kubevirt.io", "version": "v1", "kind": "VirtualMachineInstance"},
        "operation": operation,
        "object": obj,
    }
    if old is not None:
        request["oldObject"] = old
    return review_body(request)


def patch_of(rendered: dict[str, Any]) -> list[dict[str, Any]]:
    response = rendered["response"]
    if "patch" not in response:
        assert "patchType" not in response
        return []
    assert response["patchType"] == "JSONPatch" and response["allowed"] is True
    ops: list[dict[str, Any]] = json.loads(base64.b64decode(response["patch"]))
    assert ops, "a patch is sent only when there are operations"
    return ops


def _get(doc: Any, path: tuple[str, ...]) -> Any:
    for part in path:
        if not isinstance(doc, dict) or part not in doc:
            return None
        doc = doc[part]
    return doc


def without_our_paths(doc: dict[str, Any], original: dict[str, Any]) -> dict[str, Any]:
    """`doc` minus our lists, and minus parents we created that hold nothing else."""
    doc = copy.deepcopy(doc)
    for path in OUR_LISTS:
        parent = _get(doc, path[:-1])
        if isinstance(parent, dict):
            parent.pop(path[-1], None)
    for parent_path in OUR_PARENTS:
        parent = _get(doc, parent_path[:-1]) if len(parent_path) > 1 else doc
        key = parent_path[-1]
        if (
            isinstance(parent, dict)
            and parent.get(key) == {}
            and _get(original, parent_path) is None
        ):
            del parent[key]
    return doc


def check_patch(obj: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    for op in ops:
        assert op["op"] == "add", op
        assert op["path"] in ALLOWED_PATHS, op
        if not op["path"].endswith("/-") and op["path"] not in {
            "/" + "/".join(p) for p in OUR_LISTS
        }:
            # A parent is added only where it was missing.
            assert _get(obj, tuple(op["path"].split("/")[1:])) is None, op
    patched: dict[str, Any] = jsonpatch.apply_patch(obj, ops)
    assert without_our_paths(patched, obj) == without_our_paths(obj, obj), (
        "foreign fields must survive"
    )
    for path in OUR_LISTS:
        before, after = _get(obj, path), _get(patched, path)
        if isinstance(before, list):
            assert after[: len(before)] == before, f"{path}: existing items removed or reordered"
    return patched


@PROFILE
@given(vmis | resolvable_vmis)
def test_vmi_create_patches_are_narrow_and_idempotent(obj: dict[str, Any]) -> None:
    original = copy.deepcopy(obj)
    rendered = answer(vmi_review(obj))
    assert obj == original, "admission never mutates the request object"
    assert rendered is not None, "a well-formed VMI review is never malformed"
    ops = patch_of(rendered)
    event("patched" if ops else "allowed" if rendered["response"]["allowed"] else "denied")
    if not ops:
        return
    patched = check_patch(obj, ops)
    again = answer(vmi_review(patched))
    assert again is not None
    assert again["response"]["allowed"] is True
    assert patch_of(again) == [], "resolving an already resolved VMI yields no operations"


@PROFILE
@given(vmis, vmis | json_values)
def test_vmi_update_never_patches(obj: dict[str, Any], old: Any) -> None:
    rendered = answer(vmi_review(obj, operation="UPDATE", old=old))
    if old is not None and not isinstance(old, dict):
        event("oldObject not an object: malformed review")
        assert rendered is None, "an oldObject that is not an object is a client error"
        return
    assert rendered is not None
    assert patch_of(rendered) == []


@PROFILE
@given(
    json_objects,
    st.none() | annotation_values,
    st.lists(st.sampled_from(CLASS_TOLERATIONS) | json_values, max_size=3) | st.none(),
)
def test_launcher_pod_patch_touches_only_tolerations(
    extra_spec: dict[str, Any], selection: str | None, tolerations: list[Any] | None
) -> None:
    spec: dict[str, Any] = {k: v for k, v in extra_spec.items() if k != "tolerations"}
    if tolerations is not None:
        spec["tolerations"] = tolerations
    meta: dict[str, Any] = {"labels": {"kubevirt.io": "virt-launcher"}}
    if selection is not None:
        meta["annotations"] = {ANN: selection}
    pod = {"metadata": meta, "spec": spec}
    body = review_body(
        {
            "uid": "u",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:cozy-kubevirt:kubevirt-controller"},
            "object": pod,
        }
    )
    rendered = answer(body)
    assert rendered is not None and rendered["response"]["allowed"] is True, (
        "a launcher is never refused"
    )
    ops = patch_of(rendered)
    assert {op["path"] for op in ops} <= {"/spec/tolerations", "/spec/tolerations/-"}
    patched = jsonpatch.apply_patch(pod, ops)
    assert {k: v for k, v in patched["spec"].items() if k != "tolerations"} == {
        k: v for k, v in spec.items() if k != "tolerations"
    }
    assert patched["metadata"] == meta
    if isinstance(tolerations, list):
        assert patched["spec"]["tolerations"][: len(tolerations)] == tolerations


@pytest.mark.parametrize("name", CLASS_NAMES)
def test_every_catalog_class_resolves_idempotently(name: str) -> None:
    """Deterministic companion to the property: each class of the fixture catalog once."""
    obj = {
        "metadata": {
            "name": "vm",
            "namespace": "tenant-a",
            "annotations": {ANN: json.dumps([{"className": name}])},
        },
        "spec": {"domain": {"devices": {}}},
    }
    rendered = answer(vmi_review(obj))
    assert rendered is not None
    ops = patch_of(rendered)
    if ops:
        patched = check_patch(obj, ops)
        assert patch_of(answer(vmi_review(patched)) or {"response": {}}) == []
