"""`gpuclass explain` (docs/contract.md 7.6): golden outputs on the example cluster, and the pure rows.

Each golden case is the CLI's output on `examples/`, kept under tests/fixtures/explain/<case>.txt
and regenerated with `--update-fixtures` (review the diff). Beside every golden file,
tests/fixtures/explain/expected.yaml holds what a person derives from the contract by hand: the
exit code, the final answer, and each node's verdict; the golden output must agree with it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuclass.shared.cli.explain import explain_class
from gpuclass.shared.cli.explainmanifest import explain_manifest
from gpuclass.shared.cli.main import main
from gpuclass.shared.core.model.snapshot import SnapshotBuilder
from tests.builders import gpuclass, kubevirt, node, pod

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "explain"
EXPECTED: dict[str, dict[str, Any]] = yaml.safe_load((FIXTURES / "expected.yaml").read_text())
OBJECTS = ["--objects", str(ROOT / "examples")]
VERDICTS = (
    "fits",
    "tooFewFree",
    "noFreeUnits",
    "noVirtHandler",
    "notReady",
    "cordoned",
    "virtHandlerNotReady",
    "noKubeVirtDevices",
    "untolerated",
    "noUnits",
)


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["explain", *args])
    out, err = capsys.readouterr()
    return code, out, err


def node_verdicts(text: str) -> dict[str, str]:
    """NODE and VERDICT of every table row, as a reader picks them out."""
    rows = re.findall(r"^  (\S+)\s+(?:\d+|-)\s+\d+\s+(\S+)\s", text, re.M)
    return {name: verdict for name, verdict in rows if verdict in VERDICTS}


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_golden_output(
    case: str, capsys: pytest.CaptureFixture[str], update_fixtures: bool, monkeypatch: Any
) -> None:
    monkeypatch.chdir(ROOT)
    expected = EXPECTED[case]
    code, out, err = run([*expected["args"], *OBJECTS], capsys)
    golden = FIXTURES / f"{case}.txt"
    if update_fixtures:
        golden.write_text(out)
    assert out == golden.read_text(), f"output differs from {golden.name} (--update-fixtures)"
    # The independent check: what the contract says, written by hand.
    assert (code, err) == (expected["exit"], "")
    assert out.rstrip("\n").splitlines()[-1] == f"answer: {expected['answer']}"
    assert node_verdicts(out) == expected["nodes"]


def test_every_golden_file_has_a_hand_written_row() -> None:
    files = {p.stem for p in FIXTURES.glob("*.txt")}
    assert files == set(EXPECTED)


def test_json_output_is_the_same_answer(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["example-whole-gpu", "--count", "4", "-o", "json", *OBJECTS], capsys)
    value = json.loads(out)
    assert code == 1 and value["canStart"] is False
    assert value["answer"] == EXPECTED["whole-4"]["answer"]
    assert {n["node"]: n["verdict"] for n in value["nodes"]} == EXPECTED["whole-4"]["nodes"]
    assert value["condition"]["reason"] == "Fragmented"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param([], "give a CLASS or --manifest", id="nothing-to-explain"),
        pytest.param(["c"], "give --objects PATH (offline) or --kubeconfig", id="no-source"),
        pytest.param(["c", "--count", "0", *OBJECTS], "--count must be at least 1", id="count-0"),
        pytest.param(
            ["c", *OBJECTS, "--kubeconfig", "/nonexistent"], "not both", id="files-and-cluster"
        ),
        pytest.param(
            ["c", "--kubeconfig", "/nonexistent/kubeconfig"],
            "cannot use",
            id="unusable-kubeconfig",
        ),
    ],
)
def test_unusable_input_exits_2(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(args, capsys)
    assert (code, out) == (2, "")
    assert message in err


# -- the pure function on small clusters ------------------------------------------------------------

R, S = "example.com/gpu", "example.com/other"
TAINT = {"key": "gpu.example.com/dedicated", "value": "true", "effect": "NoSchedule"}
TOLERATE = {"key": "gpu.example.com/dedicated", "operator": "Exists", "effect": "NoSchedule"}


def snapshot(*objects: dict[str, Any]) -> Any:
    return SnapshotBuilder().add_all([kubevirt(R, S), *objects])


@pytest.mark.parametrize(
    ("objects", "count", "rows", "answer"),
    [
        pytest.param(
            [node("a", {R: 4}), node("b", {R: 4}), pod("p", "b", {R: 3})],
            2,
            {"a": "fits", "b": "tooFewFree"},
            "a VM needing 2 units can start on 1 node now",
            id="fits-and-too-few",
        ),
        pytest.param(
            [node("a", {R: 2}), node("b", {R: 2}), pod("p", "a", {R: 1}), pod("q", "b", {R: 1})],
            2,
            {"a": "tooFewFree", "b": "tooFewFree"},
            "2 units free but at most 1 on one node: a VM needing 2 units waits",
            id="fragmented",
        ),
        pytest.param(
            [node("a", {R: 2}), pod("p", "a", {R: 2})],
            1,
            {"a": "noFreeUnits"},
            "all 2 units on the 1 node eligible are in use: a VM needing 1 unit waits",
            id="all-in-use",
        ),
        pytest.param(
            [node("a", {R: 0})],
            1,
            {"a": "noUnits"},
            "no node advertises example.com/gpu: a VM needing 1 unit waits",
            id="listed-at-zero",
        ),
    ],
)
def test_rows_and_answer(
    objects: list[dict[str, Any]], count: int, rows: dict[str, str], answer: str
) -> None:
    result = explain_class(snapshot(gpuclass("c", R), *objects), "c", count=count)
    assert {r.node: r.verdict for r in result.rows} == rows
    assert result.answer == answer
    assert result.can_start is answer.startswith("a VM needing")


def stale(obj: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"]["labels"]["kubevirt.io/schedulable"] = "false"
    return obj


def test_each_node_kubevirt_cannot_use_is_named_with_its_reason() -> None:
    """The reasons of docs/contract.md 6.1 and 6.8, in the words the tenant doc quotes."""
    objects = [
        gpuclass("c", R),
        node("handler-less", {R: 8}, kubevirt=False),
        stale(node("stale", {R: 4})),
        node("kvm-less", {R: 4, "devices.kubevirt.io/kvm": 0}),
        node("healthy", {R: 1}),
    ]
    result = explain_class(snapshot(*objects), "c", count=2)
    reasons = {r.node: (r.verdict, r.reason) for r in result.rows}
    assert reasons == {
        "healthy": ("tooFewFree", "1 free, needs 2"),
        "handler-less": (
            "noVirtHandler",
            "not a KubeVirt node: no virt-handler (no kubevirt.io/schedulable label)",
        ),
        "stale": ("virtHandlerNotReady", "virt-handler not ready: kubevirt.io/schedulable=false"),
        "kvm-less": ("noKubeVirtDevices", "no devices.kubevirt.io/kvm"),
    }
    assert not result.can_start
    assert result.answer == "only 1 unit free (at most 1 on one node): a VM needing 2 units waits"


def test_a_manifest_never_fits_on_a_node_kubevirt_cannot_use() -> None:
    objects = [gpuclass("c", R), gpuclass("d", S), node("a", {R: 1, S: 1}, kubevirt=False)]
    result = explain_manifest(
        vmi_manifest('[{"className": "c"}, {"className": "d"}]'), snapshot(*objects)
    )
    assert (result.joint_fits, result.can_start) == (0, False)


def vmi_manifest(selection: str) -> dict[str, Any]:
    return {
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "v", "annotations": {"gpu.cozystack.io/classes": selection}},
    }


def test_manifest_needs_every_class_on_one_node() -> None:
    # Both classes have room, but never on the same node: KubeVirt puts a VM's GPUs on one node.
    objects = [gpuclass("c", R), gpuclass("d", S), node("a", {R: 1}), node("b", {S: 1})]
    result = explain_manifest(
        vmi_manifest('[{"className": "c"}, {"className": "d"}]'), snapshot(*objects)
    )
    assert [e.can_start for e in result.classes] == [True, True]
    assert (result.joint_fits, result.can_start, result.blocking) == (0, False, ("c", "d"))
    assert "no node has all of them free at once" in result.answer


def test_manifest_joint_fit_uses_every_class_toleration() -> None:
    # The VM carries both classes' tolerations, so a node tainted for c still takes d's units.
    objects = [
        gpuclass("c", R, tolerations=[TOLERATE]),
        gpuclass("d", S),
        node("a", {R: 1, S: 1}, taints=[TAINT]),
    ]
    result = explain_manifest(
        vmi_manifest('[{"className": "c"}, {"className": "d"}]'), snapshot(*objects)
    )
    assert [e.can_start for e in result.classes] == [True, False], "d alone: untolerated taint"
    assert (result.joint_fits, result.blocking, result.can_start) == (1, (), True)
    assert result.answer == "the VM can start on 1 node now"


def test_manifest_without_selection() -> None:
    result = explain_manifest({"kind": "VirtualMachine", "metadata": {"name": "v"}}, snapshot())
    assert result.can_start and result.classes == ()


# -- admission's refusals, said first (docs/contract.md 4.4, 7.6) ----------------------------------


def vgpu_class(name: str, resource: str) -> dict[str, Any]:
    made = gpuclass(name, resource)
    made["spec"] |= {"mode": "vgpu", "profile": "p"}
    return made


def capped_class(name: str, resource: str, max_count: int) -> dict[str, Any]:
    made = gpuclass(name, resource)
    made["spec"]["maxCount"] = max_count
    return made


@pytest.mark.parametrize(
    ("objects", "selection", "answer"),
    [
        pytest.param(
            [vgpu_class("c", R), vgpu_class("d", S), node("a", {R: 4, S: 4})],
            '[{"className": "c"}, {"className": "d"}]',
            "admission refuses the VM: a VM may take vGPUs from only one class (got c, d)",
            id="two-vgpu-classes",
        ),
        pytest.param(
            [capped_class("c", R, 2000), node("a", {R: 2000})],
            '[{"className": "c", "count": 1000}, {"className": "c", "count": 25}]',
            "admission refuses the VM: requests 1025 GPU units; at most 1024 per VMI",
            id="over-1024-units-in-total",
        ),
        pytest.param(
            [capped_class("c", R, 2000), capped_class("d", S, 2000), node("a", {R: 600, S: 600})],
            '[{"className": "c", "count": 600}, {"className": "d", "count": 600}]',
            "admission refuses the VM: requests 1200 GPU units; at most 1024 per VMI",
            id="over-1024-units-across-classes",
        ),
    ],
)
def test_manifest_refused_by_admission_cannot_start(
    objects: list[dict[str, Any]], selection: str, answer: str
) -> None:
    # Every node has room: only the admission rules (4.4) keep the VM from starting.
    result = explain_manifest(vmi_manifest(selection), snapshot(*objects))
    assert result.joint_fits == 1
    assert (result.can_start, result.answer) == (False, answer)
    assert result.problems and result.blocking


def test_one_class_over_1024_units_is_refused() -> None:
    objects = [capped_class("c", R, 2000), node("a", {R: 2000})]
    result = explain_class(snapshot(*objects), "c", count=1025)
    assert result.can_start is False
    assert (
        result.answer == "admission refuses the VM: requests 1025 GPU units; at most 1024 per VMI"
    )


def test_entitlement_is_noted_not_judged() -> None:
    # Entitlement depends on the namespace and the platform setting (4.5): a note, never a refusal.
    result = explain_manifest(
        vmi_manifest('[{"className": "c"}]'), snapshot(vgpu_class("c", R), node("a", {R: 1}))
    )
    assert result.can_start is True
    assert result.notes and "entitled" in result.notes[0]
    assert result.classes[0].notes == result.notes


MANIFESTS = sorted(
    [*(ROOT / "examples" / "manifests").glob("*.yaml"), *(FIXTURES / "manifests").glob("*.yaml")]
)


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.stem)
def test_whatever_review_denies_explain_refuses(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Explain and admission never disagree on a refusal: `review --manifest` (the webhook's own
    code, entitled namespace) denies a VM only when explain says admission refuses it."""
    main(["review", "--manifest", *OBJECTS, "--vgpu-entitled", str(path)])
    response = json.loads(capsys.readouterr().out)["response"]
    code, out, _ = run(["--manifest", str(path), *OBJECTS, "-o", "json"], capsys)
    value = json.loads(out)
    if not response["allowed"]:
        assert code == 1 and not value["canStart"]
        denied = {c["message"] for c in response["status"]["details"]["causes"]}
        assert denied <= {p.split(": ", 1)[1] for p in value["problems"]}


VM_LABELS = {"kubernetes.io/arch": "amd64", "machine-type.node.kubevirt.io/q35": "true"}


def vm_node(name: str, units: int, *, memory: str = "64Gi", arch: str = "amd64") -> dict[str, Any]:
    """A KubeVirt node with the labels virt-handler's node labeller writes, CPU and memory."""
    obj = node(name, {R: units, "cpu": "16", "memory": memory})
    obj["metadata"]["labels"].update({**VM_LABELS, "kubernetes.io/arch": arch})
    return obj


def quota(hard: int, used: int) -> dict[str, Any]:
    amounts = {"hard": {f"requests.{R}": str(hard)}, "used": {f"requests.{R}": str(used)}}
    return {
        "kind": "ResourceQuota",
        "metadata": {"name": "gpus", "namespace": "tenant-a"},
        "spec": {"hard": amounts["hard"]},
        "status": amounts,
    }


def tenant_vm(count: int, memory: str = "4Gi") -> dict[str, Any]:
    return {
        "kind": "VirtualMachineInstance",
        "metadata": {
            "name": "v",
            "namespace": "tenant-a",
            "annotations": {
                "gpu.cozystack.io/classes": f'[{{"className": "c", "count": {count}}}]'
            },
        },
        "spec": {"domain": {"devices": {}, "memory": {"guest": memory}}},
    }


def detailed(*objects: dict[str, Any]) -> Any:
    return SnapshotBuilder(detail=True).add_all([kubevirt(R), gpuclass("c", R), *objects])


@pytest.mark.parametrize(
    ("objects", "vm", "stop", "answer_has"),
    [
        pytest.param(
            [vm_node("a", 2)], tenant_vm(2), None, "the VM can start on 1 node now", id="fits"
        ),
        pytest.param(
            [vm_node("a", 2, memory="4Gi")],
            tenant_vm(2),
            "capacity",
            "a: needs 5421Mi memory, 4096Mi free",
            id="memory",
        ),
        pytest.param(
            [vm_node("a", 2, arch="arm64")],
            tenant_vm(1),
            "capacity",
            "node selector kubernetes.io/arch=amd64: the node has kubernetes.io/arch=arm64",
            id="architecture",
        ),
        pytest.param(
            [vm_node("a", 2), quota(hard=2, used=1)],
            tenant_vm(2),
            "quota",
            "ResourceQuota gpus has requests.example.com/gpu 1 used of 2, the launcher Pod asks 2",
            id="quota",
        ),
        pytest.param(
            [vm_node("a", 2), quota(hard=2, used=1)],
            tenant_vm(1),
            None,
            "the VM can start on 1 node now",
            id="quota-with-room",
        ),
        pytest.param(
            [vm_node("a", 2), quota(hard=2, used=1)],
            {**tenant_vm(2), "metadata": {**tenant_vm(2)["metadata"], "namespace": "tenant-b"}},
            None,
            "the VM can start on 1 node now",
            id="another-namespaces-quota",
        ),
        pytest.param(
            [vm_node("a", 2), pod("p", "a", {R: 1})],
            tenant_vm(2),
            "capacity",
            "blocked by c",
            id="too-few-units",
        ),
    ],
)
def test_what_stops_a_vm_is_named(
    objects: list[dict[str, Any]], vm: dict[str, Any], stop: str | None, answer_has: str
) -> None:
    result = explain_manifest(vm, detailed(*objects))
    assert result.stopped_by == stop
    assert result.can_start is (stop is None)
    assert answer_has in result.answer, result.answer


def test_the_launcher_is_rendered_with_the_class_gpus() -> None:
    result = explain_manifest(tenant_vm(2), detailed(vm_node("a", 2)))
    assert result.launcher is not None
    assert result.launcher.devices[R] == 2
    # 4Gi guest + 268Mi overhead + 1Gi for VFIO (the class GPUs) + the console-log sidecar's 35M
    assert result.launcher.memory == 4096 * 2**20 + 268 * 2**20 + 1024 * 2**20 + 35_000_000


@pytest.mark.parametrize("count", [2**63, 2**64, 10**30])
def test_a_count_past_int64_is_an_answer_in_json_not_a_traceback(
    count: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """orjson refuses integers past 64 bits; the answer (admission refuses the count) is still
    written as JSON, its count as the number it is."""
    code, out, _ = run(["example-whole-gpu", "--count", str(count), "-o", "json", *OBJECTS], capsys)
    answer = json.loads(out)
    assert code == 1 and answer["count"] == count and not answer["canStart"]
