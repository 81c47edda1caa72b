"""Every Secret a VMI spec names, each with its field path (CONTRACT.md section 4 rule 8).

KubeVirt resolves Secrets from these fields of a VirtualMachineInstance spec
(kubevirt.io/api core/v1, `types.go` and `schema.go`) and writes what they hold
into the guest or the launcher Pod:

- `volumes[].secret.secretName`
- `volumes[].sysprep.secret.name`
- `volumes[].cloudInitNoCloud` / `.cloudInitConfigDrive`: `secretRef.name`,
  `networkDataSecretRef.name`
- `volumes[].containerDisk.imagePullSecret`
- `domain.firmware.kernelBoot.container.imagePullSecret`
- `accessCredentials[].sshPublicKey.source.secret.secretName` and
  `accessCredentials[].userPassword.source.secret.secretName`

Rather than a list of those paths, the whole spec is walked and every field of a
Secret-reference *shape* counts: a `secretName` or `imagePullSecret` string, the
`name` of a `secret` / `*SecretRef` object, the `name` of an `imagePullSecrets`
entry. The list above is what the tests prove; the shape rule also covers a
field a later KubeVirt release adds in the same style, so the check fails closed.
`domain.firmware.acpi.slicNameRef`/`msdmNameRef` name a *volume*, not a Secret:
that volume's own Secret reference is the one that counts.
Pure: a dict in, paths and names out.
"""

from __future__ import annotations

from dataclasses import dataclass

NAME_KEYS = frozenset({"secretName", "imagePullSecret"})
"""String fields that are Secret names wherever they appear."""


@dataclass(frozen=True, slots=True)
class SecretRef:
    path: str
    name: str


def _is_reference_object(key: str) -> bool:
    """An object whose `name` is a Secret name: `secret`, `secretRef`, `networkDataSecretRef`, ..."""
    return key == "secret" or key.endswith("SecretRef") or key == "secretRef"


def secret_refs(spec: object, prefix: str = "spec") -> tuple[SecretRef, ...]:
    """Every Secret reference in `spec`, in document order."""
    found: list[SecretRef] = []

    def walk(node: object, path: str, named_object: bool) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if not isinstance(key, str):
                    continue
                where = f"{path}.{key}"
                if isinstance(value, str):
                    if key in NAME_KEYS or (named_object and key == "name"):
                        found.append(SecretRef(where, value))
                else:
                    walk(value, where, _is_reference_object(key))
        elif isinstance(node, list):
            for i, item in enumerate(node):
                # imagePullSecrets: [{name: ...}] (Pod style) names Secrets by its entries.
                walk(item, f"{path}[{i}]", path.endswith(".imagePullSecrets"))

    walk(spec, prefix, False)
    return tuple(found)
