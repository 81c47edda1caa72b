"""Raw Kubernetes objects for the reconciler tests: small builders, one per kind.

Imported by the other tests/test_reconciler_*.py; the one test here checks that the
builders produce what the compaction functions read.
"""

from __future__ import annotations

import base64
from typing import Any

from gpuclass.shared import names

RawObject = dict[str, Any]
TOKEN = base64.b64encode(b"synthetic-token-not-real").decode()


def gpuclass(
    name: str,
    resource: str,
    *,
    created: str = "2026-01-01T00:00:00Z",
    tolerations: list[RawObject] | None = None,
    deleting: bool = False,
    licence: str | None = None,
    feature_type: int = 1,
    generation: int = 1,
    finalizers: list[str] | None = None,
    status: RawObject | None = None,
) -> RawObject:
    spec: RawObject = {
        "vendor": "v",
        "model": "m",
        "mode": "vgpu" if licence else "passthrough",
        "source": {"devicePlugin": {"resourceName": resource}},
    }
    if licence:
        spec["profile"] = "p"
        spec["license"] = {"secretName": licence, "featureType": feature_type}
    if tolerations is not None:
        spec["tolerations"] = tolerations
    meta: RawObject = {
        "name": name,
        "creationTimestamp": created,
        "generation": generation,
        "uid": f"uid-{name}",
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-06-01T00:00:00Z"
    if finalizers:
        meta["finalizers"] = finalizers
    obj: RawObject = {
        "apiVersion": names.API_VERSION,
        "kind": names.KIND,
        "metadata": meta,
        "spec": spec,
    }
    if status is not None:
        obj["status"] = status
    return obj


def node(
    name: str,
    allocatable: dict[str, Any],
    *,
    ready: bool = True,
    unschedulable: bool = False,
    taints: list[RawObject] | None = None,
) -> RawObject:
    spec: RawObject = {}
    if unschedulable:
        spec["unschedulable"] = True
    if taints:
        spec["taints"] = taints
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "spec": spec,
        "status": {
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "allocatable": {"cpu": "8", **{k: str(v) for k, v in allocatable.items()}},
        },
    }


def pod(
    name: str,
    node_name: str | None,
    requests: dict[str, int],
    *,
    namespace: str = "tenant-a",
    phase: str = "Running",
    init: dict[str, int] | None = None,
    limits_only: bool = False,
) -> RawObject:
    resources = {k: str(v) for k, v in requests.items()}
    container: RawObject = {
        "name": "c",
        "resources": {"limits": resources} if limits_only else {"requests": resources},
    }
    spec: RawObject = {"containers": [container]}
    if node_name:
        spec["nodeName"] = node_name
    if init:
        spec["initContainers"] = [
            {"name": "i", "resources": {"requests": {k: str(v) for k, v in init.items()}}}
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
        "status": {"phase": phase},
    }


def kubevirt(*resources: str, namespace: str = names.DEFAULT_KUBEVIRT_NAMESPACE) -> RawObject:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "KubeVirt",
        "metadata": {"name": "kubevirt", "namespace": namespace},
        "spec": {
            "configuration": {
                "permittedHostDevices": {"pciHostDevices": [{"resourceName": r} for r in resources]}
            }
        },
    }


def secret(
    name: str,
    namespace: str = names.DEFAULT_LICENSE_NAMESPACE,
    *,
    data: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> RawObject:
    meta: RawObject = {"name": name, "namespace": namespace}
    if labels is not None:
        meta["labels"] = labels
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta,
        "type": "Opaque",
        "data": {names.TOKEN_KEY: TOKEN} if data is None else data,
    }


def namespace(name: str, *, entitled: bool = False) -> RawObject:
    labels = {names.VGPU_ENTITLEMENT_LABEL: "true"} if entitled else {}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def vmi(
    name: str,
    ns: str,
    *,
    classes: list[str] | None = None,
    devices: list[str] | None = None,
    licence_class: str | None = None,
) -> RawObject:
    meta: RawObject = {"name": name, "namespace": ns}
    if classes:
        meta["annotations"] = {
            names.SELECTION_ANNOTATION: "["
            + ",".join(f'{{"className": "{c}"}}' for c in classes)
            + "]"
        }
    spec: RawObject = {
        "domain": {
            "devices": {
                "gpus": [
                    {"name": f"gpu{i + 1}", "deviceName": d} for i, d in enumerate(devices or [])
                ]
            }
        }
    }
    if licence_class:
        spec["volumes"] = [
            {
                "name": names.LICENSE_VOLUME,
                "secret": {
                    "secretName": names.license_copy_name(licence_class),
                    "volumeLabel": names.LICENSE_SERIAL,
                },
            }
        ]
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": meta,
        "spec": spec,
    }


def test_builders_compact_as_intended() -> None:
    from gpuclass.shared.snapshot import compact_class, compact_node, compact_pod

    record = compact_class(gpuclass("c", "example.com/gpu", licence="src"))
    assert record is not None and record.spec is not None and record.spec.license is not None
    built = compact_node(node("n", {"example.com/gpu": 2}, ready=False))
    assert built is not None and not built.ready and built.allocatable == {"example.com/gpu": 2}
    assert (
        compact_pod(pod("p", "n", {"example.com/gpu": 1}, init={"example.com/gpu": 3})) is not None
    )
