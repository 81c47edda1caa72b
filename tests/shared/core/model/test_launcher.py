"""The launcher Pod's node requirements (shared/core/model/launcher.py) against KubeVirt's own
rendering.

The expected figures of the first rows are what KubeVirt v1.8.4's TemplateService rendered for the
same VMIs on a real API server (tests/e2e/test_e2e_launcher_truth.py renders them again each run
and compares): the compute container's requests plus the guest-console-log sidecar's 5m CPU and
35M memory. The other rows restate one rule each of docs/decisions.md, "Can this VM start, in full".
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuclass.shared.core.model.detail import NodeDetail
from gpuclass.shared.core.model.kubevirt import KubeVirtConfig, read_kubevirt
from gpuclass.shared.core.model.launcher import launcher_ask, launcher_misfits

MI = 2**20
CONSOLE_CPU, CONSOLE_MEMORY = 5, 35_000_000
DEFAULT = KubeVirtConfig()
DISK = {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]}


def vmi(domain: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"kind": "VirtualMachineInstance", "spec": {"domain": domain, **spec}}


def configured(**configuration: Any) -> KubeVirtConfig:
    return read_kubevirt(
        [
            {
                "metadata": {"name": "kubevirt", "namespace": "cozy-kubevirt"},
                "spec": {"configuration": configuration},
                "status": {"phase": "Deployed"},
            }
        ]
    )


@pytest.mark.parametrize(
    ("obj", "cpu", "memory", "devices"),
    [
        pytest.param(
            vmi({"devices": DISK, "memory": {"guest": "1Gi"}}),
            100 + CONSOLE_CPU,
            1292 * MI + CONSOLE_MEMORY,
            {
                "devices.kubevirt.io/kvm": 1,
                "devices.kubevirt.io/tun": 1,
                "devices.kubevirt.io/vhost-net": 1,
            },
            id="rendered-1-vcpu-1Gi-guest",
        ),
        pytest.param(
            vmi(
                {
                    "cpu": {"cores": 4},
                    "devices": {
                        **DISK,
                        "gpus": [{"name": "g1", "deviceName": "dump.example.com/gpu"}],
                    },
                    "resources": {"requests": {"memory": "3Gi"}},
                }
            ),
            400 + CONSOLE_CPU,
            4607442945 + CONSOLE_MEMORY,
            {
                "devices.kubevirt.io/kvm": 1,
                "devices.kubevirt.io/tun": 1,
                "devices.kubevirt.io/vhost-net": 1,
                "dump.example.com/gpu": 1,
            },
            id="rendered-4-cores-3Gi-request-one-gpu",
        ),
    ],
)
def test_requests_equal_kubevirts_rendering(
    obj: dict[str, Any], cpu: int, memory: int, devices: dict[str, int]
) -> None:
    ask = launcher_ask(obj, DEFAULT)
    assert (ask.cpu_millis, ask.memory, dict(ask.devices)) == (cpu, memory, devices)
    assert ask.ephemeral_storage == 50_000_000
    assert dict(ask.node_selector) == {
        "kubevirt.io/schedulable": "true",
        "kubernetes.io/arch": "amd64",
        "machine-type.node.kubevirt.io/q35": "true",
    }
    assert ask.forbidden_label == "node-labeller.kubevirt.io/obsolete-host-model"


def test_the_cr_and_the_vmi_shape_the_selector() -> None:
    config = configured(
        architectureConfiguration={"defaultArchitecture": "arm64"},
        cpuModel="Skylake",
        developerConfiguration={"nodeSelectors": {"pool": "vm"}},
    )
    ask = launcher_ask(
        vmi(
            {"devices": DISK, "cpu": {"dedicatedCpuPlacement": True, "cores": 2}},
            nodeSelector={"zone": "a"},
        ),
        config,
    )
    assert dict(ask.node_selector) == {
        "kubevirt.io/schedulable": "true",
        "kubernetes.io/arch": "arm64",
        "machine-type.node.kubevirt.io/virt": "true",
        "cpu-model.node.kubevirt.io/Skylake": "true",
        "cpumanager": "true",
        "pool": "vm",
        "zone": "a",
    }
    assert ask.forbidden_label is None  # not host-model
    assert ask.cpu_millis == 2000 + CONSOLE_CPU  # dedicated: one CPU each


@pytest.mark.parametrize(
    ("configuration", "domain", "cpu", "memory"),
    [
        pytest.param(
            {"developerConfiguration": {"cpuAllocationRatio": 4}},
            {"cpu": {"sockets": 2}, "memory": {"guest": "1Gi"}},
            500,
            1024 * MI + 276 * MI,
            id="cpu-allocation-ratio-and-8Mi-per-vcpu",
        ),
        pytest.param(
            {"developerConfiguration": {"memoryOvercommit": 200}},
            {"memory": {"guest": "2Gi"}},
            100,
            1024 * MI + 268 * MI,
            id="memory-overcommit-halves-the-guest",
        ),
        pytest.param(
            {"virtualMachineOptions": {"disableSerialConsoleLog": {}}},
            {"memory": {"guest": "1Gi"}},
            100,
            1292 * MI,
            id="no-console-log-sidecar",
        ),
        pytest.param(
            {},
            {"memory": {"guest": "1Gi"}, "devices": {"autoattachGraphicsDevice": False}},
            100,
            1260 * MI,
            id="no-video-device",
        ),
        pytest.param(
            {"additionalGuestMemoryOverheadRatio": "2"},
            {"memory": {"guest": "1Gi"}},
            100,
            1024 * MI + 268 * MI + (268 * MI + 999) // 1000 * 1000,
            id="overhead-ratio-in-kilo-units",
        ),
    ],
)
def test_one_setting_at_a_time(
    configuration: dict[str, Any], domain: dict[str, Any], cpu: int, memory: int
) -> None:
    ask = launcher_ask(vmi(domain), configured(**configuration))
    console = 0 if "virtualMachineOptions" in configuration else (CONSOLE_CPU, CONSOLE_MEMORY)
    extra_cpu, extra_memory = console or (0, 0)
    assert (ask.cpu_millis, ask.memory) == (cpu + extra_cpu, memory + extra_memory)


def test_emulation_asks_only_tun() -> None:
    ask = launcher_ask(
        vmi({"devices": DISK}), configured(developerConfiguration={"useEmulation": True})
    )
    assert dict(ask.devices) == {"devices.kubevirt.io/tun": 1}


def test_what_is_not_rendered_is_named() -> None:
    ask = launcher_ask(
        vmi({"memory": {"hugepages": {"pageSize": "2Mi"}}}, readinessProbe={}), DEFAULT
    )
    assert ask.unrendered == ("hugepages", "probes")


@pytest.mark.parametrize(
    ("labels", "allocatable", "used", "reasons"),
    [
        pytest.param(
            {
                "kubevirt.io/schedulable": "true",
                "kubernetes.io/arch": "amd64",
                "machine-type.node.kubevirt.io/q35": "true",
            },
            {"cpu": 4000, "memory": 8 * 2**30},
            {},
            (),
            id="fits",
        ),
        pytest.param(
            {"kubevirt.io/schedulable": "true", "kubernetes.io/arch": "arm64"},
            {},
            {},
            (
                "node selector kubernetes.io/arch=amd64: the node has kubernetes.io/arch=arm64",
                "node selector machine-type.node.kubevirt.io/q35=true: the node has no label "
                "machine-type.node.kubevirt.io/q35",
            ),
            id="wrong-arch-no-machine-type-cpu-unknown",
        ),
        pytest.param(
            {
                "kubevirt.io/schedulable": "true",
                "kubernetes.io/arch": "amd64",
                "machine-type.node.kubevirt.io/q35": "true",
                "node-labeller.kubevirt.io/obsolete-host-model": "true",
            },
            {"cpu": 4000, "memory": 8 * 2**30},
            {"cpu": 3950, "memory": 7 * 2**30},
            (
                "host-model CPU: the node carries node-labeller.kubevirt.io/obsolete-host-model",
                "needs 105m CPU, 50m free",
                "needs 1325Mi memory, 1024Mi free",
            ),
            id="obsolete-host-model-cpu-and-memory",
        ),
    ],
)
def test_misfits_name_each_reason(
    labels: dict[str, str],
    allocatable: dict[str, int],
    used: dict[str, int],
    reasons: tuple[str, ...],
) -> None:
    ask = launcher_ask(vmi({"devices": DISK, "memory": {"guest": "1Gi"}}), DEFAULT)
    assert launcher_misfits(ask, NodeDetail(labels, allocatable), used=used) == reasons
