"""The catalog, VMI builder and readers the VMI admission tests share (docs/contract.md section 4).

The tests are one file per rule: `test_rules_<rule>.py` beside this module; UPDATE in
`test_mutate_vmi.py`; the memoised resolution in `test_resolution.py`.

The catalog is built here from raw objects, so every figure a row depends on is
visible in this file: class `whole` (passthrough, 8 units on its largest host, at
most 2 free on any Ready host), `capped` (maxCount 2), `fresh` (no node yet),
`big` (maxCount 2000), the vGPU classes `lic` (licensed), `byol` and `byol2`, and
the unavailable `gone` (deleting), `dup` (loses a conflict to `whole`),
`unpermitted` and `broken` (invalid spec).
"""

from __future__ import annotations

import json
from typing import Any

import jsonpatch
import pytest

from gpuclass.shared.core.admission.decisions import Allowed, Decision, Denied
from gpuclass.shared.core.admission.mutate_vmi import admit
from gpuclass.shared.core.model.snapshot import SnapshotBuilder
from gpuclass.shared.core.status.catalog import Catalog, Policy, build_catalog
from tests.builders import KUBEVIRT_DEVICES, KUBEVIRT_NODE_LABELS, admission_request

ANN_KEY = "gpu.cozystack.io/classes"
ANN = f"metadata.annotations[{ANN_KEY}]"
TOL_W = {"key": "gpu.example.com/dedicated", "operator": "Exists", "effect": "NoSchedule"}
TOL_F = {
    "key": "gpu.example.com/new",
    "operator": "Equal",
    "value": "yes",
    "effect": "NoExecute",
    "tolerationSeconds": 30,
}
RES = {
    "whole": "example.com/whole",
    "capped": "example.com/capped",
    "fresh": "example.com/fresh",
    "big": "example.com/big",
    "lic": "example.com/lic-vgpu",
    "byol": "example.com/byol-vgpu",
    "byol2": "example.com/byol2-vgpu",
    "gone": "example.com/gone",
    "unpermitted": "example.com/unpermitted",
    # Permitted by KubeVirt, named by no class: a mediated device (a vGPU) and a PCI device.
    "mdev": "example.com/unclassed-mdev",
    "pci": "example.com/unclassed-pci",
}
LICENSE_VOLUME = {
    "name": "gpulicense",
    "secret": {"secretName": "gpuclass-license-lic", "volumeLabel": "GPULICENSE"},
}
LICENSE_DISK = {"name": "gpulicense", "serial": "GPULICENSE", "disk": {"bus": "virtio"}}


def _class(name: str, resource: str, **spec: Any) -> dict[str, Any]:
    meta = spec.pop("metadata", {})
    body = {
        "vendor": "example",
        "model": "m",
        "mode": "passthrough",
        "source": {"devicePlugin": {"resourceName": resource}},
    }
    body.update(spec)
    return {"kind": "GPUClass", "metadata": {"name": name, **meta}, "spec": body}


def _node(
    name: str, allocatable: dict[str, str], *, ready: str = "True", taints: list[Any] | None = None
) -> dict[str, Any]:
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": dict(KUBEVIRT_NODE_LABELS)},
        "spec": {"taints": taints or []},
        "status": {
            "conditions": [{"type": "Ready", "status": ready}],
            "allocatable": {**KUBEVIRT_DEVICES, **allocatable},
        },
    }


VGPU = {"mode": "vgpu", "profile": "p"}
OBJECTS: list[dict[str, Any]] = [
    _class(
        "whole",
        RES["whole"],
        tolerations=[TOL_W],
        metadata={"creationTimestamp": "2026-01-01T00:00:00Z"},
    ),
    _class("dup", RES["whole"], metadata={"creationTimestamp": "2026-02-01T00:00:00Z"}),
    _class("capped", RES["capped"], maxCount=2),
    _class("fresh", RES["fresh"], tolerations=[TOL_F]),
    _class("big", RES["big"], maxCount=2000),
    _class("lic", RES["lic"], **VGPU, license={"secretName": "lic-src"}),
    _class("byol", RES["byol"], **VGPU),
    _class("byol2", RES["byol2"], **VGPU),
    _class("gone", RES["gone"], metadata={"deletionTimestamp": "2026-06-01T00:00:00Z"}),
    _class("unpermitted", RES["unpermitted"]),
    _class("broken", "example.com/broken", mode="mig"),
    _node(
        "n1",
        {RES["whole"]: "4"},
        taints=[{"key": "gpu.example.com/dedicated", "value": "true", "effect": "NoSchedule"}],
    ),
    _node("n2", {RES["whole"]: "8"}, ready="False"),
    _node(
        "n3",
        {
            RES["lic"]: "8",
            RES["byol"]: "8",
            RES["byol2"]: "8",
            RES["capped"]: "4",
            RES["big"]: "2000",
        },
    ),
    {
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "tenant-a"},
        "spec": {
            "nodeName": "n1",
            "containers": [{"name": "c", "resources": {"limits": {RES["whole"]: "2"}}}],
        },
        "status": {"phase": "Running"},
    },
    {
        "kind": "KubeVirt",
        "status": {"phase": "Deployed"},
        "metadata": {"name": "kubevirt", "namespace": "cozy-kubevirt"},
        "spec": {
            "configuration": {
                "permittedHostDevices": {
                    "pciHostDevices": [
                        {"resourceName": RES[n]}
                        for n in ("whole", "capped", "fresh", "big", "gone", "pci")
                    ],
                    "mediatedDevices": [
                        {"resourceName": RES[n]} for n in ("lic", "byol", "byol2", "mdev")
                    ],
                }
            }
        },
    },
    {"kind": "Namespace", "metadata": {"name": "tenant-root"}},
    {
        "kind": "Namespace",
        "metadata": {"name": "tenant-a", "labels": {"gpu.cozystack.io/vgpu": "true"}},
    },
    {"kind": "Namespace", "metadata": {"name": "tenant-c"}},
]


def catalog(*, vgpu_entitled: bool = True) -> Catalog:
    return build_catalog(
        SnapshotBuilder().add_all(OBJECTS), Policy(vgpu_entitled=vgpu_entitled), figures="computed"
    )


CATALOG = catalog()


def vmi(
    selection: Any = None,
    *,
    namespace: str = "tenant-a",
    raw: str | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    annotations = {"kubevirt.io/latest-observed-api-version": "v1"}
    if raw is not None:
        annotations[ANN_KEY] = raw
    elif selection is not None:
        annotations[ANN_KEY] = json.dumps(selection)
    meta: dict[str, Any] = {"name": "vm", "namespace": namespace, "annotations": annotations}
    if labels:
        meta["labels"] = labels
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": meta,
        "spec": {
            "domain": {
                "cpu": {"cores": 2},
                "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]},
            },
            "volumes": [{"name": "root", "containerDisk": {"image": "example.org/guest:1"}}],
        },
    }


def cls(name: str, count: int | None = None) -> dict[str, Any]:
    return {"className": name, **({"count": count} if count is not None else {})}


def create(
    obj: dict[str, Any], cat: Catalog = CATALOG, *, namespace: str | None = None
) -> Decision:
    ns = namespace if namespace is not None else obj["metadata"].get("namespace")
    return admit(admission_request(operation="CREATE", namespace=ns, object=obj), cat)


def update(obj: dict[str, Any], old: dict[str, Any], cat: Catalog = CATALOG) -> Decision:
    return admit(
        admission_request(operation="UPDATE", namespace="tenant-a", object=obj, oldObject=old), cat
    )


def gpus(*resources: str) -> list[dict[str, str]]:
    return [{"name": f"gpu{i}", "deviceName": r} for i, r in enumerate(resources, 1)]


def gpus_op(*resources: str) -> dict[str, Any]:
    """Rule 4.6's first operation on a VMI built by :func:`vmi` (it has `devices`, no `gpus`):
    the GPU entries named gpu1..gpuN, one per unit, in the order given."""
    return {"op": "add", "path": "/spec/domain/devices/gpus", "value": gpus(*resources)}


def tolerations_op(toleration: dict[str, Any], *, first: bool = True) -> dict[str, Any]:
    """Rule 4.6's append of one class toleration: the list created when the VMI has none yet
    (`first`), else one `-` append."""
    if first:
        return {"op": "add", "path": "/spec/tolerations", "value": [toleration]}
    return {"op": "add", "path": "/spec/tolerations/-", "value": toleration}


LICENSE_DISK_OP = {"op": "add", "path": "/spec/domain/devices/disks/-", "value": LICENSE_DISK}
"""Rule 4.6's license disk appended beside the VMI's own disk (section 1's disk)."""


def ops_of(decision: Decision) -> list[dict[str, Any]]:
    assert isinstance(decision, Allowed), decision
    return list(decision.operations)


def causes_of(decision: Decision) -> list[tuple[str, str, str]]:
    assert isinstance(decision, Denied), decision
    return [(c.field, c.kind, c.code) for c in decision.causes]


def applied(obj: dict[str, Any], decision: Decision) -> dict[str, Any]:
    result: dict[str, Any] = jsonpatch.apply_patch(obj, ops_of(decision))
    return result


def assert_reinvocation_is_a_no_op(obj: dict[str, Any], decision: Decision) -> None:
    again = create(applied(obj, decision))
    assert again == Allowed(
        operations=(), warnings=decision.warnings if isinstance(decision, Allowed) else ()
    )


POOL = {"cluster.x-k8s.io/cluster-name": "tenant-a-k8s"}


COPY = "gpuclass-license-lic"


def _volume(volume: dict[str, Any]) -> Any:
    return lambda spec: spec["volumes"].append(volume)


def _credential(credential: dict[str, Any]) -> Any:
    return lambda spec: spec.setdefault("accessCredentials", []).append(credential)


def _pull_secret(spec: dict[str, Any]) -> None:
    spec["volumes"][0]["containerDisk"]["imagePullSecret"] = COPY


def _kernel_boot(spec: dict[str, Any]) -> None:
    spec["domain"]["firmware"] = {
        "kernelBoot": {"container": {"image": "example.org/k:1", "imagePullSecret": COPY}}
    }


SSH_KEY = {
    "sshPublicKey": {
        "source": {"secret": {"secretName": COPY}},
        "propagationMethod": {"noCloud": {}},
    }
}
PASSWORD = {
    "userPassword": {
        "source": {"secret": {"secretName": COPY}},
        "propagationMethod": {"qemuGuestAgent": {}},
    }
}
REFERENCE_ROWS = [
    pytest.param(
        None,
        _volume({"name": "lic", "secret": {"secretName": COPY}}),
        ["spec.volumes[1].secret.secretName"],
        id="secret-volume",
    ),
    pytest.param(
        None,
        _volume({"name": "ci", "cloudInitNoCloud": {"secretRef": {"name": COPY}}}),
        ["spec.volumes[1].cloudInitNoCloud.secretRef.name"],
        id="no-cloud-user-data-secret",
    ),
    pytest.param(
        None,
        _volume({"name": "ci", "cloudInitNoCloud": {"networkDataSecretRef": {"name": COPY}}}),
        ["spec.volumes[1].cloudInitNoCloud.networkDataSecretRef.name"],
        id="no-cloud-network-data-secret",
    ),
    pytest.param(
        None,
        _volume({"name": "ci", "cloudInitConfigDrive": {"secretRef": {"name": COPY}}}),
        ["spec.volumes[1].cloudInitConfigDrive.secretRef.name"],
        id="config-drive-user-data-secret",
    ),
    pytest.param(
        None,
        _volume({"name": "ci", "cloudInitConfigDrive": {"networkDataSecretRef": {"name": COPY}}}),
        ["spec.volumes[1].cloudInitConfigDrive.networkDataSecretRef.name"],
        id="config-drive-network-data-secret",
    ),
    pytest.param(
        None,
        _volume({"name": "sp", "sysprep": {"secret": {"name": COPY}}}),
        ["spec.volumes[1].sysprep.secret.name"],
        id="sysprep-secret",
    ),
    pytest.param(
        None,
        _pull_secret,
        ["spec.volumes[0].containerDisk.imagePullSecret"],
        id="container-disk-pull-secret",
    ),
    pytest.param(
        None,
        _kernel_boot,
        ["spec.domain.firmware.kernelBoot.container.imagePullSecret"],
        id="kernel-boot-pull-secret",
    ),
    pytest.param(
        None,
        _credential(SSH_KEY),
        ["spec.accessCredentials[0].sshPublicKey.source.secret.secretName"],
        id="ssh-key-no-selection",
    ),
    pytest.param(
        [cls("byol")],
        _credential(SSH_KEY),
        ["spec.accessCredentials[0].sshPublicKey.source.secret.secretName"],
        id="ssh-key-byol-no-cloud",
    ),
    pytest.param(
        [cls("lic")],
        _credential(SSH_KEY),
        ["spec.accessCredentials[0].sshPublicKey.source.secret.secretName"],
        id="ssh-key-from-own-license-copy",
    ),
    pytest.param(
        None,
        _credential(PASSWORD),
        ["spec.accessCredentials[0].userPassword.source.secret.secretName"],
        id="user-password",
    ),
    pytest.param(
        [cls("byol")],
        _volume({**LICENSE_VOLUME}),
        ["spec.volumes[1].secret.secretName"],
        id="byol-with-platform-license",
    ),
    pytest.param(
        [cls("whole")],
        _volume({"name": "x", "secret": {"secretName": "gpuclass-license-other"}}),
        ["spec.volumes[1].secret.secretName"],
        id="passthrough-with-license",
    ),
    pytest.param(
        [cls("lic")],
        _volume({"name": "x", "secret": {"secretName": "gpuclass-license-byol"}}),
        ["spec.volumes[1].secret.secretName"],
        id="another-class-copy",
    ),
    pytest.param(
        [cls("lic")],
        _volume({"name": "x", "secret": {"secretName": COPY}}),
        ["spec.volumes[1].secret.secretName"],
        id="own-copy-under-another-volume-name",
    ),
    pytest.param(
        None,
        _volume({"name": "x", "secret": {"secretName": COPY}, "extra": {"secretName": COPY}}),
        ["spec.volumes[1].secret.secretName", "spec.volumes[1].extra.secretName"],
        id="every-reference-reported",
    ),
    pytest.param([cls("lic")], _volume({**LICENSE_VOLUME}), [], id="own-license-volume"),
    pytest.param(
        None,
        _volume({"name": "s", "secret": {"secretName": "my-own-secret"}}),
        [],
        id="unrelated-secret",
    ),
    pytest.param(
        None,
        _credential({"sshPublicKey": {"source": {"secret": {"secretName": "my-keys"}}}}),
        [],
        id="unrelated-ssh-key",
    ),
]
