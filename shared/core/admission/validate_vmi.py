"""The check after every mutation (docs/contract.md rule 4.11): the VMI as it will be stored.

`/mutate/virtualmachineinstances` resolves a selection, but any mutating webhook the API
server calls after ours (KubeVirt's own, or any other in the cluster) may change the VMI
again, and ours is reinvoked at most once. Validating webhooks run after every mutating
one, on the final object, so this admitter, served at `/validate/virtualmachineinstances`,
judges what will really be stored. It runs the same rules
(:func:`shared.core.admission.resolution.judge_create`) and reads rule 6 back instead of
patching: the GPU entries must be exactly what the selection resolves to under the current
catalog, and a licensed class's license volume and disk must be there. Every cause of rules
1 to 5 and 8 holds as on the mutating call (a raw GPU request beside classes, a license copy
not from the VMI's own licensed class, entitlement).

Not read back: the class tolerations. The launcher Pod gets them again from
`/mutate/pods`, and a class's tolerations edited between the two calls must not refuse a
start. Only CREATE is judged; the mutating webhook's UPDATE rules are checks already.
It never patches and never warns (the mutating call warned).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuclass.shared.core.admission.decisions import Allowed, Decision, Denied
from gpuclass.shared.core.admission.envelope import AdmissionRequest
from gpuclass.shared.core.admission.licensing import VOLUMES, license_disk, license_volume
from gpuclass.shared.core.admission.resolution import Judgement, judge_create
from gpuclass.shared.core.admission.rules import DISKS, GPUS
from gpuclass.shared.core.base import names
from gpuclass.shared.core.base.causes import Cause, CauseCode, invalid
from gpuclass.shared.core.base.fieldpath import FieldPath
from gpuclass.shared.core.base.raw import list_at
from gpuclass.shared.core.status.catalog import Catalog

GPUS_PATH = FieldPath.of(*GPUS)
DESCRIBED_ENTRIES = 4
"""GPU entries a message spells out before it only counts them (a VMI may hold 1024)."""


def admit(request: AdmissionRequest, catalog: Catalog) -> Decision:
    """`/validate/virtualmachineinstances`: the rules of section 4 on the VMI every mutating
    webhook has finished with (CREATE only); other operations pass. Never patches."""
    if request.operation != "CREATE":
        return Allowed()
    obj = request.object
    if obj is None:
        return Denied(
            (
                invalid(
                    FieldPath.of("object"), "the request carries no VirtualMachineInstance object"
                ),
            )
        )
    causes = final_causes(obj, request.namespace, catalog=catalog)
    return Denied(causes) if causes else Allowed()


def final_causes(obj: Mapping[str, Any], namespace: str, *, catalog: Catalog) -> tuple[Cause, ...]:
    """Rules 1 to 5 and 8 as :func:`judge_create` judges them, and rule 6 read back: every cause
    at once. The GPU entries get this rule's own cause (they must equal the resolution; on the
    mutating call they may also be empty), so judge_create's is replaced, not repeated."""
    judged = judge_create(obj, namespace, catalog=catalog)
    causes = [
        c
        for c in judged.causes
        if not (c.path == GPUS_PATH and c.code == CauseCode.RAW_REQUEST_BESIDE_CLASSES)
    ]
    causes += gpu_entry_causes(obj, judged)
    causes += license_causes(obj, judged)
    return tuple(causes)


def describe(entries: Sequence[Any]) -> str:
    """`gpu1=example.com/gpu, gpu2=...` for a message: the first few, then how many in all."""
    if not entries:
        return "none"
    shown = []
    for entry in entries[:DESCRIBED_ENTRIES]:
        if isinstance(entry, dict):
            shown.append(f"{entry.get('name', '?')}={entry.get('deviceName', '?')}")
        else:
            shown.append("an entry that is not an object")
    if len(entries) > DESCRIBED_ENTRIES:
        shown.append(f"... {len(entries)} in all")
    return ", ".join(shown)


def gpu_entry_causes(obj: Mapping[str, Any], judged: Judgement) -> list[Cause]:
    """`spec.domain.devices.gpus` is exactly what the selection resolves to: names, devices, count
    and order (rule 6). Nothing to compare without class entries (raw entries are the tenant's),
    or while a class does not resolve (refused by rule 3 already)."""
    if judged.gpus is None:
        return []
    found = list_at(obj, *GPUS)
    if found == list(judged.gpus):
        return []
    return [
        invalid(
            GPUS_PATH,
            f"must be exactly what the selected classes resolve to ({describe(judged.gpus)}) "
            f"but holds ({describe(found)}): the selection was not resolved, or another "
            "mutating webhook changed the GPU entries after gpuclass resolved it",
            code=CauseCode.GPU_ENTRIES_MISMATCH,
        )
    ]


def license_causes(obj: Mapping[str, Any], judged: Judgement) -> list[Cause]:
    """A licensed class's license volume and disk are there (rule 6). A different volume or disk
    holding the reserved name is judge_create's cause (`ReservedName`); this is the absent one."""
    if judged.licensed is None:
        return []
    causes: list[Cause] = []
    copy = names.license_copy_name(judged.licensed)
    wanted = (
        (VOLUMES, license_volume(judged.licensed), f"the licence volume (Secret {copy})"),
        (DISKS, license_disk(), "the licence disk"),
    )
    for path, item, what in wanted:
        present = list_at(obj, *path)
        if item in present or any(
            isinstance(e, dict) and e.get("name") == item["name"] for e in present
        ):
            continue
        causes.append(
            invalid(
                FieldPath.of(*path),
                f"lacks {what} of class {judged.licensed}: the selection was not resolved, or "
                "another mutating webhook removed it; the guest would start unlicensed",
                code=CauseCode.LICENSE_VOLUME_MISSING,
            )
        )
    return causes
