"""One code path from an AdmissionReview body to its response, for the webhook and the CLI.

:func:`decide` parses the envelope (:mod:`shared.core.admission.envelope`, refusing what is not an
AdmissionReview with :class:`MalformedReview`, which the shells map to HTTP 400 or
exit code 2), picks one admitter and returns the request with its decision;
:func:`review` also renders it. The admitters sit side by side, one module each:
:mod:`shared.core.admission.validate_gpuclass`, :mod:`shared.core.admission.mutate_vmi`,
:mod:`shared.core.admission.validate_vmi`, :mod:`shared.core.admission.validate_vm`,
:mod:`shared.core.admission.mutate_pod`, :mod:`shared.core.admission.validate_pod`.

Which admitter answers is the endpoint's business (docs/contract.md section 3): a Pod
posted to `/mutate/pods` gets the launcher tolerations, the same Pod posted to
`/validate/pods` the vGPU entitlement check; a VMI posted to
`/mutate/virtualmachineinstances` is resolved, to `/validate/virtualmachineinstances` judged
as finally stored. :data:`ENDPOINTS` names each endpoint's kind and admitter; without an
endpoint, the kind's first endpoint answers (the mutating one for Pods and VMIs), as
`gpuclass review` always did.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, NamedTuple

from gpuclass.shared.core.admission import (
    mutate_pod,
    mutate_vmi,
    validate_gpuclass,
    validate_pod,
    validate_vm,
    validate_vmi,
)
from gpuclass.shared.core.admission.decisions import Decision, render_response
from gpuclass.shared.core.admission.envelope import (
    GPUCLASS,
    POD,
    VM,
    VMI,
    AdmissionRequest,
    GroupKind,
    MalformedReview,
    parse_envelope,
)
from gpuclass.shared.core.status.catalog import Catalog

__all__ = [
    "ADMITTERS",
    "ENDPOINTS",
    "GPUCLASS",
    "POD",
    "VM",
    "VMI",
    "Endpoint",
    "MalformedReview",
    "Review",
    "decide",
    "review",
]

Admitter = Callable[[AdmissionRequest, Catalog], Decision]


class Endpoint(NamedTuple):
    """One admission path of the webhook (docs/contract.md section 3)."""

    path: str
    webhook: str  # its name in metrics and logs
    kind: GroupKind  # what it admits
    admit: Admitter  # who answers


ENDPOINTS: Final[dict[str, Endpoint]] = {
    endpoint.path: endpoint
    for endpoint in (
        Endpoint("/validate/gpuclasses", "gpuclasses", GPUCLASS, validate_gpuclass.admit),
        Endpoint(
            "/mutate/virtualmachineinstances", "virtualmachineinstances", VMI, mutate_vmi.admit
        ),
        Endpoint("/mutate/pods", "pods", POD, mutate_pod.admit),
        Endpoint("/validate/virtualmachines", "virtualmachines", VM, validate_vm.admit),
        Endpoint("/validate/pods", "vgpu-pods", POD, validate_pod.admit),
        Endpoint(
            "/validate/virtualmachineinstances",
            "final-virtualmachineinstances",
            VMI,
            validate_vmi.admit,
        ),
    )
}
"""The one table of the webhook's admission paths: the webhook's routes and path constants
(`webhook/paths.py`, `webhook/app.py`), `gpuclass review --endpoint` and the kind-only fallback
below all derive from it; the chart's configurations are checked against it."""

ADMITTERS: Final[dict[GroupKind, Admitter]] = {}
for _endpoint in ENDPOINTS.values():  # a kind's first endpoint answers a review without one
    ADMITTERS.setdefault(_endpoint.kind, _endpoint.admit)


class Review(NamedTuple):
    """A request and the decision on it: what the shells log, count and render."""

    request: AdmissionRequest
    decision: Decision

    def response(self) -> dict[str, Any]:
        """The AdmissionReview response for this decision, with the request's uid and apiVersion
        echoed (section 3)."""
        return render_response(
            self.decision, uid=self.request.uid, api_version=self.request.api_version
        )


def decide(
    body: object,
    catalog: Catalog,
    *,
    expect: GroupKind | None = None,
    endpoint: str | None = None,
) -> Review:
    """The request and its decision; `endpoint` (a path of :data:`ENDPOINTS`) picks the admitter
    and the kind it admits, else the kind of the request does."""
    request = parse_envelope(body)
    admitter: Admitter | None
    if endpoint is not None:
        expect, admitter = ENDPOINTS[endpoint].kind, ENDPOINTS[endpoint].admit
    else:
        admitter = ADMITTERS.get(request.kind)
    if expect is not None and request.kind != expect:
        raise MalformedReview(f"request.kind: this endpoint admits {expect}, not {request.kind}")
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


def review(
    body: object,
    catalog: Catalog,
    *,
    expect: GroupKind | None = None,
    endpoint: str | None = None,
) -> dict[str, Any]:
    """The AdmissionReview response for `body`, exactly as the webhook sends it."""
    return decide(body, catalog, expect=expect, endpoint=endpoint).response()
