"""Object builders and small helpers shared by several test files.

Test modules import from here (or from the e2e plumbing modules), never from one
another: `tests/project/test_import_contracts.py` forbids importing a `tests.test_*` module.
Each builder is defined here once (`tests/project/test_import_contracts.py` checks that no
plumbing module defines one again).

- raw objects as the fakes and the pure core read them, one builder per kind
  (`gpuclass`, `node`, `pod`, `kubevirt`, `secret`, `namespace`, `vmi`): offline snapshots,
  with what the API server would have set (a class's uid, creationTimestamp, generation; a
  Pod's phase) and the fields the compaction functions read, nothing more;
- bodies an API server accepts, as a client creates them (`api_namespace`, `api_gpuclass`,
  `api_licensed_class`, `api_secret` from plain-text data, `api_pod` with images, requests
  and limits, `api_vmi` with its root disk, memory and license disk), for the end-to-end
  tests and benchmarks against a real control plane; :func:`example_class` is an
  `api_gpuclass` named after its resource, and :func:`with_status` one whose status the
  reconciler has written;
- :func:`selecting_vmi` and :class:`World`: VMIs and catalog names for the webhook
  end-to-end tests;
- AdmissionReview requests for the offline CLI (:func:`vmi_request`, :func:`review_file`);
- :func:`changed_fields`: the JSON pointers a patch changed.

What runs `gpuclass-reconciler` and writes as a kubelet or KubeVirt would (node status, pod
phase, virt-launcher Pods) is process plumbing, in `tests/e2e_reconciler_helpers.py`.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuclass.shared.core.admission.envelope import AdmissionRequest, request_from
from gpuclass.shared.core.base import names
from tests.controlplane.cluster import unique_name

if TYPE_CHECKING:
    from tests.controlplane.cluster import ControlPlane

RawObject = dict[str, Any]
TOKEN = base64.b64encode(b"synthetic-token-not-real").decode()
GPUCLASSES = "/apis/cozystack.io/v1alpha1/gpuclasses"
ANN = "gpu.cozystack.io/classes"

# -- raw objects for the fakes and the pure core ------------------------------------------------


def gpuclass(
    name: str,
    resource: str,
    *,
    created: str = "2026-01-01T00:00:00Z",
    tolerations: list[RawObject] | None = None,
    deleting: bool = False,
    license: str | None = None,
    feature_type: int = 1,
    generation: int = 1,
    finalizers: list[str] | None = None,
    status: RawObject | None = None,
) -> RawObject:
    spec: RawObject = {
        "vendor": "v",
        "model": "m",
        "mode": "vgpu" if license else "passthrough",
        "source": {"devicePlugin": {"resourceName": resource}},
    }
    if license:
        spec["profile"] = "p"
        spec["license"] = {"secretName": license, "featureType": feature_type}
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


KUBEVIRT_NODE_LABELS = {"kubevirt.io/schedulable": "true"}
"""What virt-handler writes on a node it runs on (shared/core/model/kubevirt.py)."""
KUBEVIRT_DEVICES = {
    "devices.kubevirt.io/kvm": "1k",
    "devices.kubevirt.io/tun": "1k",
    "devices.kubevirt.io/vhost-net": "1k",
}
"""What virt-handler's device plugins advertise (1,000 each, as KubeVirt v1.8.4 does)."""


def node(
    name: str,
    allocatable: dict[str, Any],
    *,
    ready: bool = True,
    unschedulable: bool = False,
    taints: list[RawObject] | None = None,
    kubevirt: bool = True,
) -> RawObject:
    """A node; by default a healthy KubeVirt node (virt-handler's label and devices), which
    `kubevirt=False` leaves out and `allocatable` can override."""
    spec: RawObject = {}
    if unschedulable:
        spec["unschedulable"] = True
    if taints:
        spec["taints"] = taints
    meta: RawObject = {"name": name}
    devices: dict[str, Any] = {}
    if kubevirt:
        meta["labels"] = dict(KUBEVIRT_NODE_LABELS)
        devices = dict(KUBEVIRT_DEVICES)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": meta,
        "spec": spec,
        "status": {
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "allocatable": {
                "cpu": "8",
                **devices,
                **{k: str(v) for k, v in allocatable.items()},
            },
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
        "status": {"phase": "Deployed"},  # virt-operator's: KubeVirt reads only a deployed CR
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
    license_class: str | None = None,
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
    if license_class:
        spec["volumes"] = [
            {
                "name": names.LICENSE_VOLUME,
                "secret": {
                    "secretName": names.license_copy_name(license_class),
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


# -- on the real API server ---------------------------------------------------------------------


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def unb64(data: str) -> str:
    return base64.b64decode(data).decode()


def api_namespace(name: str, labels: Mapping[str, str] | None = None) -> RawObject:
    """A Namespace body; no `labels` key unless some are given."""
    meta: RawObject = {"name": name}
    if labels:
        meta["labels"] = dict(labels)
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def api_gpuclass(name: str, resource: str, **spec: Any) -> RawObject:
    """A GPUClass body (no server-set metadata): a passthrough class of `resource`, vendor
    `example`, model `e2e`; `spec` adds or replaces spec fields."""
    body = {
        "vendor": "example",
        "model": "e2e",
        "mode": "passthrough",
        "source": {"devicePlugin": {"resourceName": resource}},
        **spec,
    }
    return {
        "apiVersion": "cozystack.io/v1alpha1",
        "kind": "GPUClass",
        "metadata": {"name": name},
        "spec": body,
    }


def api_licensed_class(name: str, resource: str, source: str, feature_type: int = 1) -> RawObject:
    """An `api_gpuclass` in vgpu mode licensed from the Secret `source` (featureType only
    when not the default 1)."""
    license: RawObject = {"secretName": source}
    if feature_type != 1:
        license["featureType"] = feature_type
    return api_gpuclass(name, resource, mode="vgpu", profile="e2e-1q", license=license)


def example_class(name: str, **spec: Any) -> RawObject:
    """An `api_gpuclass` of resource `example.com/<name>`, model `example-model`."""
    return api_gpuclass(name, f"example.com/{name}", **{"model": "example-model", **spec})


def api_secret(
    name: str, ns: str, data: Mapping[str, str], labels: Mapping[str, str] | None = None
) -> RawObject:
    """An Opaque Secret body; `data` in plain text, base64-encoded here."""
    meta: RawObject = {"name": name, "namespace": ns}
    if labels is not None:
        meta["labels"] = dict(labels)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta,
        "type": "Opaque",
        "data": {key: b64(value) for key, value in data.items()},
    }


def api_pod(
    name: str,
    ns: str,
    node: str | None,
    requests: Mapping[str, int],
    *,
    init_requests: Mapping[str, int] | None = None,
    labels: Mapping[str, str] | None = None,
) -> RawObject:
    """A Pod body bound to `node` (as the scheduler would bind it) requesting `requests`
    (as requests and limits, with an image, as the API server requires); no status."""

    def container(cname: str, wants: Mapping[str, int]) -> RawObject:
        c: RawObject = {"name": cname, "image": "example.org/e2e:1"}
        if wants:
            amounts = {k: str(v) for k, v in wants.items()}
            c["resources"] = {"requests": amounts, "limits": dict(amounts)}
        return c

    spec: RawObject = {"containers": [container("main", requests)]}
    if node is not None:
        spec["nodeName"] = node
    if init_requests is not None:
        spec["initContainers"] = [container("init", init_requests)]
    meta: RawObject = {"name": name, "namespace": ns}
    if labels:
        meta["labels"] = dict(labels)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def api_vmi(
    name: str,
    ns: str,
    *,
    classes: Sequence[str] = (),
    devices: Sequence[str] = (),
    license_copy: str | None = None,
) -> RawObject:
    """A VMI body as admission stores it: the selection annotation, `gpus` entries and, for a
    licensed class, the license volume and disk naming the copy `license_copy`
    (docs/contract.md section 1); with a root disk and memory, as KubeVirt requires."""
    meta: RawObject = {"name": name, "namespace": ns}
    if classes:
        meta["annotations"] = {ANN: json.dumps([{"className": c} for c in classes])}
    disks: list[RawObject] = [{"name": "root", "disk": {"bus": "virtio"}}]
    volumes: list[RawObject] = [{"name": "root", "containerDisk": {"image": "example.org/guest:1"}}]
    if license_copy is not None:
        disks.append({"name": "gpulicense", "serial": "GPULICENSE", "disk": {"bus": "virtio"}})
        volumes.append(
            {
                "name": "gpulicense",
                "secret": {"secretName": license_copy, "volumeLabel": "GPULICENSE"},
            }
        )
    gpus = [{"name": f"gpu{i}", "deviceName": d} for i, d in enumerate(devices, start=1)]
    spec: RawObject = {
        "domain": {"devices": {"disks": disks, "gpus": gpus}, "memory": {"guest": "1Gi"}},
        "volumes": volumes,
    }
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": meta,
        "spec": spec,
    }


STORED_STATUS: RawObject = {
    "free": 3,
    "maxFreePerNode": 2,
    "maxUnitsPerNode": 4,
    "conditions": [
        {
            "type": "Ready",
            "status": "True",
            "reason": "Ready",
            "message": "ok",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        },
        {
            "type": "Schedulable",
            "status": "True",
            "reason": "Fragmented",
            "message": "a VM of up to 2 units can start now, not one of 4",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        },
    ],
    "capacity": {
        "advertising": 3,
        "hosts": 3,
        "eligible": 2,
        "withFree": 2,
        "excluded": {
            "notReady": 1,
            "cordoned": 0,
            "untolerated": 0,
            "noFreeUnits": 0,
            "taints": [],
            "otherTaintNodes": 0,
        },
    },
}
"""A status as the reconciler writes it: its figures, capacity, Ready and Schedulable."""


def with_status(plane: ControlPlane, name: str, **spec: Any) -> RawObject:
    """Create a class and write a status through the status subresource, as the reconciler does."""
    created = plane.admin.create(example_class(name, **spec))
    created["status"] = copy.deepcopy(STORED_STATUS)
    return plane.admin.call("PUT", f"{GPUCLASSES}/{name}/status", body=created)


# -- the webhook end to end ---------------------------------------------------------------------


def selecting_vmi(namespace: str, selection: Any | None = None, **extra_spec: Any) -> RawObject:
    meta: RawObject = {"name": unique_name("vm"), "namespace": namespace}
    if selection is not None:
        meta["annotations"] = {ANN: json.dumps(selection)}
    spec = {
        "domain": {
            "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]},
            "memory": {"guest": "1Gi"},
        },
        "volumes": [{"name": "root", "containerDisk": {"image": "example.org/guest:1"}}],
        **extra_spec,
    }
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": meta,
        "spec": spec,
    }


def selecting_vm(namespace: str, selection: Any | None = None, **extra_spec: Any) -> RawObject:
    """A VirtualMachine whose template is `selecting_vmi(namespace, selection, **extra_spec)`."""
    inner = selecting_vmi(namespace, selection, **extra_spec)
    template_meta = {k: v for k, v in inner["metadata"].items() if k == "annotations"}
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": inner["metadata"]["name"], "namespace": namespace},
        "spec": {
            "runStrategy": "Halted",
            "template": {"metadata": template_meta, "spec": inner["spec"]},
        },
    }


class World:
    """Names of the catalog this module creates, so tests can select its classes."""

    def __init__(self) -> None:
        suffix = unique_name("e2e").split("-")[-1]
        self.whole = f"e2e-whole-{suffix}"
        self.licensed = f"e2e-licensed-{suffix}"
        self.byol = f"e2e-byol-{suffix}"
        self.whole_resource = f"e2e-{suffix}.example.com/whole"
        self.licensed_resource = f"e2e-{suffix}.example.com/licensed"
        self.byol_resource = f"e2e-{suffix}.example.com/byol"
        self.toleration = {
            "key": "gpu.example.com/dedicated",
            "operator": "Exists",
            "effect": "NoSchedule",
        }


# -- AdmissionReview requests for the offline CLI -----------------------------------------------


def review_file(tmp_path: Path, request: dict[str, Any]) -> Path:
    path = tmp_path / "review.json"
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    path.write_text(json.dumps(body))
    return path


def launcher(
    vmi_name: str,
    ns: str,
    node_name: str | None = "n1",
    *,
    license_class: str | None = None,
    requests: dict[str, int] | None = None,
    phase: str = "Pending",
) -> RawObject:
    """A virt-launcher Pod as KubeVirt's controller renders it for a VMI (KubeVirt v1.8.4,
    pkg/virt-controller/services/template.go and rendervolumes.go: the VMI as controlling
    owner, each VMI Secret volume as a Pod volume of the same name and Secret)."""
    obj = pod(f"virt-launcher-{vmi_name}-x1", node_name, requests or {}, namespace=ns, phase=phase)
    obj["metadata"]["labels"] = {names.LAUNCHER_LABEL: names.LAUNCHER_LABEL_VALUE}
    obj["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "name": vmi_name,
            "uid": f"uid-{vmi_name}",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    if license_class:
        obj["spec"]["volumes"] = [
            {
                "name": names.LICENSE_VOLUME,
                "secret": {"secretName": names.license_copy_name(license_class)},
            }
        ]
    return obj


def vmi_request(class_name: str = "stored", count: int = 1) -> dict[str, Any]:
    """A VMI CREATE in tenant-root selecting `count` units of one class."""
    selection = json.dumps([{"className": class_name, "count": count}])
    return {
        "uid": "u",
        "kind": {"group": "kubevirt.io", "version": "v1", "kind": "VirtualMachineInstance"},
        "operation": "CREATE",
        "namespace": "tenant-root",
        "object": {
            "metadata": {
                "name": "vm",
                "namespace": "tenant-root",
                "annotations": {"gpu.cozystack.io/classes": selection},
            },
            "spec": {"domain": {"devices": {}}},
        },
    }


def admission_request(
    kind: tuple[str, str] = ("kubevirt.io", "VirtualMachineInstance"), **request: Any
) -> AdmissionRequest:
    """The typed request an admitter receives, made by the webhook's own envelope parser
    from a `request` object (uid and kind filled in; None fields dropped as absent)."""
    body = {k: v for k, v in request.items() if v is not None}
    body.setdefault("uid", "u")
    body["kind"] = {"group": kind[0], "version": "v1", "kind": kind[1]}
    return request_from(body, api_version="admission.k8s.io/v1")


# -- comparing objects --------------------------------------------------------------------------


def changed_fields(before: Any, after: Any, pointer: str = "") -> set[str]:
    """The fields a patch changed: JSON pointers of differing values, a list as one field,
    descending into objects (so a created container reports the fields it holds)."""
    if before == after:
        return set()
    if isinstance(after, dict):
        old = before if isinstance(before, dict) else {}
        keys = set(old) | set(after)
        found: set[str] = set()
        for key in sorted(keys):
            escaped = str(key).replace("~", "~0").replace("/", "~1")
            found |= changed_fields(old.get(key), after.get(key), f"{pointer}/{escaped}")
        return found
    return {pointer}
