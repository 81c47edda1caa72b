"""The check after every mutation (docs/contract.md rule 4.11, `POST /validate/virtualmachineinstances`).

The golden fixtures `vmi-4.11-*` hold the table of verdicts; here:

- the property the rule rests on: every VMI our mutating webhook allows, once its patch is
  applied, passes the check (over every golden VMI CREATE and over generated VMIs), and what a
  later mutating webhook may add (a raw GPU entry, a license copy of another class) is refused;
- what the rule leaves alone (operations other than CREATE, the class tolerations) and how its
  messages read.

Expected verdicts come from the contract: an allowed mutation's result is, by rule 4.6, what
the selection resolves to, so the check must allow it.
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import jsonpatch
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuclass.shared.cli.reviewcmd import offline_catalog
from gpuclass.shared.core.admission.review import ENDPOINTS, VMI, review
from gpuclass.shared.core.status.catalog import Catalog, Policy
from gpuclass.webhook import paths
from tests.conftest import OBJECTS, GoldenCase, golden_cases

FINAL = "/validate/virtualmachineinstances"
MUTATE = "/mutate/virtualmachineinstances"
ANN = "gpu.cozystack.io/classes"
GPUS = "spec.domain.devices.gpus"
LICENSE_COPY = "gpuclass-license-example-licensed-vgpu"
CATALOGS = {
    entitled: offline_catalog(OBJECTS, Policy(vgpu_entitled=entitled)) for entitled in (True, False)
}
PROFILE = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _body(obj: Any, *, operation: str = "CREATE", namespace: str = "tenant-a") -> dict[str, Any]:
    request: dict[str, Any] = {
        "uid": "0b7f4c9e-final",
        "kind": {"group": "kubevirt.io", "version": "v1", "kind": "VirtualMachineInstance"},
        "operation": operation,
        "namespace": namespace,
        "object": obj,
    }
    if operation == "UPDATE":
        request["oldObject"] = obj
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def _answer(
    obj: Any, endpoint: str, *, catalog: Catalog | None = None, **kwargs: Any
) -> dict[str, Any]:
    response: dict[str, Any] = review(
        _body(obj, **kwargs), catalog or CATALOGS[True], endpoint=endpoint
    )["response"]
    return response


def _operations(response: dict[str, Any]) -> list[dict[str, Any]]:
    if "patch" not in response:
        return []
    operations: list[dict[str, Any]] = json.loads(base64.b64decode(response["patch"]))
    return operations


def _vmi(selection: Any = None, **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "vm", "namespace": "tenant-a"}
    if selection is not None:
        meta["annotations"] = {ANN: json.dumps(selection)}
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": meta,
        "spec": {
            "domain": {"devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]}},
            "volumes": [{"name": "root", "containerDisk": {"image": "example.org/guest:1"}}],
            **spec,
        },
    }


def _mutated(obj: dict[str, Any], catalog: Catalog | None = None) -> dict[str, Any] | None:
    """The object as our mutating webhook leaves it, or None when it refuses."""
    response = _answer(obj, MUTATE, catalog=catalog, namespace=obj["metadata"]["namespace"])
    if not response["allowed"]:
        return None
    patched: dict[str, Any] = jsonpatch.apply_patch(obj, _operations(response))
    return patched


def test_the_endpoint_admits_vmis_and_is_served_by_the_webhook() -> None:
    """Contract section 3: the path, its kind, and the webhook's route constant agree."""
    assert paths.VALIDATE_VMIS == FINAL
    assert ENDPOINTS[FINAL].kind == VMI
    assert ENDPOINTS[MUTATE].kind == VMI
    # A review without an endpoint is still answered as the mutating webhook answers it.
    resolved = _answer(_vmi([{"className": "example-whole-gpu"}]), MUTATE)
    plain = review(_body(_vmi([{"className": "example-whole-gpu"}])), CATALOGS[True])
    assert plain["response"] == resolved


# -- the property: our own mutation's output passes -----------------------------------------------


def _allowed_golden_vmi_creates() -> list[GoldenCase]:
    return [
        case
        for case in golden_cases()
        if case.request["request"]["kind"]["kind"] == "VirtualMachineInstance"
        and case.request["request"]["operation"] == "CREATE"
        and case.endpoint in (None, MUTATE)
        and case.expected()["response"]["allowed"]
    ]


ALLOWED = _allowed_golden_vmi_creates()


def test_the_golden_table_has_mutations_to_check() -> None:
    patched = [c for c in ALLOWED if "patch" in c.expected()["response"]]
    assert len(ALLOWED) >= 20 and len(patched) >= 12


def _patched(case: GoldenCase) -> dict[str, Any]:
    request = case.request["request"]
    operations = _operations(case.expected()["response"])
    body: dict[str, Any] = copy.deepcopy(case.request)
    body["request"]["object"] = jsonpatch.apply_patch(request["object"], operations)
    return body


@pytest.mark.parametrize("case", ALLOWED, ids=[c.name for c in ALLOWED])
def test_every_vmi_our_mutation_allows_passes_the_check_once_patched(case: GoldenCase) -> None:
    body = _patched(case)
    response = review(body, CATALOGS[case.vgpu_entitled], endpoint=FINAL)["response"]
    assert response["allowed"] is True, response.get("status", {}).get("message")
    assert "patch" not in response and "warnings" not in response


@pytest.mark.parametrize("case", ALLOWED, ids=[c.name for c in ALLOWED])
def test_a_raw_gpu_added_after_our_mutation_is_refused(case: GoldenCase) -> None:
    """What a hostile mutating webhook after ours could add: a GPU entry of a catalog resource.
    Beside classes it is never the resolution (rule 4.6), without classes it is a raw entry
    of the tenant's own (allowed when the resource needs no entitlement, rule 4.5)."""
    body = _patched(case)
    obj = body["request"]["object"]
    devices = obj.setdefault("spec", {}).setdefault("domain", {}).setdefault("devices", {})
    devices.setdefault("gpus", []).append({"name": "gpu99", "deviceName": "example.com/whole-gpu"})
    response = review(body, CATALOGS[case.vgpu_entitled], endpoint=FINAL)["response"]
    selection = (obj["metadata"].get("annotations") or {}).get(ANN, "[]")
    if '"className"' in selection:
        assert response["allowed"] is False
        causes = response["status"]["details"]["causes"]
        assert [(c["field"], c["reason"]) for c in causes] == [(GPUS, "GPUEntriesMismatch")]
        assert response["status"]["code"] == 422
    else:
        assert response["allowed"] is True


@pytest.mark.parametrize("case", ALLOWED, ids=[c.name for c in ALLOWED])
def test_a_foreign_license_volume_added_after_our_mutation_is_refused(case: GoldenCase) -> None:
    """Rule 4.8 on the final object: a license copy named by a volume that is not the exact
    license volume of the VMI's own licensed class (here under another volume name)."""
    body = _patched(case)
    obj = body["request"]["object"]
    obj.setdefault("spec", {}).setdefault("volumes", []).append(
        {"name": "stolen", "secret": {"secretName": LICENSE_COPY}}
    )
    response = review(body, CATALOGS[case.vgpu_entitled], endpoint=FINAL)["response"]
    assert response["allowed"] is False
    reasons = {c["reason"] for c in response["status"]["details"]["causes"]}
    assert reasons == {"LicenseHandMounted"}
    assert response["status"]["code"] == 403


# Generated VMIs: selections of every catalog class (usable or not), raw entries, license
# volumes and disks, tolerations, in entitled and unentitled namespaces.
CLASS_NAMES = sorted(CATALOGS[True].offers)
RESOURCES = sorted(CATALOGS[True].resources)
LICENSED = sorted(
    n for n, o in CATALOGS[True].offers.items() if o.record.spec and o.record.spec.license
)
selections = st.none() | st.lists(
    st.fixed_dictionaries(
        {"className": st.sampled_from([*CLASS_NAMES, "no-such-class"])},
        optional={"count": st.integers(min_value=1, max_value=3)},
    ),
    min_size=1,
    max_size=3,
)
devices = st.fixed_dictionaries(
    {"name": st.sampled_from(["gpu1", "gpu2", "raw"]), "deviceName": st.sampled_from(RESOURCES)}
)
volumes = st.sampled_from(
    [
        {"name": "data", "emptyDisk": {"capacity": "1Gi"}},
        {"name": "stolen", "secret": {"secretName": LICENSE_COPY}},
        *(
            {
                "name": "gpulicense",
                "secret": {"secretName": f"gpuclass-license-{n}", "volumeLabel": "GPULICENSE"},
            }
            for n in LICENSED
        ),
    ]
)
generated = st.fixed_dictionaries(
    {
        "selection": selections,
        "namespace": st.sampled_from(["tenant-a", "tenant-c", "tenant-root", "default"]),
        "gpus": st.lists(devices, max_size=2) | st.just([]),
        "host_devices": st.lists(devices, max_size=1),
        "volumes": st.lists(volumes, max_size=2, unique_by=lambda v: v["name"]),
        "license_disk": st.booleans(),
        "tolerations": st.lists(
            st.sampled_from(
                [{"key": "gpu.example.com/dedicated", "operator": "Exists", "effect": "NoSchedule"}]
            ),
            max_size=1,
        ),
        "worker": st.booleans(),
        "entitled": st.booleans(),
    }
)

# Mostly resolvable: usable classes, one unit each, nothing raw beside them.
USABLE = sorted(
    n
    for n, o in CATALOGS[True].offers.items()
    if o.record.spec and not o.record.deleting and not o.conflict_with and o.permitted
)
resolvable = generated.map(
    lambda d: {**d, "gpus": [], "host_devices": [], "entitled": True, "worker": False}
).flatmap(
    lambda d: st.lists(st.sampled_from(USABLE), min_size=1, max_size=2, unique=True).map(
        lambda names: {
            **d,
            "selection": [{"className": n} for n in names],
            "namespace": "tenant-a",
            "volumes": [v for v in d["volumes"] if v["name"] != "stolen"],
        }
    )
)


def _generated_vmi(drawn: dict[str, Any]) -> dict[str, Any]:
    obj = _vmi(drawn["selection"])
    obj["metadata"]["namespace"] = drawn["namespace"]
    if drawn["worker"]:
        obj["metadata"]["labels"] = {"capk.cluster.x-k8s.io/kubevirt-machine-name": "pool-1"}
    spec = obj["spec"]
    devices = spec["domain"]["devices"]
    if drawn["gpus"]:
        devices["gpus"] = copy.deepcopy(drawn["gpus"])
    if drawn["host_devices"]:
        devices["hostDevices"] = copy.deepcopy(drawn["host_devices"])
    if drawn["license_disk"]:
        devices["disks"].append(
            {"name": "gpulicense", "serial": "GPULICENSE", "disk": {"bus": "virtio"}}
        )
    spec["volumes"] += copy.deepcopy(drawn["volumes"])
    if drawn["tolerations"]:
        spec["tolerations"] = copy.deepcopy(drawn["tolerations"])
    return obj


@PROFILE
@given(generated | resolvable)
def test_generated_vmis_our_mutation_allows_pass_the_check_once_patched(
    drawn: dict[str, Any],
) -> None:
    catalog = CATALOGS[drawn["entitled"]]
    obj = _generated_vmi(drawn)
    final = _answer(obj, FINAL, catalog=catalog, namespace=drawn["namespace"])
    assert "patch" not in final and "warnings" not in final
    patched = _mutated(obj, catalog)
    if patched is None:
        # What our mutation refuses, the check refuses too: it judges the same rules.
        assert final["allowed"] is False
        return
    answer = _answer(patched, FINAL, catalog=catalog, namespace=drawn["namespace"])
    assert answer["allowed"] is True, answer.get("status", {}).get("message")
    # And what the check allows is resolved: our mutation has nothing left to add to it but
    # (perhaps) class tolerations, which the check does not read back.
    if final["allowed"]:
        again = _answer(obj, MUTATE, catalog=catalog, namespace=drawn["namespace"])
        paths_added = {op["path"] for op in _operations(again)}
        assert paths_added <= {"/spec/tolerations", "/spec/tolerations/-"}, paths_added


# -- what the rule leaves alone, and how it reads --------------------------------------------------


WHOLE = [{"className": "example-whole-gpu", "count": 2}]
WHOLE_GPUS = [
    {"name": "gpu1", "deviceName": "example.com/whole-gpu"},
    {"name": "gpu2", "deviceName": "example.com/whole-gpu"},
]


@pytest.mark.parametrize("operation", ["UPDATE", "DELETE", "CONNECT"])
def test_only_create_is_judged(operation: str) -> None:
    unresolved = _vmi(WHOLE)
    assert _answer(unresolved, FINAL, operation=operation) == {
        "uid": "0b7f4c9e-final",
        "allowed": True,
    }


def test_a_create_without_an_object_is_refused_as_invalid() -> None:
    body = _body(None)
    response = review(body, CATALOGS[True], endpoint=FINAL)["response"]
    assert response["allowed"] is False and response["status"]["code"] == 422
    assert response["status"]["details"]["causes"][0]["field"] == "object"


def test_a_gpu_entry_removed_is_named_with_what_the_selection_resolves_to() -> None:
    obj = _vmi(WHOLE)
    obj["spec"]["domain"]["devices"]["gpus"] = WHOLE_GPUS[:1]
    status = _answer(obj, FINAL)["status"]
    assert status["code"] == 422
    assert status["message"] == (
        "spec.domain.devices.gpus: must be exactly what the selected classes resolve to "
        "(gpu1=example.com/whole-gpu, gpu2=example.com/whole-gpu) but holds "
        "(gpu1=example.com/whole-gpu): the selection was not resolved, or another mutating "
        "webhook changed the GPU entries after gpuclass resolved it"
    )


def test_a_long_list_of_entries_is_summed_up_in_the_message() -> None:
    obj = _vmi([{"className": "example-whole-gpu", "count": 6}])
    message = _answer(obj, FINAL)["status"]["message"]
    assert "gpu4=example.com/whole-gpu, ... 6 in all) but holds (none)" in message
    assert "gpu5" not in message


def test_one_cause_for_the_gpu_entries_not_two() -> None:
    """The mutating rule's own cause for entries beside classes is replaced, not repeated."""
    obj = _vmi(WHOLE)
    obj["spec"]["domain"]["devices"]["gpus"] = [*WHOLE_GPUS, "not an entry"]
    causes = _answer(obj, FINAL)["status"]["details"]["causes"]
    assert [(c["field"], c["reason"]) for c in causes] == [(GPUS, "GPUEntriesMismatch")]
    assert "an entry that is not an object" in causes[0]["message"]


def test_a_license_volume_of_another_shape_under_the_reserved_name_is_one_cause() -> None:
    """A volume named `gpulicense` that is not the license volume: judge_create's ReservedName
    (and rule 4.8 for the copy it names), not also a missing license volume."""
    obj = _vmi([{"className": "example-licensed-vgpu"}])
    obj["spec"]["domain"]["devices"]["gpus"] = [
        {"name": "gpu1", "deviceName": "example.com/licensed-vgpu"}
    ]
    obj["spec"]["domain"]["devices"]["disks"].append(
        {"name": "gpulicense", "serial": "GPULICENSE", "disk": {"bus": "virtio"}}
    )
    obj["spec"]["volumes"].append({"name": "gpulicense", "secret": {"secretName": LICENSE_COPY}})
    causes = _answer(obj, FINAL)["status"]["details"]["causes"]
    assert sorted((c["field"], c["reason"]) for c in causes) == [
        ("spec.volumes[1]", "ReservedName"),
        ("spec.volumes[1].secret.secretName", "LicenseHandMounted"),
    ]


def test_a_class_tolerations_are_not_read_back() -> None:
    obj = _vmi(WHOLE)
    obj["spec"]["domain"]["devices"]["gpus"] = copy.deepcopy(WHOLE_GPUS)
    assert "tolerations" not in obj["spec"]
    assert _answer(obj, FINAL)["allowed"] is True
