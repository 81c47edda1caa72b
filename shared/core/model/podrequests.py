"""What a Pod holds: its effective request per extended resource, as the kube-scheduler counts it.

:func:`pod_requests` is the rule of k8s.io/component-helpers `resource.PodRequests`, in one pass
(docs/decisions.md, "Status"); :func:`compact_pod` keeps, of a bound Pending or Running Pod, only
its node and what it requests (:class:`PodRecord`), the record the snapshot and the reconciler's
store hold. Pure: raw dicts in, records out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuclass.shared.core.base.k8s import quantity_units
from gpuclass.shared.core.base.raw import list_at

ACTIVE_POD_PHASES = frozenset({"Pending", "Running"})


@dataclass(frozen=True, slots=True)
class PodRecord:
    """A Pod that holds units: its node and its effective request per extended resource
    (:func:`pod_requests`), nothing else."""

    node: str
    requests: Mapping[str, int]


def extended_units(resources: object) -> dict[str, int]:
    """Extended resources (names with a '/') as whole units."""
    if not isinstance(resources, dict):
        return {}
    try:  # most maps name only cpu and memory: one C-speed look at all their keys at once
        if "/" not in "".join(resources):
            return {}
    except TypeError:  # a key that is not a string: look at each
        pass
    return {k: quantity_units(v) for k, v in resources.items() if isinstance(k, str) and "/" in k}


def pod_requests(
    spec: Mapping[str, Any], read: Callable[[object], dict[str, int]] | None = None
) -> dict[str, int]:
    """Effective Pod request per extended resource, exactly as the kube-scheduler counts it.

    The rule of k8s.io/component-helpers `resource.PodRequests` (docs/decisions.md, "Status"):
    sidecars (init containers with `restartPolicy: Always`) keep running beside the regular
    containers, so they add to their sum; an ordinary init container runs alone beside the
    sidecars started before it. The Pod holds the larger of the two, plus `spec.overhead`:

        max(sum(containers) + sum(sidecars), max_i(init_i + sum(sidecars before i))) + overhead

    `read` turns a resource list into amounts: extended resources as whole units by default
    (`gpuclass explain` passes one that reads CPU and memory, :mod:`shared.core.model.detail`).
    """
    read = read or extended_units
    containers = spec.get("containers")
    if (  # most pods: one container, no init containers, no overhead
        "initContainers" not in spec
        and "overhead" not in spec
        and isinstance(containers, list)
        and len(containers) == 1
        and isinstance(containers[0], dict)
    ):
        only = _container_requests(containers[0], read)
        return {k: v for k, v in only.items() if v > 0} if only else only
    total: dict[str, int] = {}
    for container in list_at(containers):
        if isinstance(container, dict):
            add_amounts(total, _container_requests(container, read))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for container in list_at(spec.get("initContainers")):
        if not isinstance(container, dict):
            continue
        own = _container_requests(container, read)
        if container.get("restartPolicy") == "Always":
            add_amounts(total, own)
            add_amounts(sidecars, own)
            # While a sidecar starts, the sidecars so far run: never more than `total`, which
            # holds them all and the containers too (units are never negative).
            continue
        # An init container runs beside the sidecars started before it. Only its own resources
        # can peak above `total` (any other is a sidecar sum): one pass over them, not a copy of
        # every sidecar resource per init container (a tenant's Pod of thousands was quadratic).
        for key, units in own.items():
            peak = units + sidecars.get(key, 0)
            if peak > init_peak.get(key, 0):
                init_peak[key] = peak
    for key, units in init_peak.items():
        total[key] = max(total.get(key, 0), units)
    add_amounts(total, read(spec.get("overhead")))
    return {k: v for k, v in total.items() if v > 0}


def add_amounts(total: dict[str, int], more: Mapping[str, int]) -> None:
    """Add `more` into `total`, key by key."""
    for key, units in more.items():
        total[key] = total.get(key, 0) + units


def _container_requests(
    container: Mapping[str, Any], read: Callable[[object], dict[str, int]]
) -> dict[str, int]:
    resources = container.get("resources")
    if not isinstance(resources, dict):
        return {}
    # A limit alone implies an equal request (extended resources cannot be overcommitted; for
    # CPU and memory the API server defaults the request to the limit).
    merged = read(resources.get("limits"))
    merged.update(read(resources.get("requests")))
    return merged


def compact_pod(obj: Mapping[str, Any]) -> PodRecord | None:
    """A pod that holds units: bound to a node, Pending or Running, requesting any extended resource."""
    spec = obj.get("spec")
    status = obj.get("status")
    if not isinstance(spec, dict):
        return None
    node = spec.get("nodeName")
    phase = status.get("phase") if isinstance(status, dict) else None
    if not isinstance(node, str) or not node or not isinstance(phase, str):
        return None
    if phase not in ACTIVE_POD_PHASES:
        return None
    requests = pod_requests(spec)
    return PodRecord(node, requests) if requests else None
