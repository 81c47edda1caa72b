"""`pod_requests`: what a bound Pod holds, as the kube-scheduler counts it, in one pass.

The reference below is the rule of k8s.io/component-helpers `resource.PodRequests`, written the
plain way (docs/decisions.md, "Status"): every init container in order, a sidecar
(`restartPolicy: Always`) joining the running set, an ordinary init container running beside the
sidecars started before it, the Pod holding the larger of that peak and the sum of containers and
sidecars, plus overhead. The e2e scheduler test checks the same rule against the real scheduler.

A tenant's Pod can carry thousands of init containers and extended resource names; copying the
sidecars' resources for each init container made one such Pod cost seconds of the reconciler's
event loop (4,000 init containers: 1.2 s; 5,000 names on one sidecar then 5,000 init containers:
5.3 s). The work must grow with the Pod's size, not its square.
"""

from __future__ import annotations

import sys
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuclass.shared.core.model.podrequests import pod_requests

NAMES = ("example.com/gpu", "example.com/vgpu", "other.io/fpga")


def reference(spec: dict[str, Any]) -> dict[str, int]:
    def requests(container: dict[str, Any]) -> dict[str, int]:
        resources = container.get("resources", {})
        merged = dict(resources.get("limits", {}))
        merged.update(resources.get("requests", {}))
        return merged

    def add(total: dict[str, int], more: dict[str, int]) -> None:
        for key, units in more.items():
            total[key] = total.get(key, 0) + units

    total: dict[str, int] = {}
    for container in spec.get("containers", []):
        add(total, requests(container))
    sidecars: dict[str, int] = {}
    peak: dict[str, int] = {}
    for container in spec.get("initContainers", []):
        own = requests(container)
        if container.get("restartPolicy") == "Always":
            add(total, own)
            add(sidecars, own)
            running = dict(sidecars)
        else:
            running = dict(own)
            add(running, sidecars)
        for key, units in running.items():
            peak[key] = max(peak.get(key, 0), units)
    for key, units in peak.items():
        total[key] = max(total.get(key, 0), units)
    add(total, spec.get("overhead", {}))
    return {key: units for key, units in total.items() if units > 0}


amounts = st.dictionaries(st.sampled_from(NAMES), st.integers(0, 9), max_size=3)
containers = st.builds(
    lambda requests, limits: {"name": "c", "resources": {"requests": requests, "limits": limits}},
    amounts,
    amounts,
)
init_containers = st.builds(
    lambda container, sidecar: container | ({"restartPolicy": "Always"} if sidecar else {}),
    containers,
    st.booleans(),
)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(containers, min_size=1, max_size=3),
    st.lists(init_containers, max_size=6),
    st.one_of(st.none(), amounts),
)
def test_pod_requests_follow_the_schedulers_rule(
    regular: list[dict[str, Any]],
    inits: list[dict[str, Any]],
    overhead: dict[str, int] | None,
) -> None:
    spec: dict[str, Any] = {"containers": regular}
    if inits:
        spec["initContainers"] = inits
    if overhead is not None:
        spec["overhead"] = overhead
    assert pod_requests(spec) == reference(spec)


def _pod(size: int) -> dict[str, Any]:
    """One sidecar naming `size` resources, then `size` init containers of one resource each."""
    sidecar = {
        "name": "s",
        "restartPolicy": "Always",
        "resources": {"limits": {f"e.io/r{i}": "1" for i in range(size)}},
    }
    inits = [{"name": f"i{i}", "resources": {"limits": {f"e.io/r{i}": "2"}}} for i in range(size)]
    return {"containers": [{"name": "c"}], "initContainers": [sidecar, *inits]}


def _lines_run(spec: dict[str, Any]) -> int:
    """Python lines `pod_requests` executes in its module for `spec`: its work, counted,
    not timed (a timing ratio failed under a loaded machine; docs/conventions.md rule 16 keeps
    speed to benchmarks)."""
    from gpuclass.shared.core.model import podrequests

    count = 0

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        nonlocal count
        if frame.f_code.co_filename != podrequests.__file__:
            return None
        if event == "line":
            count += 1
        return tracer

    before = sys.gettrace()  # coverage's tracer, when the suite measures it
    sys.settrace(tracer)
    try:
        pod_requests(spec)
    finally:
        sys.settrace(before)
    return count


def test_pod_requests_grow_with_the_pod_not_its_square() -> None:
    """Ten times the Pod must cost about ten times the work (a hundred when quadratic: a copy of
    every sidecar resource per init container cost a tenant's Pod of 5,000 init containers 5 s
    of the reconciler): the lines run for two sizes, at most 12 times as many."""
    small, large = _pod(500), _pod(5000)
    assert pod_requests(large) == {f"e.io/r{i}": 3 for i in range(5000)}
    ratio = _lines_run(large) / _lines_run(small)
    assert ratio <= 12, f"10x the Pod ran {ratio:.1f}x the lines"
