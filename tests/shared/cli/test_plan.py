"""`gpuclass plan` over a table of catalog changes, each expected impact written from the contract.

The cluster: one node with four units of `a.example.com/whole` and two of `b.example.com/other`,
KubeVirt permitting a, b and c; classes `whole` (a) and `other` (b); a running VMI of tenant-a
holding one `whole` unit; VirtualMachines `train` (two `whole`), `small` (one `whole`) and `raw`
(a raw `b.example.com/other` GPU, no class). The expected impacts below come from the product
page (docs/contract.md): maxCount limits units per VM (4.x), identity fields are immutable and a new
class is the advice (5), a missing class refuses a class-based start (6), the class that already
uses a resource keeps it and the newcomer reports ResourceNameConflict (6), a running VMI keeps its
devices until it stops, a removed class in use waits for its VMs (the in-use finalizer).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuclass.shared.cli.main import main
from gpuclass.shared.cli.plan import Plan, Proposed, plan
from gpuclass.shared.core.base import names
from gpuclass.shared.core.model.snapshot import SnapshotBuilder
from gpuclass.shared.core.status.catalog import Policy
from tests.builders import gpuclass, kubevirt, namespace, node, vmi

A, B, C = "a.example.com/whole", "b.example.com/other", "c.example.com/new"


def vm(
    name: str, ns: str, selection: list[dict[str, Any]] | None, *, raw: str = ""
) -> dict[str, Any]:
    annotations = {names.SELECTION_ANNOTATION: json.dumps(selection)} if selection else {}
    devices = {"gpus": [{"name": "g1", "deviceName": raw}]} if raw else {}
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "template": {
                "metadata": {"annotations": annotations},
                "spec": {"domain": {"devices": devices}},
            }
        },
    }


CLASSES = [
    gpuclass("whole", A, created="2026-01-01T00:00:00Z"),
    gpuclass("other", B, created="2026-01-02T00:00:00Z"),
]
CLUSTER = [
    node("n1", {A: 4, B: 2}),
    kubevirt(A, B, C),
    namespace("tenant-a"),
    vmi("running", "tenant-a", classes=["whole"], devices=[A]),
]
VMS = [
    vm("train", "tenant-a", [{"className": "whole", "count": 2}]),
    vm("small", "tenant-a", [{"className": "whole"}]),
    vm("raw", "tenant-b", None, raw=B),
]


def snapshot() -> Any:
    return SnapshotBuilder().add_all(copy.deepcopy(CLASSES + CLUSTER))


def proposal(*objs: dict[str, Any]) -> list[Proposed]:
    return [Proposed(o, f"catalog/{o['metadata']['name']}.yaml") for o in objs]


def edited(name: str, **spec: Any) -> dict[str, Any]:
    obj = copy.deepcopy(next(c for c in CLASSES if c["metadata"]["name"] == name))
    obj["spec"].update(spec)
    return obj


def run(*objs: dict[str, Any]) -> Plan:
    return plan(snapshot(), proposal(*objs), vms=VMS, policy=Policy(), now="2026-12-01T00:00:00Z")


def by_name(p: Plan) -> dict[str, Any]:
    return {c.name: c for c in p.classes}


def test_the_same_catalog_changes_nothing() -> None:
    p = run(*CLASSES)
    assert {c.change for c in p.classes} == {"unchanged"}
    assert p.vms == [] and not p.fails(("refused", "start-refused", "start-changes"))
    assert p.summary()["classesChanged"] == 0


def test_a_lower_max_count_refuses_the_next_start_of_a_vm_above_it() -> None:
    p = run(edited("whole", maxCount=1), CLASSES[1])
    whole = by_name(p)["whole"]
    assert whole.change == "changed" and whole.fields == ("maxCount",) and not whole.refused
    assert whole.running == ("tenant-a/running",), "the running VMI is named"
    assert "until they stop" in whole.running_effect
    assert [(v.name, v.impact) for v in p.vms] == [("train", "start-refused")]
    assert any("1" in cause for cause in p.vms[0].causes)
    assert p.fails(("start-refused",)) and not p.fails(("refused",))


def test_an_identity_change_is_refused_with_the_advice_and_changes_nothing_else() -> None:
    p = run(edited("whole", model="m2"), CLASSES[1])
    whole = by_name(p)["whole"]
    assert whole.refused and any("spec.model" in r for r in whole.refused)
    assert "new class" in whole.advice
    assert whole.before == whole.after, "refused: the stored class stays"
    assert p.vms == [] and p.fails(("refused",))
    assert p.summary()["runningVMIsAffected"] == 0, "a refused change leaves the VMI alone"


def test_a_removed_class_in_use_waits_for_its_vmis_and_its_vms_cannot_start() -> None:
    p = run(CLASSES[1])
    whole = by_name(p)["whole"]
    assert whole.change == "removed" and whole.running == ("tenant-a/running",)
    assert "stays" in whole.running_effect
    assert {(v.name, v.impact) for v in p.vms} == {
        ("train", "start-refused"),
        ("small", "start-refused"),
    }


def test_a_new_resource_name_changes_the_next_start_but_not_the_running_vmi() -> None:
    p = run(edited("whole", source={"devicePlugin": {"resourceName": C}}), CLASSES[1])
    whole = by_name(p)["whole"]
    assert whole.change == "changed" and not whole.refused
    assert whole.after is not None and whole.after["free"] == 0, "no node offers c"
    assert {(v.name, v.impact) for v in p.vms} == {
        ("train", "start-changes"),
        ("small", "start-changes"),
    }
    assert whole.capacity_delta < 0 and p.summary()["unitsLost"] == whole.capacity_delta * -1


def test_a_second_class_on_a_used_resource_loses_the_conflict() -> None:
    dup = gpuclass("dup", A, created="2026-02-01T00:00:00Z")
    p = run(*CLASSES, dup)
    added = by_name(p)["dup"]
    assert added.change == "added" and not added.refused
    conditions = {c["type"]: c["status"] for c in added.after["conditions"]}
    assert conditions["ResourceNameConflict"] == "True"
    assert by_name(p)["whole"].before == by_name(p)["whole"].after, "the older class keeps it"


def test_inventory_names_raw_requests_and_the_class_that_offers_them(tmp_path: Path) -> None:
    from gpuclass.shared.cli.plan import inventory

    entries = inventory(snapshot(), VMS)
    assert [(e.namespace, e.name, e.device, e.classes) for e in entries] == [
        ("tenant-b", "raw", B, ("other",))
    ]


# -- the command: files in, exit codes and formats out ------------------------------------------


@pytest.fixture
def world(tmp_path: Path) -> tuple[Path, Path]:
    cluster = tmp_path / "cluster"
    cluster.mkdir()
    (cluster / "all.yaml").write_text(yaml.safe_dump_all(CLASSES + CLUSTER + VMS))
    catalog = tmp_path / "catalog"
    catalog.mkdir()
    for obj in CLASSES:
        (catalog / f"{obj['metadata']['name']}.yaml").write_text(yaml.safe_dump(obj))
    return cluster, catalog


def write(catalog: Path, obj: dict[str, Any]) -> None:
    (catalog / f"{obj['metadata']['name']}.yaml").write_text(yaml.safe_dump(obj))


@pytest.mark.parametrize(
    ("change", "fail_on", "code"),
    [
        pytest.param(None, None, 0, id="no-change"),
        pytest.param({"maxCount": 1}, None, 1, id="vm-refused-fails"),
        pytest.param({"maxCount": 1}, "refused", 0, id="only-refusals-fail"),
        pytest.param({"model": "m2"}, "refused", 1, id="refusal-fails"),
        pytest.param({"model": "m2"}, "none", 0, id="none-never-fails"),
    ],
)
def test_exit_codes(
    world: tuple[Path, Path],
    capsys: pytest.CaptureFixture[str],
    change: dict[str, Any] | None,
    fail_on: str | None,
    code: int,
) -> None:
    cluster, catalog = world
    if change:
        write(catalog, edited("whole", **change))
    extra = ["--fail-on", fail_on] if fail_on else []
    assert main(["plan", "--objects", str(cluster), *extra, str(catalog)], environ={}) == code
    assert capsys.readouterr().out.rstrip().splitlines()[-1].startswith("Plan: ")


def test_bad_input_is_exit_2(world: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    cluster, catalog = world
    (catalog / "broken.yaml").write_text("a: [")
    assert main(["plan", "--objects", str(cluster), str(catalog)], environ={}) == 2
    assert (
        main(["plan", "--objects", str(cluster), "--fail-on", "typo", str(catalog)], environ={})
        == 2
    )
    assert "gpuclass plan:" in capsys.readouterr().err


def test_github_annotations_point_at_the_manifest_line(
    world: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    cluster, catalog = world
    write(catalog, edited("whole", model="m2"))
    main(["plan", "--objects", str(cluster), "-o", "github", str(catalog)], environ={})
    errors = [line for line in capsys.readouterr().out.splitlines() if line.startswith("::error ")]
    text = (catalog / "whole.yaml").read_text().splitlines()
    line = next(i for i, t in enumerate(text, 1) if t.strip() == "name: whole")
    assert len(errors) == 1 and f"whole.yaml,line={line}," in errors[0]


def test_markdown_is_a_comment_with_the_summary_first(
    world: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    cluster, catalog = world
    write(catalog, edited("whole", maxCount=1))
    main(["plan", "--objects", str(cluster), "-o", "markdown", str(catalog)], environ={})
    out = capsys.readouterr().out
    assert out.startswith("## gpuclass plan\n\n**Plan: 1 class(es) changed")
    assert "`tenant-a/train`: next start **refused**" in out


SCHEMA = Path(__file__).resolve().parents[3] / "docs" / "plan.schema.json"


def test_json_output_matches_its_documented_schema(
    world: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    import jsonschema

    cluster, catalog = world
    write(catalog, edited("whole", maxCount=1))
    write(catalog, gpuclass("dup", A, created="2026-02-01T00:00:00Z"))
    main(["plan", "--objects", str(cluster), "-o", "json", "--inventory", str(catalog)], environ={})
    value = json.loads(capsys.readouterr().out)
    jsonschema.validate(value, json.loads(SCHEMA.read_text()))
    assert value["schemaVersion"] == 1
    assert value["summary"]["vmStartsRefused"] == 1 and value["summary"]["classesChanged"] == 2
    assert [(e["name"], e["device"]) for e in value["inventory"]] == [("raw", B)]


def test_the_schema_refuses_what_it_should() -> None:
    import jsonschema

    schema = json.loads(SCHEMA.read_text())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"schemaVersion": 1, "summary": {}}, schema)


# -- a plan is what the merge will do (issue: hostile pull requests) --------------------------------


@pytest.mark.parametrize(
    "metadata",
    [
        pytest.param({}, id="no-timestamp"),
        pytest.param(
            {"creationTimestamp": "2000-01-01T00:00:00Z"}, id="an-older-timestamp-in-the-pr"
        ),
    ],
)
def test_a_new_class_is_the_newest_whatever_the_pr_says(metadata: dict[str, Any]) -> None:
    """The API server gives a new class its creationTimestamp: it is the newest, so on a
    resource a stored class uses it loses the conflict (docs/contract.md 6.4)."""
    newcomer = gpuclass("aaa-newcomer", A)
    newcomer["metadata"].update(metadata)
    p = run(*CLASSES, newcomer)
    added = by_name(p)["aaa-newcomer"]
    conditions = {c["type"]: c["status"] for c in added.after["conditions"]}
    assert conditions["ResourceNameConflict"] == "True"
    assert by_name(p)["whole"].before == by_name(p)["whole"].after, "the stored class keeps it"
    assert p.vms == [], "no running tenant's next start changes"


def test_the_pr_cannot_delete_or_hold_a_class_through_metadata() -> None:
    """deletionTimestamp, finalizers and the rest of the server's metadata come from the
    cluster: a manifest carrying them changes nothing."""
    hostile = edited("whole", maxCount=4)  # a real change: the proposal is applied
    hostile["metadata"].update(
        {
            "deletionTimestamp": "2026-06-01T00:00:00Z",
            "finalizers": ["example.com/hold"],
            "uid": "forged",
            "generation": 99,
        }
    )
    hostile["status"] = {"free": 1000}
    p = run(hostile, CLASSES[1])
    whole = by_name(p)["whole"]
    assert whole.change == "changed" and not whole.refused
    after = {c["type"]: c["reason"] for c in whole.after["conditions"]}
    assert after["Schedulable"] != "ClassDeleting" and whole.after["free"] == 4
    assert p.vms == [], "no VM's next start is refused by a deletion the PR cannot make"


def test_plan_reads_the_vgpu_entitlement_variable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """GPUCLASS_VGPU_ENTITLED, as review and the webhook read it: with it on, a vGPU VM that
    starts today and is refused after the change is listed."""
    vgpu = gpuclass("vg", C, created="2026-01-03T00:00:00Z")
    vgpu["spec"].update({"mode": "vgpu", "profile": "p"})
    cluster = tmp_path / "cluster"
    cluster.mkdir()
    tenant = vm("desk", "tenant-a", [{"className": "vg"}])
    ns = namespace("tenant-a")
    ns["metadata"]["labels"] = {names.VGPU_ENTITLEMENT_LABEL: "true"}
    (cluster / "all.yaml").write_text(
        yaml.safe_dump_all(
            [*CLASSES, vgpu, node("n1", {A: 4, C: 2}), kubevirt(A, B, C), ns, tenant]
        )
    )
    catalog = tmp_path / "catalog"
    catalog.mkdir()
    for obj in CLASSES:  # the change removes the vGPU class
        write(catalog, obj)
    args = ["plan", "--objects", str(cluster), "-o", "json", str(catalog)]
    off = main(args, environ={})
    vms_off = json.loads(capsys.readouterr().out)["vms"]
    on = main(args, environ={"GPUCLASS_VGPU_ENTITLED": "true"})
    vms_on = json.loads(capsys.readouterr().out)["vms"]
    assert (off, vms_off) == (0, []), "not entitled: refused before and after, no change"
    assert on == 1 and [(v["name"], v["impact"]) for v in vms_on] == [("desk", "start-refused")]
    assert main([*args[:1], "--vgpu-entitled", *args[1:]], environ={}) == 1
    capsys.readouterr()
    assert main(args, environ={"GPUCLASS_VGPU_ENTITLED": "maybe"}) == 2
    assert "GPUCLASS_VGPU_ENTITLED" in capsys.readouterr().err


def test_an_object_under_two_paths_counts_once_with_a_warning(
    world: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster, catalog = world
    again = tmp_path / "again.yaml"
    again.write_text(yaml.safe_dump(VMS[0]))
    write(catalog, edited("whole", maxCount=1))
    args = ["plan", "--objects", str(cluster), "--objects", str(again), "-o", "json"]
    main([*args, str(catalog)], environ={})
    captured = capsys.readouterr()
    names_listed = [v["name"] for v in json.loads(captured.out)["vms"]]
    assert names_listed == ["train"]
    assert "VirtualMachine tenant-a/train is given 2 times" in captured.err
    assert str(again) in captured.err


@pytest.mark.parametrize(
    "spec_text",
    [
        pytest.param("1: x", id="integer-key"),
        pytest.param("null: x", id="null-key"),
        pytest.param("2.5: y", id="float-key"),
    ],
)
def test_keys_that_are_not_strings_are_a_refusal_not_a_traceback(
    world: tuple[Path, Path], capsys: pytest.CaptureFixture[str], spec_text: str
) -> None:
    cluster, catalog = world
    text_ = yaml.safe_dump(edited("whole")).replace("spec:\n", f"spec:\n  {spec_text}\n", 1)
    (catalog / "whole.yaml").write_text(text_)
    code = main(["plan", "--objects", str(cluster), str(catalog)], environ={})
    out = capsys.readouterr().out
    assert code == 1 and "REFUSED" in out, out


def test_a_deleting_class_cannot_start_in_status_explain_and_admission_alike() -> None:
    """The differential check of one class state by the three readers (the property test
    covers every state): status's Schedulable, explain's answer, the webhook's decision."""
    from gpuclass.shared.cli.explain import explain_class
    from gpuclass.shared.core.admission import mutate_vmi
    from gpuclass.shared.core.admission.decisions import Denied
    from gpuclass.shared.core.status.availability import compute_all
    from gpuclass.shared.core.status.catalog import build_catalog
    from tests.builders import admission_request, selecting_vmi

    deleting = gpuclass("whole", A, created="2026-01-01T00:00:00Z")
    deleting["metadata"]["deletionTimestamp"] = "2026-06-01T00:00:00Z"
    world = SnapshotBuilder().add_all(
        [deleting, node("n1", {A: 4}), kubevirt(A), namespace("tenant-a")]
    )
    status = compute_all(world, license_namespace="cozy-system", now="2026-12-01T00:00:00Z")[
        "whole"
    ]
    schedulable = next(c for c in status["conditions"] if c["type"] == "Schedulable")
    assert (schedulable["status"], schedulable["reason"]) == ("False", "ClassDeleting")
    assert not explain_class(world, "whole").can_start
    catalog = build_catalog(world, Policy(), figures="computed")
    request = admission_request(
        operation="CREATE",
        namespace="tenant-a",
        object=selecting_vmi("tenant-a", [{"className": "whole"}]),
    )
    assert isinstance(mutate_vmi.admit(request, catalog), Denied)
