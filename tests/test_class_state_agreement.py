"""One class state, four readers: `gpuclass status`, `gpuclass explain`, `gpuclass plan` and the
webhook agree on whether a VM of a class can start (the differential property of issue
"hostile pull requests": they call one function, and this proves they read it the same way).

Worlds are generated: one to three classes, each in any state the contract names (deleting,
sharing a resource with an older class, not permitted by the KubeVirt CR, licensed with its
source Secret present or not, vGPU or passthrough, with free units or not), a tenant namespace
entitled or not and the platform's vGPU setting on or off. For each class, a VMI of one unit:

- the webhook allows it exactly when docs/contract.md 4.3 and 4.5 do: the class exists, is not
  being deleted, owns its resource, is permitted, and (vGPU) the namespace is entitled;
- status says Schedulable=True exactly when the class state allows it (4.3), its license can be
  delivered (6.4) and a node has a free unit, and explain's answer for one unit is the same;
- plan, given the same catalog, computes the same status for every class as status does (the
  server's metadata, deletions and ages included), and lists no VM.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuclass.shared.cli.explain import explain_class
from gpuclass.shared.cli.plan import Proposed, plan
from gpuclass.shared.core.admission import mutate_vmi
from gpuclass.shared.core.admission.decisions import Allowed
from gpuclass.shared.core.model.snapshot import SnapshotBuilder
from gpuclass.shared.core.status.availability import compute_all
from gpuclass.shared.core.status.catalog import Catalog, Policy, build_catalog
from tests.builders import (
    admission_request,
    gpuclass,
    kubevirt,
    namespace,
    node,
    secret,
    selecting_vmi,
)

NOW = "2026-12-01T00:00:00Z"
NS = "tenant-a"
RESOURCES = ("r0.example.com/gpu", "r1.example.com/gpu", "r2.example.com/gpu")
TOKEN = {"client_configuration_token.tok": "dG9rZW4="}


@st.composite
def worlds(draw: st.DrawFn) -> dict[str, Any]:
    classes = []
    for i in range(draw(st.integers(1, 3))):
        resource = draw(st.sampled_from(RESOURCES))
        licensed = draw(st.booleans())
        vgpu = licensed or draw(st.booleans())
        obj = gpuclass(
            f"c{i}",
            resource,
            created=f"2026-0{draw(st.integers(1, 3))}-01T00:00:00Z",
            deleting=draw(st.integers(0, 4)) == 0,
            license=f"src{i}" if licensed else None,
        )
        if vgpu:
            obj["spec"].update({"mode": "vgpu", "profile": "p"})
        classes.append(obj)
    permitted = draw(st.sets(st.sampled_from(RESOURCES)))
    units = {r: draw(st.integers(0, 2)) for r in RESOURCES}
    secrets = [
        secret(f"src{i}", data=TOKEN) for i in range(len(classes)) if draw(st.integers(0, 3)) > 0
    ]
    return {
        "objects": [
            *classes,
            kubevirt(*sorted(permitted)),
            node("n1", units),
            namespace("tenant-root"),
            namespace(NS, entitled=draw(st.booleans())),
            *secrets,
        ],
        "policy": Policy(vgpu_entitled=draw(st.booleans())),
    }


def webhook_allows(name: str, catalog: Catalog) -> bool:
    """The webhook's VMI admitter on a VMI of one unit of `name` in the tenant's namespace."""
    request = admission_request(
        operation="CREATE", namespace=NS, object=selecting_vmi(NS, [{"className": name}])
    )
    return isinstance(mutate_vmi.admit(request, catalog), Allowed)


def schedulable(status: dict[str, Any]) -> tuple[str, str]:
    condition = next(c for c in status["conditions"] if c["type"] == "Schedulable")
    return condition["status"], condition["reason"]


@settings(max_examples=150, deadline=None)
@given(worlds())
def test_status_explain_plan_and_the_webhook_agree(world: dict[str, Any]) -> None:
    snapshot = SnapshotBuilder().add_all(world["objects"])
    policy: Policy = world["policy"]
    statuses = compute_all(snapshot, license_namespace=policy.license_namespace, now=NOW)
    catalog = build_catalog(snapshot, policy, figures="computed")
    classes = [o for o in world["objects"] if o.get("kind") == "GPUClass"]
    planned = plan(
        snapshot, [Proposed(o, "catalog.yaml") for o in classes], vms=[], policy=policy, now=NOW
    )
    for obj in classes:
        name = obj["metadata"]["name"]
        status = statuses[name]
        allowed = webhook_allows(name, catalog)
        record = snapshot.classes[name]
        offer = catalog.offers[name]
        vgpu = record.mode == "vgpu"
        entitled = catalog.vgpu_problem(NS) is None
        class_ok = not record.deleting and offer.conflict_with is None and offer.permitted
        assert allowed == (class_ok and (entitled or not vgpu)), (name, status, world)
        can_start, reason = schedulable(status)
        conditions = {c["type"]: c["status"] for c in status["conditions"]}
        delivered = conditions["LicenseSecretMissing"] == "False"
        assert (can_start == "True") == (class_ok and delivered and status["free"] >= 1), (
            name,
            reason,
            status,
        )
        explained = explain_class(snapshot, name, license_namespace=policy.license_namespace)
        assert explained.can_start == (can_start == "True"), (name, explained.answer, reason)
        after = next(c.after for c in planned.classes if c.name == name)
        assert after is not None and schedulable(after) == (can_start, reason)
        assert (after["free"], after["maxFreePerNode"]) == (
            status["free"],
            status["maxFreePerNode"],
        )
    assert planned.vms == []
