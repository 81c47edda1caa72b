"""License copies as data (docs/contract.md sections 1 and 6): which copies, held or deleted, and how;
the record of copies; and what says a VMI is really starting (its bound launcher Pod)."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from gpuclass.reconciler.state.licenses import (
    PENDING,
    CopyPlan,
    Started,
    copy_digest,
    desired_copies,
    gridd_conf,
    launcher_license,
    parse_record,
    plan_copies,
    record_body,
    secret_body,
)
from gpuclass.shared.core.base import names
from gpuclass.shared.core.model.secrets import Redacted, SecretRecord
from gpuclass.shared.core.model.snapshot import compact_class
from gpuclass.shared.core.model.vmiuse import (
    VMIUse,
    admitted_units,
    compact_vmi_use,
    license_volume_secret,
)

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


def launched(vmis: list[VMIUse]) -> set[Started]:
    """Every VMI's launcher Pod bound and mounting the VMI's license copy."""
    return {(v.namespace, v.name, v.license_secret) for v in vmis if v.license_secret}


def plan(
    vmis: list[VMIUse],
    *,
    entitled: bool = True,
    secrets: dict[Any, SecretRecord] | None = None,
    started: set[Started] | None = None,
) -> CopyPlan:
    return desired_copies(
        vmis,
        CLASSES,
        secrets=SOURCE if secrets is None else secrets,
        namespaces=NAMESPACES,
        license_namespace="cozy-system",
        vgpu_entitled=entitled,
        started=launched(vmis) if started is None else started,
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
        pytest.param([vmi("tenant-a", None)], True, set(), set(), id="no-license-volume-no-copy"),
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


@pytest.mark.parametrize(
    "started",
    [
        pytest.param(set(), id="no-launcher-pod-bound"),
        pytest.param({("tenant-a", "other-vm", "gpuclass-license-lic")}, id="another-vmis-pod"),
        pytest.param({("tenant-b", "vm", "gpuclass-license-lic")}, id="pod-in-another-namespace"),
        pytest.param({("tenant-a", "vm", "gpuclass-license-x")}, id="pod-mounts-another-copy"),
    ],
)
def test_no_copy_until_the_vmis_own_launcher_pod_is_bound(started: set[Started]) -> None:
    """A VMI that never gets a node (pinned to a node that does not exist) gets no token."""
    result = plan([vmi("tenant-a")], started=started)
    assert not result.desired and not result.held


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


KEY = ("tenant-a", "gpuclass-license-lic")


@pytest.mark.parametrize(
    ("vmis", "recorded", "verify", "expected"),
    [
        pytest.param([vmi("tenant-a")], {}, False, [("create", *KEY)], id="create-unrecorded"),
        pytest.param([vmi("tenant-a")], {KEY: "same"}, False, [], id="recorded-unchanged-no-write"),
        pytest.param(
            [vmi("tenant-a")],
            {KEY: "same"},
            True,
            [("verify", *KEY)],
            id="resync-writes-recorded-again",
        ),
        pytest.param(
            [vmi("tenant-a")],
            {KEY: copy_digest(content(1))},
            False,
            [("update", *KEY)],
            id="feature-type-changed-update",
        ),
        pytest.param(
            [vmi("tenant-a")],
            {KEY: copy_digest({**content(), names.TOKEN_KEY: Redacted("b2xk")})},
            False,
            [("update", *KEY)],
            id="source-token-changed-update",
        ),
        pytest.param(
            [vmi("tenant-a")], {KEY: PENDING}, False, [("update", *KEY)], id="pending-written-again"
        ),
        pytest.param([], {KEY: "same"}, False, [("delete", *KEY)], id="unreferenced-copy-deleted"),
        pytest.param(
            [],
            {KEY: PENDING},
            False,
            [("delete", *KEY)],
            id="pending-unreferenced-deleted",
        ),
        pytest.param(
            [vmi("tenant-c")],
            {("tenant-c", "gpuclass-license-lic"): "same"},
            False,
            [("delete", "tenant-c", "gpuclass-license-lic")],
            id="entitlement-lost-copy-deleted",
        ),
        pytest.param(
            [vmi("tenant-a", "gpuclass-license-byol")],
            {("tenant-a", "gpuclass-license-byol"): "same"},
            True,
            [],
            id="held-copy-left-alone",
        ),
    ],
)
def test_plan_copies(
    vmis: list[VMIUse],
    recorded: dict[Any, str],
    verify: bool,
    expected: list[tuple[str, str, str]],
) -> None:
    same = copy_digest(content())
    recorded = {k: same if v == "same" else v for k, v in recorded.items()}
    actions = plan_copies(plan(vmis), recorded, verify=verify)
    assert [(a.action, a.namespace, a.name) for a in actions] == expected


def test_digest_depends_on_every_key_and_value_and_hides_the_token() -> None:
    assert copy_digest(content(4)) != copy_digest(content(1))
    assert copy_digest(content()) != copy_digest({**content(), names.TOKEN_KEY: Redacted("eA==")})
    assert TOKEN not in copy_digest(content()) and copy_digest({}) != PENDING


def test_record_round_trips_and_skips_what_it_cannot_read() -> None:
    entries = {KEY: "d1", ("tenant-b", "gpuclass-license-x"): PENDING}
    body = record_body(entries, namespace="cozy-system", resource_version="12")
    assert body["metadata"]["name"] == names.COPY_RECORD_NAME
    assert body["metadata"]["resourceVersion"] == "12"
    assert parse_record(body) == entries
    hand_edited = {
        "data": {
            names.COPY_RECORD_KEY: '{"tenant-a/gpuclass-license-lic": "d", "no-slash": "x", '
            '"tenant-a/not-a-copy": "y", "tenant-b/gpuclass-license-z": 5}'
        }
    }
    assert parse_record(hand_edited) == {KEY: "d"}
    assert parse_record({"data": {names.COPY_RECORD_KEY: "not json"}}) == {}
    assert parse_record({"data": {names.COPY_RECORD_KEY: "[1, 2]"}}) == {}
    assert parse_record(None) == {}


def test_secret_body_is_the_whole_labelled_copy() -> None:
    copy = plan([vmi("tenant-a")]).desired[KEY]
    body = secret_body(copy)
    assert body["metadata"] == {
        "name": "gpuclass-license-lic",
        "namespace": "tenant-a",
        "labels": MANAGED,
    }
    assert body["data"] == {k: v.reveal() for k, v in content().items()}
    assert body["type"] == "Opaque"


OWNER = {
    "apiVersion": "kubevirt.io/v1",
    "kind": "VirtualMachineInstance",
    "name": "vm",
    "uid": "u1",
    "controller": True,
}
COPY_VOLUME = {"name": "gpulicense", "secret": {"secretName": "gpuclass-license-lic"}}


@pytest.mark.parametrize(
    ("owners", "volumes", "expected"),
    [
        pytest.param([OWNER], [COPY_VOLUME], ("vm", "gpuclass-license-lic"), id="bound-launcher"),
        pytest.param([], [COPY_VOLUME], None, id="no-owner"),
        pytest.param([{**OWNER, "controller": False}], [COPY_VOLUME], None, id="not-controller"),
        pytest.param([{**OWNER, "kind": "ReplicaSet"}], [COPY_VOLUME], None, id="other-owner"),
        pytest.param(
            [{**OWNER, "apiVersion": "example.com/v1"}], [COPY_VOLUME], None, id="other-group"
        ),
        pytest.param([OWNER], [], None, id="no-license-volume"),
        pytest.param(
            [OWNER], [{"name": "x", "secret": {"secretName": "mine"}}], None, id="other-secret"
        ),
        pytest.param("junk", "junk", None, id="malformed"),
        # Numbers where lists belong are read as absent, as the offline status reads them.
        pytest.param(5, [COPY_VOLUME], None, id="owners-a-number"),
        pytest.param([OWNER], 5, None, id="volumes-a-number"),
    ],
)
def test_launcher_license(owners: object, volumes: object, expected: object) -> None:
    pod = {
        "metadata": {"name": "p", "ownerReferences": owners},
        "spec": {"volumes": volumes, "nodeName": "n1"},
        "status": {"phase": "Pending"},
    }
    assert launcher_license(pod) == expected


@pytest.mark.parametrize(
    ("node", "phase"),
    [
        pytest.param(None, "Pending", id="not-bound"),
        pytest.param("", "Pending", id="empty-node-name"),
        pytest.param("n1", "Succeeded", id="finished"),
        pytest.param("n1", "Failed", id="failed"),
    ],
)
def test_launcher_that_is_not_starting_counts_for_nothing(node: object, phase: str) -> None:
    pod = {
        "metadata": {"name": "p", "ownerReferences": [OWNER]},
        "spec": {"volumes": [COPY_VOLUME], "nodeName": node},
        "status": {"phase": phase},
    }
    assert launcher_license(pod) is None


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
            id="license-volume",
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


@pytest.mark.parametrize(
    "device",
    [{"name": "example.com/lic"}, ["example.com/lic"], None, ""],
    ids=["an-object", "a-list", "absent", "empty"],
)
def test_a_gpu_whose_device_name_is_no_name_records_no_admission(device: object) -> None:
    """Only admission's own output (`gpu1` with the class's device name) records the units a
    VMI passed admission with; a device name of another type is not that, and must not stop
    the reader (an object as deviceName raised TypeError and the VMI was skipped)."""
    gpus = [{"name": "gpu1", "deviceName": device}]
    assert admitted_units('[{"className": "lic"}]', gpus, namespace="tenant-a") == ()
    assert admitted_units(
        '[{"className": "lic"}]',
        [{"name": "gpu1", "deviceName": "example.com/lic"}],
        namespace="tenant-a",
    ) == (("lic", 1),)
