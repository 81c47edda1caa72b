"""What KubeVirt's launcher Pod of one VMI asks of a node, rendered as KubeVirt v1.8.4 renders it.

`gpuclass explain --manifest` answers "can this VM start" in full: besides the class's units, the
launcher Pod of the VM needs a node matching its selector and affinity, with room for its CPU,
memory and ephemeral-storage requests. This module restates KubeVirt's rendering for the
paths a GPU VM takes (docs/decisions.md, "Can this VM start, in full", cites each file):

- defaults the VMI mutator applies (`pkg/defaults/defaults.go`): the architecture (the CR's
  default), the machine type (the CR's for that architecture), the CPU model (the CR's, else
  `host-model`), the guest CPU topology (sockets from the CPU limit or request, else one);
- the node selector (`pkg/virt-controller/services/nodeselectorrenderer.go`):
  `kubevirt.io/schedulable`, `kubernetes.io/arch`, `machine-type.node.kubevirt.io/<type>`, the
  CPU model label (not for host-model or host-passthrough), `cpumanager` for dedicated CPUs, the
  CR's `developerConfiguration.nodeSelectors` and the VMI's own `nodeSelector`; a host-model CPU
  adds the affinity "no `node-labeller.kubevirt.io/obsolete-host-model` label";
- the compute container's requests (`pkg/virt-controller/services/renderresources.go`): CPU as
  requested, else vCPUs over `cpuAllocationRatio` (dedicated CPUs: one each), memory as
  requested, else the guest memory over `memoryOvercommit`, plus the overhead of
  `pkg/hypervisor/kvm/hypervisorbackend.go` (`GetMemoryOverhead`), the KubeVirt devices and
  50M of ephemeral storage; the guest-console-log sidecar (`serialconsolelog.go`) adds 5m CPU and
  35M memory unless serial console logging is off.

Not rendered (the answer says so where they apply): hugepages, network-binding plugin memory,
probes, TPM, SEV, supplemental IO-thread pools, reserved overhead, instance types. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from typing import Any

from gpuclass.shared.core.base.k8s import parse_quantity
from gpuclass.shared.core.base.raw import dict_at, list_at
from gpuclass.shared.core.model.detail import CPU, EPHEMERAL, MEMORY, NodeDetail
from gpuclass.shared.core.model.kubevirt import (
    KVM,
    SCHEDULABLE_LABEL,
    TUN,
    VHOST_NET,
    KubeVirtConfig,
)

MI = 1024 * 1024
FIXED_OVERHEAD = (25 + 100 + 25 + 40 + 30) * MI
"""virt-launcher-monitor, virt-launcher, virtlogd, virtqemud and qemu (hypervisorbackend.go)."""
PER_VCPU_OVERHEAD = 8 * MI
IOTHREAD_OVERHEAD = 8 * MI
VIDEO_OVERHEAD = 32 * MI
ARM64_FIRMWARE_OVERHEAD = 128 * MI
VFIO_OVERHEAD = 1024 * MI
DEDICATED_OVERHEAD = 100 * MI
EPHEMERAL_STORAGE = 50 * 1000 * 1000
CONSOLE_LOG_CPU_MILLIS = 5
CONSOLE_LOG_MEMORY = 35 * 1000 * 1000
OBSOLETE_HOST_MODEL = "node-labeller.kubevirt.io/obsolete-host-model"
HOST_MODEL, HOST_PASSTHROUGH = "host-model", "host-passthrough"
DEFAULT_MACHINE_TYPES = {"amd64": "q35", "arm64": "virt", "s390x": "s390-ccw-virtio"}
UNRENDERED = {
    "hugepages": ("domain", "memory", "hugepages"),
    "probes": ("readinessProbe",),
    "TPM": ("domain", "devices", "tpm"),
    "SEV": ("domain", "launchSecurity"),
    "instance types": ("instancetype",),
}


@dataclass(frozen=True, slots=True)
class LauncherAsk:
    """What the launcher Pod asks of its node: labels it selects, a label it must not carry, and
    its effective requests (CPU in millicores, memory and ephemeral storage in bytes, devices and
    GPUs in units)."""

    node_selector: Mapping[str, str]
    forbidden_label: str | None
    cpu_millis: int
    memory: int
    ephemeral_storage: int
    devices: Mapping[str, int]
    unrendered: tuple[str, ...] = ()
    """Parts of the VM this rendering leaves out (hugepages, probes, ...): the figures may be low."""


def _quantity(value: object) -> Decimal | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return parse_quantity(str(value))
    except ValueError:
        return None


def _ceil(value: Decimal) -> int:
    return int(value.to_integral_value(rounding=ROUND_CEILING))


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def vcpus(domain: Mapping[str, Any]) -> int:
    """The guest's vCPUs: sockets x cores x threads as set, else the defaults' topology (sockets
    from the CPU limit, else the request, rounded up), at least one."""
    cpu = dict_at(domain.get("cpu"))
    cores, sockets, threads = (_count(cpu.get(k)) for k in ("cores", "sockets", "threads"))
    if cores or sockets or threads:
        total = 1
        for part in (cores, sockets, threads):
            total *= part or 1
        return total
    resources = dict_at(domain.get("resources"))
    for source in ("limits", "requests"):
        found = _quantity(dict_at(resources.get(source)).get("cpu"))
        if found is not None:
            return max(_ceil(found), 1)
    return 1


def _interfaces_need(spec: Mapping[str, Any], devices: Mapping[str, Any]) -> tuple[bool, bool]:
    """(tun, virtio): the default pod interface counts unless autoattachPodInterface is false."""
    interfaces = [i for i in list_at(devices.get("interfaces")) if isinstance(i, dict)]
    autoattach = devices.get("autoattachPodInterface") is not False
    if not interfaces and autoattach:
        return True, True  # the mutator adds one pod interface of the default model, virtio
    virtio = any(i.get("model") in (None, "", "virtio") for i in interfaces)
    return bool(interfaces) or autoattach, virtio


def _memory_overhead(
    domain: Mapping[str, Any],
    requested: Decimal | None,
    *,
    arch: str,
    count: int,
    config: KubeVirtConfig,
) -> Decimal:
    devices = dict_at(domain.get("devices"))
    # pagetables: one byte per 512 of the memory *request* (in kilo units, rounded up)
    pagetables = Decimal((_ceil(requested / 1000) * 1000) // 512) if requested else Decimal(0)
    overhead = pagetables + FIXED_OVERHEAD + PER_VCPU_OVERHEAD * count + IOTHREAD_OVERHEAD
    if devices.get("autoattachGraphicsDevice") is not False:
        overhead += VIDEO_OVERHEAD
    if arch == "arm64":
        overhead += ARM64_FIRMWARE_OVERHEAD
    sriov = any(isinstance(i, dict) and "sriov" in i for i in list_at(devices.get("interfaces")))
    if list_at(devices.get("gpus")) or list_at(devices.get("hostDevices")) or sriov:
        overhead += VFIO_OVERHEAD
    if dict_at(domain.get("cpu")).get("dedicatedCpuPlacement") is True:
        overhead += DEDICATED_OVERHEAD
    if config.overhead_ratio is not None:  # MultiplyMemory: in kilo units, the addition truncated
        addition = int(float(_ceil(overhead / 1000)) * (config.overhead_ratio - 1.0))
        overhead += addition * 1000
    return overhead


def launcher_ask(vmi: Mapping[str, Any], config: KubeVirtConfig) -> LauncherAsk:
    """The launcher Pod's node requirements for `vmi` (a VMI, or a VM's template as the VMI it
    becomes, with its GPU entries) under the deployed KubeVirt configuration."""
    spec = dict_at(vmi.get("spec"))
    domain = dict_at(spec.get("domain"))
    devices = dict_at(domain.get("devices"))
    resources = dict_at(domain.get("resources"))
    requests, limits = dict_at(resources.get("requests")), dict_at(resources.get("limits"))
    cpu = dict_at(domain.get("cpu"))
    arch = str(spec.get("architecture") or config.default_architecture)
    machine = str(
        dict_at(domain.get("machine")).get("type")
        or config.machine_type
        or config.machine_types.get(arch)
        or DEFAULT_MACHINE_TYPES.get(arch, "")
    )
    model = str(cpu.get("model") or config.cpu_model or HOST_MODEL)
    dedicated = cpu.get("dedicatedCpuPlacement") is True
    selector: dict[str, str] = {SCHEDULABLE_LABEL: "true", "kubernetes.io/arch": arch.lower()}
    selector.update(config.node_selectors)
    selector.update(
        {k: v for k, v in dict_at(spec.get("nodeSelector")).items() if isinstance(v, str)}
    )
    if dedicated:
        selector["cpumanager"] = "true"
    if model not in (HOST_MODEL, HOST_PASSTHROUGH):
        selector[f"cpu-model.node.kubevirt.io/{model}"] = "true"
    if machine:
        selector[f"machine-type.node.kubevirt.io/{machine}"] = "true"
    count = vcpus(domain)
    cpu_request = _quantity(requests.get("cpu")) or _quantity(limits.get("cpu"))
    if cpu_request is None and config.cpu_request is not None and not dedicated:
        cpu_request = config.cpu_request
    if cpu_request is not None:
        cpu_millis = _ceil(cpu_request * 1000)
    elif dedicated:
        cpu_millis = count * 1000
    else:
        cpu_millis = _ceil(Decimal(count * 1000) / config.cpu_allocation_ratio)
    memory_request = _quantity(requests.get("memory"))
    memory = memory_request or _quantity(limits.get("memory"))
    if memory is None:
        guest = _quantity(dict_at(domain.get("memory")).get("guest"))
        memory = guest * 100 / config.memory_overcommit if guest else Decimal(0)
    if resources.get("overcommitGuestOverhead") is not True:
        memory += _memory_overhead(domain, memory_request, arch=arch, count=count, config=config)
    wanted: dict[str, int] = {}
    tun, virtio = _interfaces_need(spec, devices)
    emulation = config.launcher_devices == (TUN,)
    if tun:
        wanted[TUN] = 1
    if virtio and not emulation:
        wanted[VHOST_NET] = 1
    if not emulation:
        hypervisor = next((d for d in config.launcher_devices if d not in (TUN, VHOST_NET)), KVM)
        wanted[hypervisor] = 1
    for gpu in list_at(devices.get("gpus")):
        name = dict_at(gpu).get("deviceName")
        if isinstance(name, str) and name:
            wanted[name] = wanted.get(name, 0) + 1
    for host in list_at(devices.get("hostDevices")):
        name = dict_at(host).get("deviceName")
        if isinstance(name, str) and name:
            wanted[name] = wanted.get(name, 0) + 1
    cpu_total, memory_total = cpu_millis, _ceil(memory)
    if _console_log(devices, config):
        cpu_total += CONSOLE_LOG_CPU_MILLIS
        memory_total += CONSOLE_LOG_MEMORY
    unrendered = tuple(name for name, path in UNRENDERED.items() if _present(spec, path))
    return LauncherAsk(
        node_selector=selector,
        forbidden_label=OBSOLETE_HOST_MODEL if model == HOST_MODEL else None,
        cpu_millis=cpu_total,
        memory=memory_total,
        ephemeral_storage=EPHEMERAL_STORAGE,
        devices=wanted,
        unrendered=unrendered,
    )


def _console_log(devices: Mapping[str, Any], config: KubeVirtConfig) -> bool:
    if devices.get("autoattachSerialConsole") is False:
        return False
    if isinstance(devices.get("logSerialConsole"), bool):
        return bool(devices["logSerialConsole"])
    return not config.serial_console_log_disabled


def _present(spec: Mapping[str, Any], path: tuple[str, ...]) -> bool:
    node: object = spec
    for step in path:
        if not isinstance(node, dict) or step not in node:
            return False
        node = node[step]
    return node is not None


def _mib(amount: int) -> str:
    return f"{amount / MI:.0f}Mi"


def launcher_misfits(
    ask: LauncherAsk, node: NodeDetail, *, used: Mapping[str, int]
) -> tuple[str, ...]:
    """Why the launcher Pod cannot land on `node` beside what its Pods already request, apart from
    readiness, taints and device units (the class figures judge those): empty when it fits. A
    node file that lists no CPU, memory or ephemeral storage is not judged on it."""
    reasons = []
    for key, value in ask.node_selector.items():
        have = node.labels.get(key)
        if have != value:
            shown = f"has {key}={have}" if have is not None else f"has no label {key}"
            reasons.append(f"node selector {key}={value}: the node {shown}")
    if ask.forbidden_label is not None and ask.forbidden_label in node.labels:
        reasons.append(f"host-model CPU: the node carries {ask.forbidden_label}")
    for key, wanted in (
        (CPU, ask.cpu_millis),
        (MEMORY, ask.memory),
        (EPHEMERAL, ask.ephemeral_storage),
    ):
        if key not in node.allocatable:
            continue
        free = max(node.allocatable[key] - used.get(key, 0), 0)
        if free < wanted:
            if key == CPU:
                reasons.append(f"needs {wanted}m CPU, {free}m free")
            else:
                reasons.append(f"needs {_mib(wanted)} {key}, {_mib(free)} free")
    return tuple(reasons)
