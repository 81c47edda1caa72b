"""KubeVirt as its own code reads the cluster (shared/core/model/kubevirt.py).

The expected values restate KubeVirt v1.8.4 (docs/decisions.md, "Free means a VM can start
there"): ClusterConfig reads one CR that is not being deleted and has a `status.phase`;
launcher Pods select `kubevirt.io/schedulable: "true"` and request the hypervisor device, `tun`
and `vhost-net`, or only `tun` under `useEmulation`.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuclass.shared.core.model.kubevirt import (
    KVM,
    MSHV,
    TUN,
    VHOST_NET,
    handler_state,
    kubevirt_devices,
    read_kubevirt,
)


def cr(
    name: str,
    *,
    phase: str | None = "Deployed",
    created: str = "2026-01-01T00:00:00Z",
    deleting: bool = False,
    configuration: dict[str, Any] | None = None,
    pci: tuple[str, ...] = (),
) -> dict[str, Any]:
    config = dict(configuration or {})
    if pci:
        config["permittedHostDevices"] = {"pciHostDevices": [{"resourceName": r} for r in pci]}
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "cozy-kubevirt",
        "creationTimestamp": created,
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-02-01T00:00:00Z"
    obj: dict[str, Any] = {"kind": "KubeVirt", "metadata": meta, "spec": {"configuration": config}}
    if phase is not None:
        obj["status"] = {"phase": phase}
    return obj


@pytest.mark.parametrize(
    ("labels", "state"),
    [
        pytest.param({"kubevirt.io/schedulable": "true"}, "ready", id="heartbeat-fresh"),
        pytest.param({"kubevirt.io/schedulable": "false"}, "notReady", id="heartbeat-stale"),
        pytest.param({"kubevirt.io/schedulable": "True"}, "notReady", id="not-exactly-true"),
        pytest.param({"other": "true"}, "absent", id="no-virt-handler"),
        pytest.param(None, "absent", id="no-labels"),
        pytest.param(["kubevirt.io/schedulable"], "absent", id="wrong-shape"),
    ],
)
def test_virt_handler_state_comes_from_the_schedulable_label(labels: object, state: str) -> None:
    assert handler_state(labels) == state


def test_a_node_advertises_the_kubevirt_devices_it_holds_units_of() -> None:
    held = {KVM: 1000, TUN: 0, VHOST_NET: 5, "example.com/gpu": 4}
    assert kubevirt_devices(held) == {KVM, VHOST_NET}


def test_the_deployed_cr_is_read_and_one_without_a_phase_is_not() -> None:
    config = read_kubevirt([cr("second", phase=None, pci=("b/gpu",)), cr("first", pci=("a/gpu",))])
    assert config.deployed == "cozy-kubevirt/first"
    assert config.permitted == {"a/gpu"}
    assert config.problem() is None


@pytest.mark.parametrize(
    "crs",
    [
        pytest.param([cr("kubevirt", phase=None, pci=("a/gpu",))], id="no-phase"),
        pytest.param([cr("kubevirt", phase="", pci=("a/gpu",))], id="empty-phase"),
        pytest.param([cr("kubevirt", deleting=True, pci=("a/gpu",))], id="being-deleted"),
    ],
)
def test_a_cr_kubevirt_does_not_read_permits_nothing_and_says_why(
    crs: list[dict[str, Any]],
) -> None:
    config = read_kubevirt(crs)
    assert config.deployed is None
    assert config.permitted == frozenset()
    problem = config.problem() or ""
    assert "cozy-kubevirt/kubevirt is not deployed" in problem


def test_no_cr_at_all_says_so() -> None:
    assert read_kubevirt([]).problem() == "no KubeVirt CR found: configure KubeVirt first"


def test_of_two_deployed_crs_the_oldest_is_read() -> None:
    newer = cr("a-newer", created="2026-03-01T00:00:00Z", pci=("new/gpu",))
    older = cr("z-older", created="2026-01-01T00:00:00Z", pci=("old/gpu",))
    assert read_kubevirt([newer, older]).permitted == {"old/gpu"}
    assert read_kubevirt([older, newer]).permitted == {"old/gpu"}


@pytest.mark.parametrize(
    ("configuration", "devices"),
    [
        pytest.param({}, (KVM, TUN, VHOST_NET), id="defaults"),
        pytest.param({"developerConfiguration": {"useEmulation": True}}, (TUN,), id="emulation"),
        pytest.param(
            {"developerConfiguration": {"useEmulation": "true"}},
            (KVM, TUN, VHOST_NET),
            id="emulation-not-a-bool",
        ),
        pytest.param(
            {
                "developerConfiguration": {"featureGates": ["ConfigurableHypervisor"]},
                "hypervisors": [{"name": "hyperv-direct"}],
            },
            (MSHV, TUN, VHOST_NET),
            id="hyperv-direct",
        ),
        pytest.param(
            {"hypervisors": [{"name": "hyperv-direct"}]},
            (KVM, TUN, VHOST_NET),
            id="hyperv-without-its-gate",
        ),
    ],
)
def test_the_launcher_devices_follow_the_cr(
    configuration: dict[str, Any], devices: tuple[str, ...]
) -> None:
    assert read_kubevirt([cr("kubevirt", configuration=configuration)]).launcher_devices == devices


@pytest.mark.parametrize(
    "junk",
    [
        pytest.param({"kind": "KubeVirt"}, id="no-metadata"),
        pytest.param({"metadata": 5, "status": [], "spec": "x"}, id="wrong-shapes"),
        pytest.param({"metadata": {"name": 3}, "status": {"phase": 7}}, id="phase-not-a-string"),
    ],
)
def test_malformed_crs_are_read_as_not_deployed(junk: dict[str, Any]) -> None:
    config = read_kubevirt([junk])
    assert config.deployed is None
    assert config.problem()
