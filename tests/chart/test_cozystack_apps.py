"""Cozystack's application charts with the change docs/operations.md gives them (offline).

The stand-ins in tests/fixtures/cozystack-apps/ have the structure of Cozystack's vm-instance and
kubernetes-nodes charts where `gpus` lives, and are rendered by the real Helm engine with the
gpuclass-selection library vendored. Expected values come from the contract: section 2 (a list
with class entries is the annotation, as JSON, unchanged; a raw list is `gpuN` entries), 4.5 and
4.10 (a worker pool takes passthrough classes only, refused at apply), and from Cozystack's
own constraint that a pool's template is named by a hash of its rendering.
tests/e2e/test_e2e_cozystack_apps.py takes the same renders through KubeVirt on an API server.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from gpuclass.shared.cli.manifest import wrap_manifest
from gpuclass.shared.cli.reviewcmd import offline_catalog
from gpuclass.shared.core.admission.review import review
from gpuclass.shared.core.status.catalog import Catalog, Policy
from tests.chart_helpers import render
from tests.conftest import OBJECTS
from tests.cozystack_apps import (
    APPS,
    CAPK_MACHINE_NAME,
    CAPK_MACHINE_NAMESPACE,
    CLUSTER_NAME,
    TEMPLATES,
    app_chart,
    capk_virtual_machine,
    kubevirt_machine,
    without_the_change,
)

ANN = "gpu.cozystack.io/classes"
NAMESPACE = "tenant-a"
CLASSES = [{"className": "example-whole-gpu", "count": 2}]
RAW = [{"name": "example.com/whole-gpu"}, {"name": "example.com/whole-gpu"}]


@pytest.fixture(scope="module")
def charts(
    tmp_path_factory: pytest.TempPathFactory, cozyvalues_gen: Path
) -> dict[tuple[str, bool], Path]:
    """(chart, changed) -> a copy: with docs/operations.md's change, and without it."""
    found = {}
    for name in TEMPLATES:
        found[(name, True)] = app_chart(tmp_path_factory.mktemp(f"{name}-after"), name)
        before = app_chart(tmp_path_factory.mktemp(f"{name}-before"), name)
        found[(name, False)] = without_the_change(before, name, cozyvalues_gen)
    return found


def _text(chart: Path, name: str, gpus: Any) -> str:
    manifests = render({"gpus": gpus}, chart=chart, release="vm1", namespace=NAMESPACE)
    return manifests[f"{name}/templates/{TEMPLATES[name]}"]


def _object(chart: Path, name: str, gpus: Any) -> dict[str, Any]:
    obj: dict[str, Any] = yaml.safe_load(_text(chart, name, gpus))
    return obj


def _vmi_template(obj: dict[str, Any]) -> dict[str, Any]:
    """The template KubeVirt makes each VMI of: a VM's, or a worker pool's VMs'."""
    if obj["kind"] == "VirtualMachine":
        template: dict[str, Any] = obj["spec"]["template"]
    else:
        template = obj["spec"]["template"]["spec"]["virtualMachineTemplate"]["spec"]["template"]
    return template


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_a_class_list_is_the_selection_annotation_and_no_device(
    charts: dict[tuple[str, bool], Path], name: str
) -> None:
    template = _vmi_template(_object(charts[(name, True)], name, CLASSES))
    annotations = template["metadata"]["annotations"]
    assert json.loads(annotations[ANN]) == CLASSES
    assert annotations["kubevirt.io/allow-pod-bridge-network-live-migration"] == "true"
    assert "gpus" not in template["spec"]["domain"]["devices"]


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_a_raw_list_is_device_entries_and_no_annotation(
    charts: dict[tuple[str, bool], Path], name: str
) -> None:
    template = _vmi_template(_object(charts[(name, True)], name, RAW))
    assert ANN not in template["metadata"]["annotations"]
    assert template["spec"]["domain"]["devices"]["gpus"] == [
        {"name": "gpu1", "deviceName": "example.com/whole-gpu"},
        {"name": "gpu2", "deviceName": "example.com/whole-gpu"},
    ]


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_a_mixed_list_fails_the_render_naming_the_entries(
    charts: dict[tuple[str, bool], Path], name: str
) -> None:
    with pytest.raises(helm.HelmRenderError) as failure:
        _text(charts[(name, True)], name, [*CLASSES, *RAW])
    assert "gpus mixes className entries (gpus[0]) and raw name entries (gpus[1])" in str(
        failure.value
    )


@pytest.mark.parametrize("name", list(TEMPLATES))
@pytest.mark.parametrize("gpus", [[], RAW], ids=["no-gpus", "raw-gpus"])
def test_without_class_entries_the_rendering_is_byte_for_byte_what_it_was(
    charts: dict[tuple[str, bool], Path], name: str, gpus: Any
) -> None:
    """So the change rolls no existing worker pool: kubernetes-nodes names a pool's
    KubevirtMachineTemplate by a hash of its rendering, and a new name replaces every VM."""
    assert _text(charts[(name, True)], name, gpus) == _text(charts[(name, False)], name, gpus)


def test_a_pool_that_selects_a_class_gets_a_new_template_name(
    charts: dict[tuple[str, bool], Path],
) -> None:
    chart = charts[("kubernetes-nodes", True)]
    names = {
        _object(chart, "kubernetes-nodes", gpus)["metadata"]["name"] for gpus in ([], RAW, CLASSES)
    }
    assert len(names) == 3


# -- a worker pool, as Cluster API and CAPK make its VMs -------------------------------------------


@cache
def _catalog() -> Catalog:
    return offline_catalog(OBJECTS, Policy(vgpu_entitled=True))


def _worker_vm(charts: dict[tuple[str, bool], Path], gpus: Any) -> dict[str, Any]:
    template = _object(charts[("kubernetes-nodes", True)], "kubernetes-nodes", gpus)
    machine = kubevirt_machine(template, name="kubernetes-demo-gpu-x7k2p")
    return capk_virtual_machine(machine, cluster="kubernetes-demo", bootstrap_secret="boot-x7k2p")


def test_capk_copies_the_selection_to_the_template_of_the_worker_vm(
    charts: dict[tuple[str, bool], Path],
) -> None:
    vm = _worker_vm(charts, CLASSES)
    meta = vm["spec"]["template"]["metadata"]
    assert json.loads(meta["annotations"][ANN]) == CLASSES
    # What marks the VMI a worker (docs/contract.md section 1), and the pool's own label.
    assert meta["labels"][CAPK_MACHINE_NAME] == "kubernetes-demo-gpu-x7k2p"
    assert meta["labels"][CAPK_MACHINE_NAMESPACE] == NAMESPACE
    assert meta["labels"]["cluster.x-k8s.io/deployment-name"] == "kubernetes-demo-gpu"
    assert vm["metadata"]["labels"][CLUSTER_NAME] == "kubernetes-demo"


def _vm_answer(vm: dict[str, Any]) -> dict[str, Any]:
    body = wrap_manifest(vm, operation="CREATE", namespace=NAMESPACE)
    response: dict[str, Any] = review(body, _catalog(), endpoint="/validate/virtualmachines")[
        "response"
    ]
    return response


def test_a_worker_pool_may_select_a_passthrough_class(charts: dict[tuple[str, bool], Path]) -> None:
    assert _vm_answer(_worker_vm(charts, CLASSES))["allowed"] is True


def test_a_worker_pool_selecting_a_vgpu_class_is_refused_at_apply(
    charts: dict[tuple[str, bool], Path],
) -> None:
    """Rules 4.5 and 4.10: worker pools take passthrough classes only, a refusal the tenant
    hears at apply, on its own `gpus[0]`."""
    answer = _vm_answer(_worker_vm(charts, [{"className": "example-byol-vgpu"}]))
    assert answer["allowed"] is False and answer["status"]["code"] == 403
    causes = answer["status"]["details"]["causes"]
    assert [(c["field"], c["reason"]) for c in causes] == [("gpus[0].className", "WorkerPoolVGPU")]


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_without_the_change_helm_refuses_a_class_entry_before_any_template(
    charts: dict[tuple[str, bool], Path], name: str
) -> None:
    """Cozystack's generated schema requires `name` on every GPU entry, and Helm checks values
    against it before rendering: a class entry never reaches the charts as they are."""
    with pytest.raises(helm.HelmValuesError, match="missing property 'name'"):
        _text(charts[(name, False)], name, CLASSES)
    assert _text(charts[(name, False)], name, RAW)  # raw entries render as before


OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def _documented_blocks() -> list[list[str]]:
    """The YAML blocks of docs/operations.md ("Cozystack's application charts"): the typedef,
    then the template lines for each file named on a block's first (comment) line."""
    text = OPERATIONS.read_text()
    section = text.split("## Cozystack's application charts", 1)[1]
    section = re.split(r"\n## (?!@)", section, maxsplit=1)[0]  # the typedef's lines start "## @"
    blocks = [b.split("```", 1)[0] for b in section.split("```yaml\n")[1:]]
    return [b.strip("\n").splitlines() for b in blocks]


# The file of Cozystack's each stand-in copies the structure of (tests/fixtures/cozystack-apps/).
UPSTREAM = {
    "vm-instance": "packages/apps/vm-instance/templates/vm.yaml",
    "kubernetes-nodes": "packages/apps/kubernetes-nodes/templates/nodegroup.yaml",
}


def _contains(lines: list[str], snippet: list[str]) -> bool:
    return any(lines[i : i + len(snippet)] == snippet for i in range(len(lines)))


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_the_stand_ins_carry_exactly_the_documented_change(name: str) -> None:
    blocks = _documented_blocks()
    mine = [b for b in blocks if b[0].startswith("#") and UPSTREAM[name] in b[0]]
    assert len(mine) == 1
    snippets = "\n".join(mine[0][1:]).split("\n\n")
    assert len(snippets) == 2  # the annotation lines, the raw block's condition
    template = (APPS / name / "templates" / TEMPLATES[name]).read_text().splitlines()
    for snippet in snippets:  # at the upstream file's indent, which the stand-in keeps
        assert _contains(template, snippet.split("\n"))
    typedef = [b for b in blocks if b[0].startswith("## @typedef {struct} GPU ")]
    assert len(typedef) == 1
    assert _contains((APPS / name / "values.yaml").read_text().splitlines(), typedef[0])
