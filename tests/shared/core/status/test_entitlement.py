"""vGPU entitlement chains (docs/contract.md 4.5): the platform switch, tenant-root, and every ancestor's label."""

from __future__ import annotations

import pytest

from gpuclass.shared.core.status.entitlement import entitlement_problem, tenant_chain

LABEL = "gpu.cozystack.io/vgpu"
YES = {LABEL: "true"}

NAMESPACES: dict[str, dict[str, str]] = {
    "tenant-root": {},
    "tenant-a": YES,
    "tenant-a-b": YES,
    "tenant-a-b-c": YES,
    "tenant-c": {},
    "tenant-c-d": YES,
    "tenant-g": YES,
    "tenant-g-h": {"other": "true"},
    "tenant-e-f": YES,  # its parent tenant-e does not exist
    "tenant-root-x": YES,
    "tenant-root-y": {},
    "tenant-u": {LABEL: "True"},
    "tenant-v": {LABEL: "yes"},
    "default": YES,
    "kube-system": YES,
}


@pytest.mark.parametrize(
    ("namespace", "chain"),
    [
        pytest.param("tenant-root", [], id="root-entitled-by-platform-alone"),
        pytest.param("tenant-a", ["tenant-a"], id="child-of-root"),
        pytest.param("tenant-a-b", ["tenant-a-b", "tenant-a"], id="grandchild"),
        pytest.param("tenant-a-b-c", ["tenant-a-b-c", "tenant-a-b", "tenant-a"], id="three-levels"),
        pytest.param("tenant-root-x", ["tenant-root-x"], id="root-x-parent-is-root"),
        pytest.param("default", None, id="default-not-a-tenant"),
        pytest.param("tenant-", None, id="bare-prefix"),
        pytest.param("tenant", None, id="no-dash"),
        pytest.param("tenantx", None, id="prefix-without-dash"),
        pytest.param("", None, id="empty"),
    ],
)
def test_tenant_chain(namespace: str, chain: list[str] | None) -> None:
    assert tenant_chain(namespace) == chain


@pytest.mark.parametrize(
    ("namespace", "platform", "problem"),
    [
        pytest.param("tenant-root", True, None, id="tenant-root"),
        pytest.param("tenant-a", True, None, id="tenant-a-labelled"),
        pytest.param("tenant-a-b", True, None, id="tenant-a-b-chain-labelled"),
        pytest.param("tenant-a-b-c", True, None, id="three-levels-labelled"),
        pytest.param("tenant-root-x", True, None, id="tenant-root-x-labelled"),
        pytest.param(
            "tenant-root-y",
            True,
            "tenant namespace tenant-root-y lacks",
            id="tenant-root-y-unlabelled",
        ),
        pytest.param(
            "tenant-c", True, "tenant namespace tenant-c lacks", id="label-missing-on-self"
        ),
        pytest.param(
            "tenant-c-d", True, "tenant namespace tenant-c lacks", id="label-missing-on-ancestor"
        ),
        pytest.param(
            "tenant-g-h", True, "tenant namespace tenant-g-h lacks", id="other-label-on-self"
        ),
        pytest.param(
            "tenant-e-f", True, "tenant namespace tenant-e lacks", id="ancestor-does-not-exist"
        ),
        pytest.param("tenant-z", True, "tenant namespace tenant-z lacks", id="namespace-unknown"),
        pytest.param(
            "tenant-u", True, "tenant namespace tenant-u lacks", id="label-value-True-is-not-true"
        ),
        pytest.param(
            "tenant-v", True, "tenant namespace tenant-v lacks", id="label-value-yes-is-not-true"
        ),
        pytest.param(
            "default",
            True,
            "namespace default is not a tenant namespace",
            id="default-even-if-labelled",
        ),
        pytest.param("kube-system", True, "not a tenant namespace", id="kube-system"),
        pytest.param(
            "tenant-", True, "namespace tenant- is not a tenant namespace", id="bare-prefix"
        ),
        pytest.param("", True, "namespace (none) is not a tenant namespace", id="no-namespace"),
        pytest.param(
            "tenant-root", False, "vGPU is not enabled on this platform", id="platform-off-root"
        ),
        pytest.param(
            "tenant-a", False, "vGPU is not enabled on this platform", id="platform-off-labelled"
        ),
        pytest.param(
            "default", False, "vGPU is not enabled", id="platform-off-wins-over-other-reasons"
        ),
    ],
)
def test_entitlement(namespace: str, platform: bool, problem: str | None) -> None:
    result = entitlement_problem(namespace, NAMESPACES, vgpu_entitled=platform)
    if problem is None:
        assert result is None
    else:
        assert result is not None and problem in result


def test_refusal_says_what_to_do() -> None:
    result = entitlement_problem("tenant-c", NAMESPACES, vgpu_entitled=True)
    assert result is not None
    assert f"{LABEL}=true" in result and "ask the platform" in result
