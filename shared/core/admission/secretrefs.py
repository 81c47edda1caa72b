"""Every Secret a VMI spec names, each with its field path (docs/contract.md section 4 rule 8).

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

Every key a reference sits under (`secretName`, `imagePullSecret(s)`, `secret`, `secretRef`,
`*SecretRef`) holds the letters `ecret`, so a spec whose JSON text lacks them names no Secret:
one orjson encoding (a C pass) answers most VMIs without the Python walk, which cost a fifth
of a VMI's decision. The text is encoded from the parsed spec, so an escaped key in the request
(`"secr\\u0065tName"`) is spelled out again; what orjson cannot encode (non-string keys from
YAML, nesting past its limit) is walked.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

from gpuclass.shared.core.base.fieldpath import FieldPath, Step

REFERENCE_LETTERS = b"ecret"
"""In every key a Secret reference can sit under (see :func:`_is_reference_object`, NAME_KEYS)."""

NAME_KEYS = frozenset({"secretName", "imagePullSecret"})
"""String fields that are Secret names wherever they appear."""


@dataclass(frozen=True, slots=True)
class SecretRef:
    """One Secret a VMI spec names: its field path (for the cause that refuses it) and the Secret's
    name (to tell a license copy from a tenant's own Secret)."""

    path: str
    name: str
    steps: tuple[Step, ...] = field(default=(), compare=False, repr=False)
    """The same path as steps (:class:`FieldPath`), so a cause need not parse `path` back."""

    def field_path(self) -> FieldPath:
        """The path as a :class:`FieldPath`, its text already made."""
        return FieldPath(self.steps, self.path) if self.steps else FieldPath.parse(self.path)


def _is_reference_object(key: str) -> bool:
    """An object whose `name` is a Secret name: `secret`, `secretRef`, `networkDataSecretRef`, ..."""
    return key == "secret" or key.endswith("SecretRef") or key == "secretRef"


def _may_reference(spec: object) -> bool:
    """False only when no key of `spec` can hold a Secret reference (its JSON lacks the letters)."""
    try:
        return REFERENCE_LETTERS in orjson.dumps(spec)
    except orjson.JSONEncodeError:  # not JSON-shaped (non-string keys, very deep): walk it
        return True


def find_secret_refs(
    spec: object, prefix: str = "spec", *, named: str = "", limit: int | None = None
) -> tuple[tuple[SecretRef, ...], int]:
    """The first `limit` (default: all) Secret references in `spec` whose Secret name starts
    with `named`, in document order, and how many more there are (their paths never made).

    Runs on every VMI CREATE and UPDATE, and a tenant chooses the spec's shape: a reference
    600 levels down (inside `domain.clock`, which KubeVirt's schema keeps as it is) must not
    cost 600 steps of text each, nor its neighbours. So the walk keeps its steps, and a level's
    path text is made only when a reference below it is kept, once; the admitters ask only for
    the names of license copies, so the tenant's other references cost the walk alone.
    """
    if not _may_reference(spec):
        return (), 0
    found: list[SecretRef] = []
    more = 0
    room = -1 if limit is None else limit  # references still to make (-1: no limit)
    root = FieldPath.parse(prefix).steps
    stack: list[Step] = []  # the steps below `prefix` to the node being walked
    texts = [prefix]  # texts[k]: the text of stack[:k], made on demand (see `kept`)

    def kept(key: str, value: str) -> SecretRef:
        for kind, part in stack[len(texts) - 1 :]:
            texts.append(f"{texts[-1]}.{part}" if kind == "child" else f"{texts[-1]}[{part}]")
        return SecretRef(f"{texts[-1]}.{key}", value, (*root, *stack, ("child", key)))

    def left() -> None:  # the walk leaves a level: its text, if made, names it no more
        stack.pop()
        if len(texts) > len(stack) + 1:
            del texts[len(stack) + 1 :]

    def walk(node: object, named_object: bool, *, pull_secrets: bool) -> None:
        nonlocal more, room
        if isinstance(node, dict):
            for key, value in node.items():
                if not isinstance(key, str):
                    continue
                if isinstance(value, str):
                    if (key in NAME_KEYS or (named_object and key == "name")) and (
                        value.startswith(named)
                    ):
                        if room == 0:
                            more += 1
                        else:
                            found.append(kept(key, value))
                            room -= 1
                elif isinstance(value, dict | list):
                    stack.append(("child", key))
                    walk(value, _is_reference_object(key), pull_secrets=key == "imagePullSecrets")
                    left()
        elif isinstance(node, list):
            for i, item in enumerate(node):
                if isinstance(item, dict | list):
                    stack.append(("index", i))
                    # imagePullSecrets: [{name: ...}] (Pod style) names Secrets by its entries.
                    walk(item, pull_secrets, pull_secrets=False)
                    left()

    walk(spec, False, pull_secrets=False)
    return tuple(found), more
