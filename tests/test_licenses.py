"""Licence copies as data (docs/contract.md sections 1 and 6): which copies, held or deleted, and how."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from gpuclass.shared import names
from gpuclass.shared.licenses import (
    CopyPlan,
    desired_copies,
    gridd_conf,
    plan_copies,
    secret_body,
)
from gpuclass.shared.snapshot import Redacted, SecretRecord, compact_class
from gpuclass.shared.vmiuse import VMIUse, compact_vmi_use, license_volume_secret

TOKEN = base64.b64encode(b"not-a-real-token").decode()
LICENSED = compact_class(
    {
        "metadata": {"name": "lic"},
        "spec": {
            "vendor": "v",
            "model": "m",
            "mode": "vgpu",
            "profile": "p",
            "source": {"devicePlugin": {"resourceName": "example.com/lic"}},
            "license": {"secretName": "src", "featureType": 4},
        },
    }
)
BYOL = compact_class(
    {
        "metadata": {"name": "byol"},
        "spec": {
            "vendor": "v",
            "model": "m",
            "mode": "vgpu",
            "profile": "p",
            "source": {"devicePlugin": {"resourceName": "example.com/byol"}},
        },
    }
)
CLASSES = {r.name: r for r in (LICENSED, BYOL) if r}
SOURCE = {
    ("cozy-system", "src"): SecretRecord(
        "cozy-system", "src", {}, {names.TOKEN_KEY: Redacted(TOKEN)}
    )
}
NAMESPACES: dict[str, dict[str, str]] = {
    "tenant-root": {},
    "tenant-a": {names.VGPU_ENTITLEMENT_LABEL: "true"},
    "tenant-a-b": {names.VGPU_ENTITLEMENT_LABEL: "true"},
    "tenant-c": {},
    "tenant-c-d": {names.VGPU_ENTITLEMENT_LABEL: "true"},
}
MANAGED = {names.MANAGED_BY_LABEL: names.MANAGED_BY_VALUE}


def vmi(namespace: str, secret: str | None = "gpuclass-license-lic", name: str = "vm") -> VMIUse:
    return VMIUse(namespace, name, ("lic",), frozenset({"example.com/lic"}), secret)


def plan(
    vmis: list[VMIUse], *, entitled: bool = True, secrets: dict[Any, SecretRecord] | None = None
) -> CopyPlan:
    return desired_copies(
        vmis,
        CLASSES,
        secrets=SOURCE if secrets is None else secrets,
        namespaces=NAMESPACES,
        license_namespace="cozy-system",
        vgpu_entitled=entitled,
    )


def content(feature_type: int = 4) -> dict[str, Redacted]:
    return {
        names.TOKEN_KEY: Redacted(TOKEN),
        names.GRIDD_KEY: Redacted(base64.b64encode(gridd_conf(feature_type).encode()).decode()),
    }


@pytest.mark.parametrize(
    ("vmis", "entitled", "desired", "held"),
    [
        pytest.param(
            [vmi("tenant-a")],
            True,
            {("tenant-a", "gpuclass-license-lic")},
            set(),
            id="entitled-tenant-gets-copy",
        ),
        pytest.param(
            [vmi("tenant-root")],
            True,
            {("tenant-root", "gpuclass-license-lic")},
            set(),
            id="root-entitled-by-platform",
        ),
        pytest.param(
            [vmi("tenant-a-b")],
            True,
            {("tenant-a-b", "gpuclass-license-lic")},
            set(),
            id="child-with-entitled-chain",
        ),
        pytest.param([vmi("tenant-a")], False, set(), set(), id="platform-entitlement-off-no-copy"),
        pytest.param([vmi("tenant-c")], True, set(), set(), id="unlabelled-tenant-no-copy"),
        pytest.param([vmi("tenant-c-d")], True, set(), set(), id="unentitled-parent-no-copy"),
        pytest.param([vmi("default")], True, set(), set(), id="non-tenant-namespace-no-copy"),
        pytest.param([vmi("tenant-a", None)], True, set(), set(), id="no-licence-volume-no-copy"),
        pytest.param(
            [vmi("tenant-a", "gpuclass-license-byol")],
            True,
            set(),
            {("tenant-a", "gpuclass-license-byol")},
            id="byol-class-referenced-is-held",
        ),
        pytest.param(
            [vmi("tenant-a", "gpuclass-license-gone")],
            True,
            set(),
            {("tenant-a", "gpuclass-license-gone")},
            id="missing-class-referenced-is-held",
        ),
        pytest.param(
            [vmi("tenant-a", name="one"), vmi("tenant-a", name="two"), vmi("tenant-a-b")],
            True,
            {("tenant-a", "gpuclass-license-lic"), ("tenant-a-b", "gpuclass-license-lic")},
            set(),
            id="one-copy-per-namespace",
        ),
    ],
)
def test_desired_copies(
    vmis: list[VMIUse], entitled: bool, desired: set[Any], held: set[Any]
) -> None:
    result = plan(vmis, entitled=entitled)
    assert set(result.desired) == desired
    assert set(result.held) == held


def test_copy_content_is_token_and_gridd_conf() -> None:
    copy = plan([vmi("tenant-a")]).desired[("tenant-a", "gpuclass-license-lic")]
    assert copy.class_name == "lic"
    assert copy.data == content(4)
    assert gridd_conf(4) == "FeatureType=4\n"


@pytest.mark.parametrize(
    "secrets",
    [
        pytest.param({}, id="source-missing"),
        pytest.param(
            {("cozy-system", "src"): SecretRecord("cozy-system", "src", {}, {})},
            id="token-key-missing",
        ),
        pytest.param(
            {
                ("cozy-system", "src"): SecretRecord(
                    "cozy-system", "src", {}, {names.TOKEN_KEY: Redacted("")}
                )
            },
            id="token-empty",
        ),
        pytest.param(
            {("other", "src"): SOURCE[("cozy-system", "src")]}, id="source-in-other-namespace"
        ),
    ],
)
def test_unusable_source_holds_the_copy(secrets: dict[Any, SecretRecord]) -> None:
    result = plan([vmi("tenant-a")], secrets=secrets)
    assert not result.desired
    assert result.held == {("tenant-a", "gpuclass-license-lic")}


def secret(
    namespace: str, name: str, data: dict[str, Redacted], labels: dict[str, str] | None = None
) -> SecretRecord:
    return SecretRecord(namespace, name, MANAGED if labels is None else labels, data)


@pytest.mark.parametrize(
    ("vmis", "existing", "expected"),
    [
        pytest.param(
            [vmi("tenant-a")],
            {},
            [("create", "tenant-a", "gpuclass-license-lic")],
            id="create-missing",
        ),
        pytest.param(
            [vmi("tenant-a")],
            {
                ("tenant-a", "gpuclass-license-lic"): secret(
                    "tenant-a", "gpuclass-license-lic", content()
                )
            },
            [],
            id="unchanged-copy-no-write",
        ),
        pytest.param(
            [vmi("tenant-a")],
            {
                ("tenant-a", "gpuclass-license-lic"): secret(
                    "tenant-a", "gpuclass-license-lic", content(1)
                )
            },
            [("update", "tenant-a", "gpuclass-license-lic")],
            id="feature-type-changed-update",
        ),
        pytest.param(
            [vmi("tenant-a")],
            {
                ("tenant-a", "gpuclass-license-lic"): secret(
                    "tenant-a",
                    "gpuclass-license-lic",
                    {**content(), names.TOKEN_KEY: Redacted("b2xk")},
                )
            },
            [("update", "tenant-a", "gpuclass-license-lic")],
            id="source-token-changed-update",
        ),
        pytest.param(
            [],
            {
                ("tenant-a", "gpuclass-license-lic"): secret(
                    "tenant-a", "gpuclass-license-lic", content()
                )
            },
            [("delete", "tenant-a", "gpuclass-license-lic")],
            id="unreferenced-copy-deleted",
        ),
        pytest.param(
            [vmi("tenant-c")],
            {
                ("tenant-c", "gpuclass-license-lic"): secret(
                    "tenant-c", "gpuclass-license-lic", content()
                )
            },
            [("delete", "tenant-c", "gpuclass-license-lic")],
            id="entitlement-lost-copy-deleted",
        ),
        pytest.param(
            [vmi("tenant-a", "gpuclass-license-byol")],
            {
                ("tenant-a", "gpuclass-license-byol"): secret(
                    "tenant-a", "gpuclass-license-byol", content()
                )
            },
            [],
            id="held-copy-left-alone",
        ),
        pytest.param(
            [vmi("tenant-a")],
            {
                ("tenant-a", "gpuclass-license-lic"): secret(
                    "tenant-a", "gpuclass-license-lic", {}, labels={}
                )
            },
            [("foreign", "tenant-a", "gpuclass-license-lic")],
            id="foreign-secret-reported-not-written",
        ),
        pytest.param(
            [],
            {
                ("tenant-a", "gpuclass-license-lic"): secret(
                    "tenant-a", "gpuclass-license-lic", {}, labels={}
                )
            },
            [],
            id="foreign-secret-never-deleted",
        ),
        pytest.param(
            [],
            {("tenant-a", "other"): secret("tenant-a", "other", {})},
            [],
            id="managed-non-copy-name-ignored",
        ),
    ],
)
def test_plan_copies(
    vmis: list[VMIUse], existing: dict[Any, SecretRecord], expected: list[tuple[str, str, str]]
) -> None:
    actions = plan_copies(plan(vmis), existing)
    assert [(a.action, a.namespace, a.name) for a in actions] == expected


def test_secret_body_has_label_keys_and_version() -> None:
    copy = plan([vmi("tenant-a")]).desired[("tenant-a", "gpuclass-license-lic")]
    body = secret_body(copy, resource_version="7")
    assert body["metadata"] == {
        "name": "gpuclass-license-lic",
        "namespace": "tenant-a",
        "labels": MANAGED,
        "resourceVersion": "7",
    }
    assert body["data"] == {k: v.reveal() for k, v in content().items()}
    assert body["type"] == "Opaque"


def test_token_never_in_repr() -> None:
    copy = plan([vmi("tenant-a")]).desired[("tenant-a", "gpuclass-license-lic")]
    assert TOKEN not in repr(copy)
    assert TOKEN not in repr(plan_copies(plan([vmi("tenant-a")]), {}))


@pytest.mark.parametrize(
    ("volumes", "expected"),
    [
        pytest.param(
            [{"name": "gpulicense", "secret": {"secretName": "gpuclass-license-x"}}],
            "gpuclass-license-x",
            id="licence-volume",
        ),
        pytest.param(
            [{"name": "other", "secret": {"secretName": "gpuclass-license-x"}}],
            None,
            id="other-volume-name-does-not-count",
        ),
        pytest.param(
            [{"name": "gpulicense", "secret": {"secretName": "mine"}}], None, id="not-a-copy-name"
        ),
        pytest.param(
            [{"name": "gpulicense", "configMap": {"name": "gpuclass-license-x"}}],
            None,
            id="not-a-secret",
        ),
        pytest.param("junk", None, id="malformed-volumes"),
    ],
)
def test_license_volume_secret(volumes: object, expected: str | None) -> None:
    assert license_volume_secret({"volumes": volumes}) == expected


def test_compact_vmi_use_reads_selection_and_devices() -> None:
    record = compact_vmi_use(
        {
            "metadata": {
                "name": "vm",
                "namespace": "tenant-a",
                "annotations": {
                    names.SELECTION_ANNOTATION: '[{"className": "lic"}, {"className": "lic", "count": 2}]'
                },
            },
            "spec": {
                "domain": {"devices": {"gpus": [{"name": "gpu1", "deviceName": "example.com/lic"}]}}
            },
        }
    )
    assert record == VMIUse("tenant-a", "vm", ("lic",), frozenset({"example.com/lic"}), None)
    assert compact_vmi_use({"metadata": {"name": "x"}}) is None
