"""Every Secret a VMI spec names is found, however the spec is written (contract 4, rule 8).

`find_secret_refs` skips its walk when the spec's JSON holds no key a reference can sit under; these
rows are the ways a tenant could try to hide a reference from that shortcut, each with the
reference the contract says must still be found.
"""

from __future__ import annotations

import tracemalloc
from typing import Any

import orjson
import pytest

from gpuclass.shared.core.admission.licensing import (
    LICENSE_REFERENCE_CAUSES,
    license_reference_causes,
)
from gpuclass.shared.core.admission.secretrefs import SecretRef, find_secret_refs
from gpuclass.shared.core.base.causes import CauseCode
from gpuclass.shared.core.base.fieldpath import FieldPath

COPY = "gpuclass-license-lic"  # a license copy's name (contract section 1)


def _nested(depth: int, leaf: dict[str, Any]) -> dict[str, Any]:
    node = leaf
    for _ in range(depth):
        node = {"n": node}
    return node


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param(
            # JSON escapes in the request spell the same keys once parsed.
            orjson.loads(
                b'{"volumes": [{"name": "x", "secr\\u0065t": {"secretN\\u0061me": "%s"}}]}'
                % COPY.encode()
            ),
            [SecretRef("spec.volumes[0].secret.secretName", COPY)],
            id="escaped-keys",
        ),
        pytest.param(
            # Keys that are not strings (a YAML manifest in the CLI) cannot be encoded as JSON.
            {1: "one", "volumes": [{"name": "x", "secret": {"secretName": COPY}}]},
            [SecretRef("spec.volumes[0].secret.secretName", COPY)],
            id="non-string-keys",
        ),
        pytest.param(
            # Deeper than orjson encodes (255 levels).
            {"volumes": [_nested(300, {"secretName": COPY})]},
            [SecretRef("spec.volumes[0]" + ".n" * 300 + ".secretName", COPY)],
            id="deeper-than-the-encoder",
        ),
        pytest.param(
            {
                "accessCredentials": [
                    {"sshPublicKey": {"source": {"secret": {"secretName": COPY}}}}
                ],
                "volumes": [
                    {"name": "c", "cloudInitNoCloud": {"networkDataSecretRef": {"name": "n"}}}
                ],
            },
            [
                SecretRef("spec.accessCredentials[0].sshPublicKey.source.secret.secretName", COPY),
                SecretRef("spec.volumes[0].cloudInitNoCloud.networkDataSecretRef.name", "n"),
            ],
            id="two-kinds-of-reference",
        ),
        pytest.param(
            # Only a capitalised `...SecretRef` key names it.
            {
                "volumes": [
                    {"name": "c", "cloudInitConfigDrive": {"userDataSecretRef": {"name": COPY}}}
                ]
            },
            [SecretRef("spec.volumes[0].cloudInitConfigDrive.userDataSecretRef.name", COPY)],
            id="capitalised-ref-only",
        ),
        pytest.param(
            # The letters in a value only: walked, and nothing is a reference.
            {"volumes": [{"name": "secret-data", "containerDisk": {"image": "secret:1"}}]},
            [],
            id="letters-in-values-only",
        ),
        pytest.param(
            {"domain": {"devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]}}},
            [],
            id="no-reference",
        ),
        pytest.param(None, [], id="no-spec"),
    ],
)
def test_every_reference_is_found(spec: object, expected: list[SecretRef]) -> None:
    found, more = find_secret_refs(spec)
    assert more == 0
    assert list(found) == expected
    for ref in found:  # the steps a cause carries name the same field as the text
        assert str(FieldPath(ref.steps)) == ref.path
        assert ref.field_path() == FieldPath.parse(ref.path)


def _deep_refs(names: list[str], depth: int) -> dict[str, Any]:
    """A VMI spec whose `domain.clock` (kept as written by KubeVirt's schema) holds image pull
    Secrets naming `names`, `depth` lists down."""
    node: object = {"imagePullSecrets": [{"name": name} for name in names]}
    for _ in range(depth):
        node = [node]
    return {"domain": {"clock": {"utc": {}, "x": node}, "devices": {}}}


def test_only_the_names_asked_for_are_collected() -> None:
    spec = _deep_refs(["tenant-own", COPY, "another"], 3)
    path = "spec.domain.clock.x[0][0][0].imagePullSecrets[1].name"
    assert find_secret_refs(spec, named="gpuclass-license-") == ((SecretRef(path, COPY),), 0)
    assert [r.name for r in find_secret_refs(spec)[0]] == ["tenant-own", COPY, "another"]


def test_past_the_limit_references_are_counted_not_made() -> None:
    spec = _deep_refs([f"{COPY}-{i}" for i in range(10)], 2)
    found, more = find_secret_refs(spec, limit=4)
    assert [r.name for r in found] == [f"{COPY}-{i}" for i in range(4)]
    assert more == 6


def test_thousands_of_deep_license_references_cost_a_bounded_refusal() -> None:
    """2,000 references to a license copy 400 lists down (about 60 KB of JSON): each would
    be a cause with a 1.6 KB path and 400 parsed steps (over 50 MB once made). The VMI is refused
    with one cause each for the first LICENSE_REFERENCE_CAUSES and one counting the rest."""
    total, depth = 2000, 400
    obj = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "vm", "namespace": "tenant-a"},
        "spec": _deep_refs([COPY] * total, depth),
    }
    tracemalloc.start()
    try:
        causes = license_reference_causes(obj, set())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(causes) == LICENSE_REFERENCE_CAUSES + 1
    assert all(c.code == CauseCode.LICENSE_HAND_MOUNTED for c in causes)
    first = "spec.domain.clock.x" + "[0]" * depth + ".imagePullSecrets[0].name"
    assert str(causes[0].path) == first
    assert str(causes[-1].path) == "spec"
    assert f"names {total - LICENSE_REFERENCE_CAUSES} more licence copies" in causes[-1].message
    assert peak < 8 * 2**20, f"{peak / 2**20:.1f} MiB traced for one spec's rule 8"
