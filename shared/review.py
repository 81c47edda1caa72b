"""One code path from an AdmissionReview body to its response, for the webhook and the CLI.

:func:`decide` parses the envelope (:mod:`shared.envelope`, refusing what is not an
AdmissionReview with :class:`MalformedReview`, which the shells map to HTTP 400 or
exit code 2), dispatches on the object's kind to one admitter, and returns the
request with its decision; :func:`review` also renders it. The admitters sit side
by side, one module each: :mod:`shared.admit_gpuclass`, :mod:`shared.admit_vmi`,
:mod:`shared.admit_vm`, :mod:`shared.admit_pod`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from gpuclass.shared import admit_gpuclass, admit_pod, admit_vm, admit_vmi
from gpuclass.shared.admission import Decision, render_response
from gpuclass.shared.catalog import Catalog
from gpuclass.shared.envelope import (
    GPUCLASS,
    POD,
    VM,
    VMI,
    AdmissionRequest,
    GroupKind,
    MalformedReview,
    parse_envelope,
)

__all__ = [
    "ADMITTERS",
    "GPUCLASS",
    "POD",
    "VM",
    "VMI",
    "MalformedReview",
    "Review",
    "decide",
    "review",
]

Admitter = Callable[[AdmissionRequest, Catalog], Decision]

ADMITTERS: Final[dict[GroupKind, Admitter]] = {
    GPUCLASS: admit_gpuclass.admit,
    VMI: admit_vmi.admit,
    VM: admit_vm.admit,
    POD: admit_pod.admit,
}


@dataclass(frozen=True, slots=True)
class Review:
    """A request and the decision on it: what the shells log, count and render."""

    request: AdmissionRequest
    decision: Decision

    def response(self) -> dict[str, Any]:
        return render_response(
            self.decision, uid=self.request.uid, api_version=self.request.api_version
        )


def decide(body: object, catalog: Catalog, *, expect: GroupKind | None = None) -> Review:
    request = parse_envelope(body)
    if expect is not None and request.kind != expect:
        raise MalformedReview(f"request.kind: this endpoint admits {expect}, not {request.kind}")
    admitter = ADMITTERS.get(request.kind)
    if admitter is None:
        raise MalformedReview(
            f"request.kind: gpuclass does not admit {request.kind} "
            "(only GPUClass, VirtualMachine, VirtualMachineInstance and Pod)"
        )
    try:
        decision = admitter(request, catalog)
    except RecursionError:
        # orjson parses up to 1024 levels, the rules recurse into objects (Python stops near
        # 1000): a Kubernetes object never nests that deep, so this is input, not a fault.
        raise MalformedReview(
            "request.object: nests too deeply to be a Kubernetes object"
        ) from None
    return Review(request, decision)


def review(body: object, catalog: Catalog, *, expect: GroupKind | None = None) -> dict[str, Any]:
    """The AdmissionReview response for `body`, exactly as the webhook sends it."""
    return decide(body, catalog, expect=expect).response()
