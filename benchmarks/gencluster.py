"""A synthetic cluster for the benchmarks: GPU classes, nodes, pods and the objects around them.

    generate_cluster(nodes, pods, classes, seed) -> list[dict]   # raw API objects
    iter_cluster(nodes, pods, classes, seed, kinds=None)          # the same, lazily, optionally by kind

Deterministic for a seed, and consistent across kinds (each kind draws from its own
random stream), so a benchmark can stream one kind at a time without holding
150,000 Pod dicts in memory. The shape follows a GPU cluster running KubeVirt:

- `classes` GPUClasses `class-NNN` on resources `gpu.example.com/model-NNN`; every
  8th is a licensed vGPU class, every 5th tolerates the `gpu.example.com/dedicated`
  taint; the KubeVirt CR permits all but the last resource;
- `nodes` Nodes, node i advertising resource i % classes (8 units), one in ten a
  second one, each running virt-handler (its label and devices); about 4% NotReady, 2%
  cordoned, 20% tainted `dedicated:NoSchedule`, 2% with virt-handler not ready;
- `pods` Pods across 50 tenant namespaces: about 40% virt-launcher Pods requesting
  1-2 GPU units on their node (plus devices.kubevirt.io/kvm), the rest plain Pods;
  about 5% Succeeded; plus one VMI per 100 pods selecting a class, the tenant
  Namespaces and the license source Secret.

Usable from any benchmark: `from benchmarks.gencluster import generate_cluster`.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

RawObject = dict[str, Any]
KINDS = ("GPUClass", "KubeVirt", "Secret", "Namespace", "Node", "Pod", "VirtualMachineInstance")
TENANTS = 50
DEDICATED = "gpu.example.com/dedicated"
SELECTION = "gpu.cozystack.io/classes"


def resource(index: int) -> str:
    return f"gpu.example.com/model-{index:03d}"


def class_name(index: int) -> str:
    return f"class-{index:03d}"


def _classes(count: int) -> Iterator[RawObject]:
    for i in range(count):
        licensed = i % 8 == 7
        spec: RawObject = {
            "displayName": f"Model {i}",
            "vendor": "example",
            "model": f"model-{i:03d}",
            "mode": "vgpu" if licensed else "passthrough",
            "source": {"devicePlugin": {"resourceName": resource(i)}},
        }
        if licensed:
            spec["profile"] = "example-profile"
            spec["license"] = {"secretName": "vgpu-license", "featureType": 1}
        if i % 5 == 0:
            spec["tolerations"] = [{"key": DEDICATED, "operator": "Exists", "effect": "NoSchedule"}]
        yield {
            "apiVersion": "cozystack.io/v1alpha1",
            "kind": "GPUClass",
            "metadata": {
                "name": class_name(i),
                "uid": f"uid-class-{i}",
                "generation": 1,
                "creationTimestamp": f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z",
                "resourceVersion": "1",
            },
            "spec": spec,
        }


def _platform(classes: int) -> Iterator[RawObject]:
    yield {
        "apiVersion": "kubevirt.io/v1",
        "kind": "KubeVirt",
        "metadata": {"name": "kubevirt", "namespace": "cozy-kubevirt"},
        "spec": {
            "configuration": {
                "permittedHostDevices": {
                    "pciHostDevices": [
                        {"pciVendorSelector": "10DE:0000", "resourceName": resource(i)}
                        for i in range(classes - 1)
                    ],
                }
            }
        },
        "status": {"phase": "Deployed"},  # virt-operator's: KubeVirt reads only a deployed CR
    }
    yield {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "vgpu-license", "namespace": "cozy-system"},
        "type": "Opaque",
        "data": {"client_configuration_token.tok": "c3ludGhldGljLXRva2Vu"},
    }


def _namespaces() -> Iterator[RawObject]:
    yield {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "tenant-root"}}
    for t in range(TENANTS):
        labels = {"gpu.cozystack.io/vgpu": "true"} if t % 2 == 0 else {}
        yield {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": f"tenant-t{t}", "labels": labels},
        }


def _node(i: int, classes: int, rng: random.Random) -> RawObject:
    allocatable = {
        "cpu": "128",
        "memory": "1Ti",
        "pods": "250",
        "devices.kubevirt.io/kvm": "1k",
        "devices.kubevirt.io/tun": "1k",
        "devices.kubevirt.io/vhost-net": "1k",
        resource(i % classes): "8",
    }
    if i % 10 == 3:
        allocatable[resource((i + 1) % classes)] = "4"
    spec: RawObject = {"podCIDR": f"10.{i // 250}.{i % 250}.0/24"}
    if rng.random() < 0.02:
        spec["unschedulable"] = True
    if rng.random() < 0.2:
        spec["taints"] = [{"key": DEDICATED, "value": "true", "effect": "NoSchedule"}]
    ready = "False" if rng.random() < 0.04 else "True"
    # 2% whose virt-handler heartbeat went stale (no extra draw: the stream stays as it was)
    handler = "false" if i % 50 == 7 else "true"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": f"node-{i:05d}",
            "uid": f"uid-node-{i}",
            "resourceVersion": "1",
            "labels": {
                "kubernetes.io/hostname": f"node-{i:05d}",
                "topology.kubernetes.io/zone": f"z{i % 3}",
                "kubevirt.io/schedulable": handler,
            },
        },
        "spec": spec,
        "status": {
            "conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": ready},
            ],
            "allocatable": allocatable,
            "capacity": allocatable,
            "nodeInfo": {
                "kubeletVersion": "v1.36.0",
                "containerRuntimeVersion": "containerd://2.0.0",
            },
        },
    }


def pod(
    j: int, *, nodes: int, classes: int, rng: random.Random, phase: str | None = None
) -> RawObject:
    """Pod number j (also used by benchmarks to make events: change `phase` or the uid)."""
    node_index = rng.randrange(nodes)
    launcher = rng.random() < 0.4
    limits: dict[str, str] = {"cpu": "2", "memory": "4Gi"}
    if launcher:
        limits[resource(node_index % classes)] = str(rng.choice((1, 1, 2)))
        limits["devices.kubevirt.io/kvm"] = "1"
    namespace = f"tenant-t{j % TENANTS}"
    name = f"virt-launcher-vm-{j}-abcde" if launcher else f"app-{j}-7d9f8c-xk2p9"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-pod-{j}",
            "resourceVersion": "1",
            "labels": {"kubevirt.io": "virt-launcher"} if launcher else {"app": f"app-{j % 300}"},
        },
        "spec": {
            "nodeName": f"node-{node_index:05d}",
            "containers": [
                {
                    "name": "compute" if launcher else "main",
                    "image": "registry.example.com/img:1.0",
                    "resources": {"limits": limits, "requests": limits},
                }
            ],
        },
        "status": {
            "phase": phase or ("Succeeded" if rng.random() < 0.05 else "Running"),
            "podIP": f"10.{j // 65536 % 256}.{j // 256 % 256}.{j % 256}",
        },
    }


def _vmis(pods: int, classes: int, rng: random.Random) -> Iterator[RawObject]:
    for v in range(pods // 100):
        i = rng.randrange(classes)
        yield {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "metadata": {
                "name": f"vm-{v}",
                "namespace": f"tenant-t{v % TENANTS}",
                "annotations": {SELECTION: f'[{{"className": "{class_name(i)}"}}]'},
            },
            "spec": {
                "domain": {"devices": {"gpus": [{"name": "gpu1", "deviceName": resource(i)}]}}
            },
        }


def iter_cluster(
    nodes: int, pods: int, classes: int, seed: int = 1, *, kinds: tuple[str, ...] | None = None
) -> Iterator[RawObject]:
    """The cluster's objects one at a time; `kinds` restricts them (same objects as the full run)."""
    wanted = set(kinds or KINDS)
    if "GPUClass" in wanted:
        yield from _classes(classes)
    for obj in _platform(classes):
        if obj["kind"] in wanted:
            yield obj
    if "Namespace" in wanted:
        yield from _namespaces()
    if "Node" in wanted:
        rng = random.Random(seed * 7 + 1)
        for i in range(nodes):
            yield _node(i, classes, rng)
    if "Pod" in wanted:
        rng = random.Random(seed * 7 + 2)
        for j in range(pods):
            yield pod(j, nodes=nodes, classes=classes, rng=rng)
    if "VirtualMachineInstance" in wanted:
        yield from _vmis(pods, classes, random.Random(seed * 7 + 3))


def generate_cluster(nodes: int, pods: int, classes: int, seed: int = 1) -> list[RawObject]:
    """Every object of the synthetic cluster, as raw API dicts (kind set on each)."""
    return list(iter_cluster(nodes, pods, classes, seed))
