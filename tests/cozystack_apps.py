"""Cozystack's application charts as test fixtures, and what Cluster API and CAPK make of them.

- :func:`app_chart` copies a stand-in chart of tests/fixtures/cozystack-apps/ with the
  gpuclass-selection library beside it (`charts/gpuclass-selection`, as Cozystack links its
  `cozy-lib`); :func:`without_the_change` undoes, in the copy, exactly the change
  docs/operations.md gives Cozystack's charts, so a test can compare before and after.
- :func:`kubevirt_machine` and :func:`capk_virtual_machine` follow, step by step, the code that
  turns a worker pool's KubevirtMachineTemplate into the VirtualMachine KubeVirt starts:
  Cluster API's `GenerateTemplate` (cluster-api `controllers/external/util.go`: the new
  infrastructure machine is the template's `spec.template`, metadata and spec), then
  cluster-api-provider-kubevirt v0.11.2 (`pkg/kubevirt/utils.go`,
  `newVirtualMachineFromKubevirtMachine` and `buildVirtualMachineInstanceTemplate`;
  `pkg/kubevirt/machine.go`, `Create`). KubeVirt itself then makes the VMI of the VM's
  template (its VM controller code runs in `kubevirt-parts`, tests/controlplane/kubevirt/).

Nothing here asserts; the test modules do.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

from tests.chart_helpers import SELECTION_LIBRARY

ROOT = Path(__file__).resolve().parent.parent
APPS = ROOT / "tests" / "fixtures" / "cozystack-apps"
TEMPLATES = {"vm-instance": "vm.yaml", "kubernetes-nodes": "nodegroup.yaml"}
GPUS_VALUE = {"vm-instance": ".Values.gpus", "kubernetes-nodes": ".group.gpus"}

RawObject = dict[str, Any]

# cluster-api-provider-kubevirt v0.11.2: api/v1alpha1/kubevirtcluster_types.go and
# cluster-api's ClusterNameLabel; the worker role is pkg/kubevirt/utils.go's nodeRole.
CAPK_MACHINE_NAME = "capk.cluster.x-k8s.io/kubevirt-machine-name"
CAPK_MACHINE_NAMESPACE = "capk.cluster.x-k8s.io/kubevirt-machine-namespace"
CLUSTER_NAME = "cluster.x-k8s.io/cluster-name"
ROLE = "cluster.x-k8s.io/role"


def app_chart(destination: Path, name: str) -> Path:
    """A copy of the stand-in chart `name` with the selection library vendored beside it."""
    chart = destination / name
    shutil.copytree(APPS / name, chart)
    shutil.copytree(SELECTION_LIBRARY, chart / "charts" / "gpuclass-selection")
    return chart


def without_the_change(chart: Path, name: str) -> Path:
    """The copy as it was before docs/operations.md's change: no annotation lines, and the raw
    `gpus` block rendered whenever the list is not empty. Each edit must apply exactly once."""
    path = chart / "templates" / TEMPLATES[name]
    text = path.read_text()
    value = GPUS_VALUE[name]
    lines = text.splitlines(keepends=True)
    annotation = [i for i, line in enumerate(lines) if '"gpuclass-selection.annotations"' in line]
    if len(annotation) != 1:
        raise AssertionError(f"{path}: expected one annotation helper, found {len(annotation)}")
    start = annotation[0]
    del lines[start - 1 : start + 3]  # its comment, the `with`, the line it prints, the `end`
    text = "".join(lines)
    condition = f'eq (include "gpuclass-selection.kind" (dict "gpus" {value})) "raw"'
    comment = "{{- /* gpuclass: raw entries only; classes are resolved at admission */}}\n"
    if text.count(condition) != 1 or text.count(comment) != 1:
        raise AssertionError(f"{path}: the raw-entry condition is not there once")
    text = text.replace(condition, value)
    text = "".join(
        line for line in text.splitlines(keepends=True) if line.strip() != comment.strip()
    )
    path.write_text(text)
    return chart


def kubevirt_machine(template: RawObject, *, name: str) -> RawObject:
    """The KubevirtMachine a MachineSet creates from `template` (a KubevirtMachineTemplate):
    its `spec.template`, named and placed (GenerateTemplate; the clone annotations it adds do
    not reach the VM)."""
    machine: RawObject = copy.deepcopy(template["spec"]["template"])
    machine["apiVersion"] = template["apiVersion"]
    machine["kind"] = "KubevirtMachine"
    machine.setdefault("metadata", {}).update(
        {"name": name, "namespace": template["metadata"]["namespace"]}
    )
    return machine


def capk_virtual_machine(machine: RawObject, *, cluster: str, bootstrap_secret: str) -> RawObject:
    """The worker VirtualMachine CAPK v0.11.2 creates for `machine` (a KubevirtMachine).

    The VM's spec is the machine's `virtualMachineTemplate.spec`, its template rebuilt: the
    template's labels and annotations copied (annotations whole, the selection with them),
    CAPK's labels added, the template's spec copied and the bootstrap config drive appended.
    The VM's labels and annotations are the `virtualMachineTemplate`'s own, plus CAPK's.
    (DataVolume templates would be prefixed by the machine name; these have none.)
    """
    source = machine["spec"]["virtualMachineTemplate"]
    name, namespace = machine["metadata"]["name"], machine["metadata"]["namespace"]
    source_template = source["spec"].get("template") or {}
    source_meta = source_template.get("metadata") or {}
    own = {"kubevirt.io/vm": name, "name": name, ROLE: "worker", CLUSTER_NAME: cluster}
    template_spec = copy.deepcopy(source_template.get("spec") or {})
    template_spec.setdefault("volumes", []).append(
        {
            "name": "cloudinitvolume",
            "cloudInitConfigDrive": {"secretRef": {"name": f"{bootstrap_secret}-userdata"}},
        }
    )
    devices = template_spec.setdefault("domain", {}).setdefault("devices", {})
    devices.setdefault("disks", []).append({"name": "cloudinitvolume", "disk": {"bus": "virtio"}})
    template = {
        "metadata": {
            "labels": {**(source_meta.get("labels") or {}), **own},
            "annotations": dict(source_meta.get("annotations") or {}),
        },
        "spec": template_spec,
    }
    spec = copy.deepcopy(source["spec"])
    spec["template"] = template
    vm_meta = source.get("metadata") or {}
    metadata: RawObject = {
        "name": name,
        "namespace": namespace,
        "labels": {**(vm_meta.get("labels") or {}), **own},
    }
    if vm_meta.get("annotations"):
        metadata["annotations"] = dict(vm_meta["annotations"])
    # machine.go, Create: the labels its CreateOrUpdate mutation sets.
    capk = {CAPK_MACHINE_NAME: name, CAPK_MACHINE_NAMESPACE: namespace}
    metadata["labels"].update({CLUSTER_NAME: cluster, **capk})
    template["metadata"]["labels"].update(capk)
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": metadata,
        "spec": spec,
    }
