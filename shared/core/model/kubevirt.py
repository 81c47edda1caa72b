"""KubeVirt as its own code reads the cluster: which KubeVirt CR configures it, and which nodes its
launcher Pod can land on (docs/contract.md 6.1, docs/decisions.md "Free means a VM can start there").

Facts from KubeVirt v1.8.4, restated (the files are cited in docs/decisions.md):

- KubeVirt's ClusterConfig (`pkg/virt-config/configuration.go`, `GetConfigFromKubeVirtCR`) reads
  one CR: a CR of its namespace that is not being deleted and whose `status.phase` is set.
  virt-operator sets a phase only on a CR it deploys, and deploys none while two CRs exist
  (`pkg/virt-operator/kubevirt.go`, `checkForActiveInstall`), so a second CR is never
  deployed. A CR without a phase configures nothing.
- Every launcher Pod selects `kubevirt.io/schedulable: "true"` (`pkg/virt-controller/services/
  nodeselectorrenderer.go`): virt-handler's heartbeat writes it, and virt-controller sets it to
  "false" when the heartbeat goes stale; a node without virt-handler has no such label.
- The launcher requests one hypervisor device (`devices.kubevirt.io/kvm`, or `mshv` for the
  `hyperv-direct` hypervisor under the ConfigurableHypervisor feature gate), one `tun` and, for a
  virtio interface, one `vhost-net`; with `developerConfiguration.useEmulation` it requests neither
  the hypervisor device nor `vhost-net` (`pkg/virt-controller/services/renderresources.go`,
  `getRequiredResources`; `pkg/network/vmispec/devices.go`). virt-handler's device plugins
  advertise them. A class's figures count the VM KubeVirt's defaults make: one pod-network
  interface of model virtio, hence all three (or `tun` alone under emulation).

Pure: raw objects in, values out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal

from gpuclass.shared.core.base.k8s import parse_quantity
from gpuclass.shared.core.base.raw import dict_at, list_at

SCHEDULABLE_LABEL = "kubevirt.io/schedulable"
"""virt-handler's label on a node it runs on: "true" while its heartbeat is fresh."""
DEVICE_PREFIX = "devices.kubevirt.io/"
KVM = DEVICE_PREFIX + "kvm"
MSHV = DEVICE_PREFIX + "mshv"
TUN = DEVICE_PREFIX + "tun"
VHOST_NET = DEVICE_PREFIX + "vhost-net"
DEFAULT_LAUNCHER_DEVICES: tuple[str, ...] = (KVM, TUN, VHOST_NET)
"""What the default VM's launcher requests under a CR with no device-related setting."""
HYPERV_DIRECT = "hyperv-direct"
CONFIGURABLE_HYPERVISOR = "ConfigurableHypervisor"

Handler = Literal["absent", "notReady", "ready"]
"""virt-handler on a node, read from its `kubevirt.io/schedulable` label: no label, not "true",
"true"."""


def handler_state(labels: object) -> Handler:
    """The node's virt-handler state from its labels (any shape: a wrong one reads as absent)."""
    value = labels.get(SCHEDULABLE_LABEL) if isinstance(labels, dict) else None
    if value is None:
        return "absent"
    return "ready" if value == "true" else "notReady"


def kubevirt_devices(allocatable: Mapping[str, int]) -> frozenset[str]:
    """The KubeVirt devices a node advertises (allocatable above 0): what launcher fits read."""
    return frozenset(k for k, v in allocatable.items() if v > 0 and k.startswith(DEVICE_PREFIX))


def _host_device_names(obj: Mapping[str, Any], *keys: str) -> frozenset[str]:
    permitted = dict_at(
        dict_at(dict_at(obj.get("spec")).get("configuration")).get("permittedHostDevices")
    )
    found: set[str] = set()
    for key in keys:
        for entry in list_at(permitted.get(key)):
            if isinstance(entry, dict) and isinstance(entry.get("resourceName"), str):
                found.add(entry["resourceName"])
    return frozenset(found)


def permitted_resources(obj: Mapping[str, Any]) -> frozenset[str]:
    """Every resourceName in a KubeVirt CR's permittedHostDevices, PCI and mediated alike."""
    return _host_device_names(obj, "pciHostDevices", "mediatedDevices")


def mediated_resources(obj: Mapping[str, Any]) -> frozenset[str]:
    """The resourceNames of a KubeVirt CR's `mediatedDevices`: vGPUs, whether a class names them
    or not (docs/contract.md 4.5: raw requests are no way around entitlement)."""
    return _host_device_names(obj, "mediatedDevices")


def launcher_devices(obj: Mapping[str, Any]) -> tuple[str, ...]:
    """The KubeVirt devices the default VM's launcher requests under this CR (module docstring)."""
    config = dict_at(dict_at(obj.get("spec")).get("configuration"))
    developer = dict_at(config.get("developerConfiguration"))
    if developer.get("useEmulation") is True:
        return (TUN,)
    gates = list_at(developer.get("featureGates"))
    hypervisors = list_at(config.get("hypervisors"))
    first = dict_at(hypervisors[0]) if hypervisors else {}
    hypervisor = (
        MSHV if CONFIGURABLE_HYPERVISOR in gates and first.get("name") == HYPERV_DIRECT else KVM
    )
    return (hypervisor, TUN, VHOST_NET)


@dataclass(frozen=True, slots=True)
class KubeVirtConfig:
    """What the cluster's KubeVirt CRs configure, as KubeVirt reads them.

    `deployed` is the CR KubeVirt uses (`namespace/name`), None when none is; then nothing is
    permitted and `present` lists the CRs that exist but are not deployed (empty: no CR at all).
    """

    deployed: str | None = None
    permitted: frozenset[str] = frozenset()
    mediated: frozenset[str] = frozenset()
    launcher_devices: tuple[str, ...] = DEFAULT_LAUNCHER_DEVICES
    present: tuple[str, ...] = ()
    # What one VM's launcher asks besides (shared/core/model/launcher.py), KubeVirt's defaults:
    default_architecture: str = "amd64"
    machine_type: str = ""
    """The deprecated cluster-wide `machineType`; wins over the per-architecture one."""
    machine_types: Mapping[str, str] = field(default_factory=dict)
    cpu_model: str = ""
    cpu_allocation_ratio: int = 10
    memory_overcommit: int = 100
    cpu_request: Decimal | None = None
    """`cpuRequest`, only when it is not KubeVirt's default 100m (the mutator then sets it)."""
    overhead_ratio: float | None = None
    node_selectors: Mapping[str, str] = field(default_factory=dict)
    serial_console_log_disabled: bool = False

    def problem(self) -> str | None:
        """Why KubeVirt permits nothing, in the words the classes' condition carries; None when a
        CR is deployed."""
        if self.deployed is not None:
            return None
        if not self.present:
            return "no KubeVirt CR found: configure KubeVirt first"
        listed = ", ".join(self.present[:3]) + (" and more" if len(self.present) > 3 else "")
        return (
            f"KubeVirt CR {listed} is not deployed (no status.phase, or being deleted): KubeVirt "
            "reads its configuration only from the CR virt-operator deployed"
        )


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = dict_at(obj.get("metadata"))
    created = meta.get("creationTimestamp")
    name = meta.get("name")
    return (created if isinstance(created, str) else "", name if isinstance(name, str) else "")


def _label(obj: Mapping[str, Any]) -> str:
    meta = dict_at(obj.get("metadata"))
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


def is_deployed(obj: Mapping[str, Any]) -> bool:
    """KubeVirt reads this CR: not being deleted, and virt-operator has given it a phase."""
    meta = dict_at(obj.get("metadata"))
    phase = dict_at(obj.get("status")).get("phase")
    return not meta.get("deletionTimestamp") and isinstance(phase, str) and bool(phase)


def read_kubevirt(crs: Iterable[Mapping[str, Any]]) -> KubeVirtConfig:
    """The configuration of the one CR KubeVirt uses, among the CRs of its namespace.

    Several deployed CRs cannot come from virt-operator (it deploys none while two exist);
    for files or a race that hold them anyway, the oldest (creationTimestamp, then name) is
    read, a deterministic stand-in for KubeVirt's unordered pick.
    """
    listed = [obj for obj in crs if isinstance(obj, Mapping)]
    deployed = sorted((obj for obj in listed if is_deployed(obj)), key=_key)
    if not deployed:
        return KubeVirtConfig(present=tuple(sorted(_label(obj) for obj in listed)))
    chosen = deployed[0]
    config = dict_at(dict_at(chosen.get("spec")).get("configuration"))
    developer = dict_at(config.get("developerConfiguration"))
    architectures = dict_at(config.get("architectureConfiguration"))
    return KubeVirtConfig(
        deployed=_label(chosen),
        permitted=permitted_resources(chosen),
        mediated=mediated_resources(chosen),
        launcher_devices=launcher_devices(chosen),
        default_architecture=_text(architectures.get("defaultArchitecture"))
        or _text(dict_at(chosen.get("status")).get("defaultArchitecture"))
        or "amd64",
        machine_type=_text(config.get("machineType")),
        machine_types={
            arch: machine
            for arch in ("amd64", "arm64", "s390x")
            if (machine := _text(dict_at(architectures.get(arch)).get("machineType")))
        },
        cpu_model=_text(config.get("cpuModel")),
        cpu_allocation_ratio=_positive(developer.get("cpuAllocationRatio"), 10),
        memory_overcommit=_positive(developer.get("memoryOvercommit"), 100),
        cpu_request=_cpu_request(config.get("cpuRequest")),
        overhead_ratio=_ratio(config.get("additionalGuestMemoryOverheadRatio")),
        node_selectors={
            k: v
            for k, v in dict_at(developer.get("nodeSelectors")).items()
            if isinstance(k, str) and isinstance(v, str)
        },
        serial_console_log_disabled=dict_at(config.get("virtualMachineOptions")).get(
            "disableSerialConsoleLog"
        )
        is not None,
    )


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _positive(value: object, default: int) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= 10**6:
        return value
    return default


def _cpu_request(value: object) -> Decimal | None:
    try:
        parsed = parse_quantity(value) if isinstance(value, str) else None
    except ValueError:
        return None
    return None if parsed is None or parsed == Decimal("0.1") else parsed


def _ratio(value: object) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        ratio = float(value)
    except ValueError:
        return None
    return ratio if 1.0 <= ratio <= 100.0 else None
