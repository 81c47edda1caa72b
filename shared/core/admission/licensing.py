"""The platform license in a tenant's VMI (docs/contract.md sections 1, 4.6 and 4.8).

A licensed class adds one license volume and its disk (:func:`license_volume`,
:func:`license_disk`: what rule 6 appends, rule 8 recognises as the VMI's own and rule 11
checks after every mutation); any other reference to a license copy anywhere in the spec is
refused (rule 8, :func:`license_reference_causes`). The other rules of the selection are in
:mod:`shared.core.admission.rules`. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuclass.shared.core.admission.secretrefs import find_secret_refs
from gpuclass.shared.core.base import names
from gpuclass.shared.core.base.causes import Cause, CauseCode, forbidden
from gpuclass.shared.core.base.fieldpath import FieldPath
from gpuclass.shared.core.base.raw import list_at
from gpuclass.shared.core.model.selection import ClassEntry
from gpuclass.shared.core.status.catalog import Catalog

VOLUMES = ("spec", "volumes")


def license_volume(class_name: str) -> dict[str, Any]:
    """The license volume of contract section 1 for `class_name`: the class's copy mounted with the
    GPULICENSE label (never `optional`), exactly what rule 6 appends and rule 8 recognises as the
    VMI's own."""
    return {
        "name": names.LICENSE_VOLUME,
        "secret": {
            "secretName": names.license_copy_name(class_name),
            "volumeLabel": names.LICENSE_SERIAL,
        },
    }


def license_disk() -> dict[str, Any]:
    """The disk that exposes the license volume to the guest (serial GPULICENSE, virtio), appended
    beside :func:`license_volume`."""
    return {"name": names.LICENSE_VOLUME, "serial": names.LICENSE_SERIAL, "disk": {"bus": "virtio"}}


def selected_licensed_classes(entries: tuple[ClassEntry, ...], catalog: Catalog) -> list[str]:
    """Classes of the selection that deliver the platform license (whatever their state now)."""
    licensed: list[str] = []
    for name in dict.fromkeys(entry.class_name for entry in entries):
        offer = catalog.offers.get(name)
        spec = offer.record.spec if offer else None
        if spec and spec.license:
            licensed.append(name)
    return licensed


def catalog_licensed_classes(catalog: Catalog) -> list[str]:
    """Every class that delivers the platform license: what an unreadable selection might name."""
    return [
        name
        for name, offer in catalog.offers.items()
        if offer.record.spec and offer.record.spec.license
    ]


def own_license_volume_refs(obj: Mapping[str, Any], licensed: list[str]) -> set[tuple[str, str]]:
    """The references that are exactly the license volume one of `licensed` adds (section 1).

    One look per volume: a volume can only be the license volume of the class its Secret's name
    names, so the work is O(volumes + classes), not their product (`benchmarks/bench_decision.py`
    measures a 1 MB VMI against 256 licensed classes; docs/performance.md has the figure before).
    """
    by_copy = {names.license_copy_name(name): name for name in licensed}
    refs: set[tuple[str, str]] = set()
    for i, volume in enumerate(list_at(obj, *VOLUMES)):
        secret = volume.get("secret") if isinstance(volume, dict) else None
        copy = secret.get("secretName") if isinstance(secret, dict) else None
        if not isinstance(copy, str):
            continue
        name = by_copy.get(copy)
        if name is not None and volume == license_volume(name):
            refs.add((f"spec.volumes[{i}].secret.secretName", copy))
    return refs


LICENSE_REFERENCE_CAUSES = 64
"""Rule 8 causes one spec can make, one per reference to a license copy, beyond which the rest
are counted in one more cause: a reference deep in `domain.clock` has a path as long as its
depth, and a 3 MiB spec can hold 100,000 of them."""


def license_reference_causes(
    obj: Mapping[str, Any], permitted: set[tuple[str, str]]
) -> list[Cause]:
    """Rule 8: a license copy reaches a guest only as the license volume of its own licensed class.

    Every Secret reference of the spec counts (volumes, cloud-init, sysprep, image pull
    Secrets, access credentials: :mod:`shared.core.admission.secretrefs`), not only volumes.
    The first LICENSE_REFERENCE_CAUSES references to license copies get a cause each; the rest
    are counted in one cause on `spec` (they were not checked against `permitted`, so the count
    may include the few permitted license volumes found after them).
    """
    refs, more = find_secret_refs(
        obj.get("spec"),
        named=names.LICENSE_COPY_PREFIX,
        limit=LICENSE_REFERENCE_CAUSES + len(permitted),
    )
    foreign = [ref for ref in refs if (ref.path, ref.name) not in permitted]
    causes = [
        forbidden(
            ref.field_path(),
            f"names Secret {ref.name}: a licence copy reaches a VM only as the licence volume "
            "of its licensed class",
            code=CauseCode.LICENSE_HAND_MOUNTED,
        )
        for ref in foreign[:LICENSE_REFERENCE_CAUSES]
    ]
    more += max(0, len(foreign) - LICENSE_REFERENCE_CAUSES)
    if more:
        causes.append(
            forbidden(
                FieldPath.of("spec"),
                f"names {more} more licence copies beyond the {LICENSE_REFERENCE_CAUSES} "
                "listed: a licence copy reaches a VM only as the licence volume of its "
                "licensed class",
                code=CauseCode.LICENSE_HAND_MOUNTED,
            )
        )
    return causes
