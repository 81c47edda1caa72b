"""Pods that request a vGPU (docs/contract.md rule 4.5 and section 3, `POST /validate/pods`).

A vGPU is an extended resource like any other: nothing in Kubernetes stops a plain Pod
from requesting it, and a Pod gets vGPUs without a VM, a class or the webhook's VMI rules.
Entitlement (rule 4.5) is about who may take vGPUs, so it holds for Pods too: a Pod that
requests a vGPU resource (:attr:`Catalog.vgpu_resources`: a vgpu class's resourceName, or
any mediated device KubeVirt permits) in any container or init container, as a request or
a limit, is refused in a namespace that is not entitled.

KubeVirt's controller (setting `kubevirt_controller_user`) is the one exception: its
launcher Pods carry the vGPUs of a VMI the VMI webhook already judged, by the same rule.

This is the validating twin of :mod:`shared.core.admission.mutate_pod` (the mutating launcher-Pod hook,
which never refuses); each answers one concern and the two never share a decision.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from gpuclass.shared.core.admission.decisions import Allowed, Decision, Denied
from gpuclass.shared.core.admission.envelope import AdmissionRequest
from gpuclass.shared.core.base.causes import Cause, CauseCode, forbidden, invalid
from gpuclass.shared.core.base.fieldpath import FieldPath
from gpuclass.shared.core.status.catalog import Catalog

CONTAINER_LISTS = ("initContainers", "containers")
SECTIONS = ("requests", "limits")


def admit(request: AdmissionRequest, catalog: Catalog) -> Decision:
    """CREATE only: a Pod's containers and their resources cannot change after it is created."""
    if request.operation != "CREATE":
        return Allowed()
    if request.username == catalog.policy.kubevirt_controller_user:
        return Allowed()  # launcher Pods: their VMI was judged by rule 4.5 already
    if request.object is None:
        return Denied((invalid(FieldPath.of("object"), "the request carries no Pod object"),))
    return judge_pod(request.object, request.namespace, catalog=catalog)


def judge_pod(pod: Mapping[str, Any], namespace: str, *, catalog: Catalog) -> Decision:
    """Every vGPU request of the Pod, one cause each, when `namespace` may not take vGPUs."""
    wanted = [(path, name) for path, name in resource_names(pod) if name in catalog.vgpu_resources]
    if not wanted:
        return Allowed()
    problem = catalog.vgpu_problem(namespace)
    if problem is None:
        return Allowed()
    return Denied(
        tuple(_cause(path, name, namespace=namespace, problem=problem) for path, name in wanted)
    )


def resource_names(pod: Mapping[str, Any]) -> Iterator[tuple[FieldPath, str]]:
    """(field path, resource name) of every request and limit of every (init) container."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return
    for kind in CONTAINER_LISTS:
        containers = spec.get(kind)
        if not isinstance(containers, list):
            continue
        for i, container in enumerate(containers):
            resources = container.get("resources") if isinstance(container, dict) else None
            if not isinstance(resources, dict):
                continue
            for section in SECTIONS:
                names = resources.get(section)
                if isinstance(names, dict):
                    for name in names:
                        if isinstance(name, str):
                            yield (
                                FieldPath.of("spec", kind)
                                .index(i)
                                .child("resources", section)
                                .key(name),
                                name,
                            )


def _cause(path: FieldPath, resource: str, *, namespace: str, problem: str) -> Cause:
    return forbidden(
        path,
        f"{resource} is a vGPU resource, and namespace {namespace or '(none)'} may not take "
        f"vGPUs: {problem}",
        code=CauseCode.NOT_ENTITLED,
    )
