"""Kubernetes value formats (shared/core/base/k8s.py): names, quantities and toleration matching, as tables.

Expected values come from apimachinery's rules (RFC 1123 names, qualified names,
resource.Quantity) and core/v1 Toleration.ToleratesTaint, not from the code under test.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from gpuclass.shared.core.base import k8s
from gpuclass.shared.core.base.k8s import Taint

OK = None


@pytest.mark.parametrize(
    ("value", "error"),
    [
        pytest.param("a", OK, id="one-letter"),
        pytest.param("gpu-1", OK, id="dash-inside"),
        pytest.param("0abc9", OK, id="digits-at-ends"),
        pytest.param("a" * 63, OK, id="63-chars"),
        pytest.param("a" * 64, "at most 63 characters (has 64)", id="64-chars"),
        pytest.param("", "must be a DNS label", id="empty"),
        pytest.param("Example", "must be a DNS label", id="uppercase"),
        pytest.param("-a", "must be a DNS label", id="leading-dash"),
        pytest.param("a-", "must be a DNS label", id="trailing-dash"),
        pytest.param("a_b", "must be a DNS label", id="underscore"),
        pytest.param("a.b", "must be a DNS label", id="dot"),
        pytest.param("gpu-\u00e9", "must be a DNS label", id="non-ascii"),
    ],
)
def test_dns_label(value: str, error: str | None) -> None:
    result = k8s.dns_label_error(value)
    if error is None:
        assert result is None
    else:
        assert result is not None and error in result


@pytest.mark.parametrize(
    ("value", "error"),
    [
        pytest.param("example-vgpu-license", OK, id="label"),
        pytest.param("a.b.c", OK, id="dotted"),
        pytest.param("a" * 63 + "." + "b" * 63, OK, id="two-long-labels"),
        pytest.param("", "must be a DNS subdomain", id="empty"),
        pytest.param("Bad Secret", "must be a DNS subdomain", id="space-and-upper"),
        pytest.param(".a", "must be a DNS subdomain", id="leading-dot"),
        pytest.param("a..b", "must be a DNS subdomain", id="empty-label"),
        pytest.param("a.", "must be a DNS subdomain", id="trailing-dot"),
        pytest.param("a_b", "must be a DNS subdomain", id="underscore"),
        pytest.param("a" * 254, "at most 253 characters (has 254)", id="254-chars"),
    ],
)
def test_dns_subdomain(value: str, error: str | None) -> None:
    result = k8s.dns_subdomain_error(value)
    if error is None:
        assert result is None
    else:
        assert result is not None and error in result


@pytest.mark.parametrize(
    ("value", "error"),
    [
        pytest.param("dedicated", OK, id="name-only"),
        pytest.param("gpu.example.com/dedicated", OK, id="prefixed"),
        pytest.param(
            "node-role.kubernetes.io/control-plane", OK, id="kubernetes-prefix-ok-for-keys"
        ),
        pytest.param("A_b.c-D9", OK, id="mixed-name-part"),
        pytest.param("a" * 63, OK, id="63-char-name"),
        pytest.param("a" * 64, "name part must be 1-63", id="64-char-name"),
        pytest.param("", "name part must be 1-63", id="empty"),
        pytest.param("-a", "name part must be 1-63", id="leading-dash"),
        pytest.param("a.", "name part must be 1-63", id="trailing-dot"),
        pytest.param("bad key!", "name part must be 1-63", id="space-and-bang"),
        pytest.param("example.com/", "name part must be 1-63", id="empty-name-after-prefix"),
        pytest.param("/a", "prefix before '/' must be a DNS subdomain", id="empty-prefix"),
        pytest.param(
            "Example.com/a", "prefix before '/' must be a DNS subdomain", id="upper-prefix"
        ),
        pytest.param("a/b/c", "prefix before '/' must be a DNS subdomain", id="two-slashes"),
    ],
)
def test_qualified_name(value: str, error: str | None) -> None:
    result = k8s.qualified_name_error(value)
    if error is None:
        assert result is None
    else:
        assert result is not None and error in result


@pytest.mark.parametrize(
    ("value", "error"),
    [
        pytest.param("example.com/whole-gpu", OK, id="domain-name"),
        pytest.param("nvidia.com/GA102GL_A10", OK, id="nvidia-style"),
        pytest.param("whole-gpu", "qualified extended-resource name", id="no-domain"),
        pytest.param("kubernetes.io/gpu", "kubernetes.io domain", id="kubernetes-io"),
        pytest.param("gpu.kubernetes.io/x", "kubernetes.io domain", id="kubernetes-io-subdomain"),
        pytest.param(
            "requests.example.com/gpu", "must not start with 'requests.'", id="requests-prefix"
        ),
        pytest.param("Example.com/gpu", "prefix before '/'", id="upper-domain"),
        pytest.param("example.com/-gpu", "name part", id="bad-name-part"),
    ],
)
def test_extended_resource_name(value: str, error: str | None) -> None:
    result = k8s.extended_resource_error(value)
    if error is None:
        assert result is None
    else:
        assert result is not None and error in result


@pytest.mark.parametrize(
    ("value", "error"),
    [
        pytest.param("", OK, id="empty-is-a-value"),
        pytest.param("true", OK, id="word"),
        pytest.param("a.b_c-D9", OK, id="mixed"),
        pytest.param("v" * 63, OK, id="63-chars"),
        pytest.param("v" * 64, "at most 63 characters (has 64)", id="64-chars"),
        pytest.param("-x-", "must be a label value", id="dashes-at-ends"),
        pytest.param("a b", "must be a label value", id="space"),
        pytest.param("a/b", "must be a label value", id="slash"),
    ],
)
def test_label_value(value: str, error: str | None) -> None:
    result = k8s.label_value_error(value)
    if error is None:
        assert result is None
    else:
        assert result is not None and error in result


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("16Gi", Decimal(16 * 2**30), id="binary-Gi"),
        pytest.param("1.5Gi", Decimal(3 * 2**29), id="fractional-Gi"),
        pytest.param("512Mi", Decimal(512 * 2**20), id="binary-Mi"),
        pytest.param("1Ki", Decimal(1024), id="binary-Ki"),
        pytest.param("500m", Decimal("0.5"), id="milli"),
        pytest.param("1e3", Decimal(1000), id="exponent"),
        pytest.param("1E3", Decimal(1000), id="upper-exponent"),
        pytest.param("2e-3", Decimal("0.002"), id="negative-exponent"),
        pytest.param("1k", Decimal(1000), id="decimal-k"),
        pytest.param("16G", Decimal(16 * 10**9), id="decimal-G"),
        pytest.param("4", Decimal(4), id="plain"),
        pytest.param(".5", Decimal("0.5"), id="leading-dot"),
        pytest.param("+1", Decimal(1), id="plus-sign"),
        pytest.param("0", Decimal(0), id="zero-parses"),
        pytest.param("-1", Decimal(-1), id="negative-parses"),
    ],
)
def test_parse_quantity(text: str, expected: Decimal) -> None:
    # Positivity is the caller's rule: validation refuses 0 and -1 for memory.
    assert k8s.parse_quantity(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("lots", "is not a Kubernetes quantity", id="word"),
        pytest.param("", "is not a Kubernetes quantity", id="empty"),
        pytest.param("1.2.3", "is not a Kubernetes quantity", id="two-dots"),
        pytest.param("Gi", "is not a Kubernetes quantity", id="suffix-only"),
        pytest.param(" 1", "is not a Kubernetes quantity", id="leading-space"),
        pytest.param("1 ", "is not a Kubernetes quantity", id="trailing-space"),
        pytest.param("-", "is not a Kubernetes quantity", id="sign-only"),
        pytest.param("1Gb", "unknown suffix 'Gb'", id="unknown-suffix"),
        pytest.param("1e", "unknown suffix 'e'", id="bare-e"),
        pytest.param("1eX", "unknown suffix 'eX'", id="e-then-letter"),
        pytest.param("1e1001", "exponent out of range", id="huge-exponent"),
    ],
)
def test_parse_quantity_refuses(text: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        k8s.parse_quantity(text)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("value", "units"),
    [
        pytest.param("4", 4, id="string"),
        pytest.param(4, 4, id="int"),
        pytest.param("1.5", 1, id="fraction-floors"),
        pytest.param("2k", 2000, id="suffix"),
        pytest.param("-1", 0, id="negative-is-zero"),
        pytest.param(-3, 0, id="negative-int-is-zero"),
        pytest.param("lots", 0, id="unreadable"),
        pytest.param(True, 0, id="bool"),
        pytest.param(None, 0, id="none"),
        # A node advertising 1e20 devices made every sum past int64: status could not be written.
        pytest.param("1e20", 2**32 - 1, id="huge-is-capped"),
        pytest.param(2**70, 2**32 - 1, id="huge-int-is-capped"),
        pytest.param(1e18, 2**32 - 1, id="huge-float-is-capped"),
        pytest.param("4294967295", 4294967295, id="the-cap-itself"),
    ],
)
def test_quantity_units(value: object, units: int) -> None:
    assert k8s.quantity_units(value) == units


GPU_NOSCHED = Taint("gpu", "true", "NoSchedule")
GPU_NOEXEC = Taint("gpu", "true", "NoExecute")
GPU_PREFER = Taint("gpu", "true", "PreferNoSchedule")
EMPTY_KEY_TAINT = Taint("", "v", "NoSchedule")


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        pytest.param({"key": "gpu", "operator": "Exists"}, GPU_NOSCHED, True, id="exists-same-key"),
        pytest.param(
            {"key": "other", "operator": "Exists"}, GPU_NOSCHED, False, id="exists-other-key"
        ),
        pytest.param({"operator": "Exists"}, GPU_NOSCHED, True, id="keyless-exists-any-taint"),
        pytest.param({"operator": "Exists"}, GPU_NOEXEC, True, id="keyless-exists-noexecute"),
        pytest.param(
            {"key": "", "operator": "Exists"}, EMPTY_KEY_TAINT, True, id="empty-key-exists"
        ),
        pytest.param(
            {"key": "gpu", "value": "true"}, GPU_NOSCHED, True, id="default-operator-equal"
        ),
        pytest.param(
            {"key": "gpu", "operator": "", "value": "true"},
            GPU_NOSCHED,
            True,
            id="empty-operator-equal",
        ),
        pytest.param(
            {"key": "gpu", "operator": "Equal", "value": "false"},
            GPU_NOSCHED,
            False,
            id="equal-other-value",
        ),
        pytest.param(
            {"key": "gpu", "operator": "Equal"}, GPU_NOSCHED, False, id="equal-missing-value"
        ),
        pytest.param(
            {"key": "gpu", "operator": "Equal"},
            Taint("gpu", "", "NoSchedule"),
            True,
            id="equal-both-empty-values",
        ),
        pytest.param(
            {"operator": "Equal", "value": "true"},
            GPU_NOSCHED,
            True,
            id="keyless-equal-matches-by-value",
        ),
        pytest.param(
            {"operator": "Equal", "value": "x"}, GPU_NOSCHED, False, id="keyless-equal-other-value"
        ),
        pytest.param(
            {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},
            GPU_NOSCHED,
            True,
            id="same-effect",
        ),
        pytest.param(
            {"key": "gpu", "operator": "Exists", "effect": "NoExecute"},
            GPU_NOSCHED,
            False,
            id="other-effect",
        ),
        pytest.param(
            {"key": "gpu", "operator": "Exists", "effect": ""},
            GPU_NOEXEC,
            True,
            id="empty-effect-matches-all",
        ),
        pytest.param(
            {"key": "gpu", "operator": "Exists"}, GPU_PREFER, True, id="no-effect-matches-prefer"
        ),
        pytest.param(
            {"key": "gpu", "operator": "In", "value": "true"},
            GPU_NOSCHED,
            False,
            id="unknown-operator",
        ),
    ],
)
def test_tolerates(toleration: dict[str, Any], taint: Taint, expected: bool) -> None:
    assert k8s.tolerates(toleration, taint) is expected


EXISTS_GPU = {"key": "gpu", "operator": "Exists"}


@pytest.mark.parametrize(
    ("tolerations", "taints", "expected"),
    [
        pytest.param((), (), True, id="untainted-node"),
        pytest.param((), (GPU_NOSCHED,), False, id="noschedule-not-tolerated"),
        pytest.param((), (GPU_NOEXEC,), False, id="noexecute-not-tolerated"),
        pytest.param((), (GPU_PREFER,), True, id="prefer-noschedule-ignored"),
        pytest.param((EXISTS_GPU,), (GPU_NOSCHED, GPU_NOEXEC), True, id="both-tolerated"),
        pytest.param(
            ({"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},),
            (GPU_NOSCHED, GPU_NOEXEC),
            False,
            id="one-of-two-tolerated",
        ),
        pytest.param(
            (EXISTS_GPU,),
            (GPU_NOSCHED, Taint("other", "", "NoSchedule")),
            False,
            id="second-taint-untolerated",
        ),
        pytest.param(
            ({"operator": "Exists"},),
            (GPU_NOSCHED, Taint("x", "", "NoExecute")),
            True,
            id="keyless-exists-all",
        ),
    ],
)
def test_tolerates_all(
    tolerations: tuple[dict[str, Any], ...], taints: tuple[Taint, ...], expected: bool
) -> None:
    assert k8s.tolerates_all(tolerations, taints) is expected
