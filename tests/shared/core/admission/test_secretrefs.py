"""Every Secret a VMI spec names is found, however the spec is written (contract 4, rule 8).

`secret_refs` skips its walk when the spec's JSON holds no key a reference can sit under; these
rows are the ways a tenant could try to hide a reference from that shortcut, each with the
reference the contract says must still be found.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gpuclass.shared.core.admission.secretrefs import SecretRef, secret_refs

COPY = "gpuclass-license-lic"  # a licence copy's name (contract section 1)


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
    assert list(secret_refs(spec)) == expected
