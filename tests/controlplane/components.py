"""kube-scheduler, kube-controller-manager and kwok beside the test control plane.

The plain control plane (cluster.py) has no scheduler, no controllers and no
kubelet: tests write what those would. The few tests that must see what the real
scheduler does start these three next to it (fixtures in plugin.py):

- **kube-scheduler** as `system:kube-scheduler`, with only the bootstrap RBAC the
  API server creates for that user, leader election off, its default profile;
- **kube-controller-manager** as `system:kube-controller-manager` running only the
  controllers a test names: by default the node lifecycle controller (Ready=Unknown
  and the `unreachable`/`not-ready`/`unschedulable` taints) with short grace periods,
  or the garbage collector; it acts with its own identity, which gets the bootstrap
  role of each controller it runs bound to it (`system:controller:node-controller`,
  `system:controller:generic-garbage-collector`; no service-account tokens exist:
  the ServiceAccount admission plugin is off);
- **kwok** playing the kubelet for the Nodes labelled `kwok.x-k8s.io/node: fake`
  (other tests' hand-written Nodes are left alone): it makes them Ready, renews
  their Leases, and runs their Pods with kwok's default Stages
  (tests/controlplane/kwok/stages.yaml). A Node whose label is removed leaves
  kwok's watch (a label selector, applied by the API server), so its heartbeat
  stops, as when a kubelet dies, and the node lifecycle controller marks it
  NotReady. (An annotation selector would not do: kwok applies it only when it
  first sees a Node, and keeps renewing the Lease after the annotation goes.)

Each component is one process group in the plane's folder with its own log, is
ready once it answers (`/healthz`, or a canary Node made Ready for kwok), and
is stopped by :meth:`Component.stop`.

Boundary: process plumbing only; what a test builds on top is the test's business.
"""

from __future__ import annotations

import contextlib
import os
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.builders import KUBEVIRT_DEVICES, KUBEVIRT_NODE_LABELS
from tests.controlplane.api import Api, RawObject
from tests.controlplane.cluster import (
    ControlPlane,
    ControlPlaneError,
    _Process,
    eventually,
    free_port,
    unique_name,
)

HERE = Path(__file__).resolve().parent
KWOK_STAGES = HERE / "kwok" / "stages.yaml"
COMPONENT_BINARIES = ("kube-scheduler", "kube-controller-manager", "kwok")
KWOK_LABEL = "kwok.x-k8s.io/node"
KWOK_MANAGED = {KWOK_LABEL: "fake"}
SCHEDULER_USER = "system:kube-scheduler"
CONTROLLER_MANAGER_USER = "system:kube-controller-manager"
KWOK_USER = "gpuclass-test-kwok"
MERGE = "application/merge-patch+json"


def missing_binaries(assets: Path, names: Sequence[str] = COMPONENT_BINARIES) -> list[str]:
    """The component binaries `assets` lacks (tests that need them skip)."""
    return [name for name in names if not os.access(assets / name, os.X_OK)]


@dataclass(frozen=True, slots=True)
class NodeLifecycleTimings:
    """How fast a silent Node turns NotReady. kwok renews a node Lease every quarter of
    its duration (1 s here), so the 10 s grace period spans ten missed renewals: a busy
    two-core machine does not make healthy nodes flap."""

    monitor_period: float = 1.0
    grace_period: float = 10.0
    startup_grace: float = 20.0
    lease_seconds: int = 4


FAST_LIFECYCLE = NodeLifecycleTimings()


class Component:
    """One component process of a ControlPlane; `ready` decides when it has started."""

    def __init__(
        self,
        plane: ControlPlane,
        name: str,
        argv: Sequence[str],
        *,
        ready: Callable[[Component], bool],
        start_timeout: float = 60.0,
    ) -> None:
        self.plane, self.name = plane, name
        self._process = _Process(name, argv, plane.workdir / f"{name}.log")
        self._ready = ready
        self.start_timeout = start_timeout

    @property
    def log(self) -> Path:
        return self._process.log

    @property
    def pid(self) -> int | None:
        return self._process.pid

    @property
    def alive(self) -> bool:
        return self._process.pid is not None and self._process.exit_code() is None

    def start(self) -> Component:
        self._process.start()

        def started() -> bool:
            if self._process.exit_code() is not None:
                raise self._failure(f"exited with code {self._process.exit_code()}")
            return self._ready(self)

        try:
            eventually(started, timeout=self.start_timeout, what=f"{self.name} to be ready")
        except TimeoutError as exc:
            self.stop()
            raise self._failure(str(exc)) from exc
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        self._process.stop()

    def tail(self, lines: int = 25) -> str:
        return self._process.tail(lines)

    def _failure(self, reason: str) -> ControlPlaneError:
        return ControlPlaneError(
            f"{self.name} {reason}; its log ({self.log}) ends with:\n{self._process.tail()}"
        )

    def __enter__(self) -> Component:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def _healthz(port: int) -> Callable[[Component], bool]:
    """Ready when the component's secure port answers /healthz `ok` (self-signed
    serving certificate; /healthz is in the default always-allowed paths)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE

    def ready(_: Component) -> bool:
        try:
            response = httpx.get(f"https://127.0.0.1:{port}/healthz", verify=context, timeout=2)
        except httpx.HTTPError:
            return False
        return response.status_code == 200 and response.text.strip() == "ok"

    return ready


def _bind(api: Api, name: str, role: str, user: str) -> None:
    api.apply(
        [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": name},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": role,
                },
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}
                ],
            }
        ]
    )


# -- kube-scheduler -------------------------------------------------------------------------------


def scheduler(plane: ControlPlane, *, flags: Sequence[str] = ()) -> Component:
    """kube-scheduler as `system:kube-scheduler` (the API server's bootstrap bindings
    `system:kube-scheduler` and `system:volume-scheduler` give it its rights)."""
    user = plane.user(SCHEDULER_USER, stem="kube-scheduler")
    port = free_port()
    argv = [
        str(plane.assets / "kube-scheduler"),
        f"--kubeconfig={user.kubeconfig}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={plane.workdir / 'kube-scheduler'}",
        "--profiling=false",
        "-v=2",
        *flags,
    ]
    return Component(plane, "kube-scheduler", argv, ready=_healthz(port)).start()


# -- kube-controller-manager ----------------------------------------------------------------------


def controller_manager(
    plane: ControlPlane,
    *,
    controllers: Sequence[str] = ("node-lifecycle-controller",),
    roles: Sequence[str] = ("system:controller:node-controller",),
    timings: NodeLifecycleTimings = FAST_LIFECYCLE,
    flags: Sequence[str] = (),
) -> Component:
    """kube-controller-manager with only `controllers` (default: the node lifecycle
    controller; no taint-eviction controller, so NoExecute taints evict nothing), acting
    with the bootstrap `roles` of those controllers (e.g.
    `system:controller:generic-garbage-collector` for `garbage-collector-controller`)."""
    for role in roles:
        _bind(
            plane.admin,
            f"gpuclass-test:kube-controller-manager:{role.rsplit(':', 1)[-1]}",
            role,
            CONTROLLER_MANAGER_USER,
        )
    user = plane.user(CONTROLLER_MANAGER_USER, stem="kube-controller-manager")
    port = free_port()
    argv = [
        str(plane.assets / "kube-controller-manager"),
        f"--kubeconfig={user.kubeconfig}",
        f"--controllers={','.join(controllers)}",
        "--use-service-account-credentials=false",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={plane.workdir / 'kube-controller-manager'}",
        f"--node-monitor-period={timings.monitor_period}s",
        f"--node-monitor-grace-period={timings.grace_period}s",
        f"--node-startup-grace-period={timings.startup_grace}s",
        "--profiling=false",
        "-v=2",
        *flags,
    ]
    return Component(plane, "kube-controller-manager", argv, ready=_healthz(port)).start()


# -- kwok -----------------------------------------------------------------------------------------


def kwok(
    plane: ControlPlane,
    *,
    lease_seconds: int = FAST_LIFECYCLE.lease_seconds,
    flags: Sequence[str] = (),
) -> Component:
    """kwok managing the Nodes labelled `kwok.x-k8s.io/node: fake` and their Pods.

    Ready once a canary Node it manages turns Ready (the canary is deleted again)."""
    _bind(plane.admin, "gpuclass-test:kwok", "cluster-admin", KWOK_USER)
    user = plane.user(KWOK_USER, stem="kwok")
    argv = [
        str(plane.assets / "kwok"),
        f"--kubeconfig={user.kubeconfig}",
        f"--config={KWOK_STAGES}",
        f"--manage-nodes-with-label-selector={KWOK_LABEL}=fake",
        f"--node-lease-duration-seconds={lease_seconds}",
        "--cidr=10.16.0.0/12",
        "--node-ip=10.15.0.1",
        *flags,
    ]
    canary = unique_name("kwok-canary")
    state: dict[str, bool] = {"created": False}

    def ready(_: Component) -> bool:
        api = plane.admin
        if not state["created"]:
            api.create(kwok_node(canary, {}))
            state["created"] = True
        return node_ready(api.get("v1", "Node", canary))

    try:
        return Component(plane, "kwok", argv, ready=ready).start()
    finally:
        if state["created"]:
            with contextlib.suppress(Exception):
                plane.admin.request("DELETE", f"/api/v1/nodes/{canary}")


def kwok_node(
    name: str,
    allocatable: dict[str, int | str],
    *,
    labels: dict[str, str] | None = None,
    taints: Sequence[RawObject] = (),
    unschedulable: bool = False,
    kubevirt: bool = True,
) -> RawObject:
    """A Node kwok will manage, a KubeVirt node (virt-handler's label) unless `kubevirt` is
    False. Its allocatable (beside cpu/memory/pods and virt-handler's device defaults) is set
    through /status by :func:`set_allocatable` once it exists."""
    handler = KUBEVIRT_NODE_LABELS if kubevirt else {}
    meta: RawObject = {"name": name, "labels": {**handler, **(labels or {}), **KWOK_MANAGED}}
    spec: RawObject = {}
    if taints:
        spec["taints"] = [dict(t) for t in taints]
    if unschedulable:
        spec["unschedulable"] = True
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta, "spec": spec}


def set_allocatable(api: Api, name: str, amounts: Mapping[str, int | str | None]) -> RawObject:
    """Capacity and allocatable of a Node, as its kubelet (and device plugins) report them
    (cpu/memory/pods and virt-handler's device defaults beside `amounts`; None takes a resource
    away)."""
    full: dict[str, str | None] = {"cpu": "32", "memory": "256Gi", "pods": "110"}
    full.update(KUBEVIRT_DEVICES)
    full.update({k: None if v is None else str(v) for k, v in amounts.items()})
    body = {"status": {"capacity": dict(full), "allocatable": dict(full)}}
    return api.call("PATCH", f"/api/v1/nodes/{name}/status", body=body, content_type=MERGE)


def set_kwok_managed(api: Api, name: str, managed: bool) -> RawObject:
    """Hand a Node to kwok, or take it away (its heartbeats stop: it goes NotReady)."""
    body = {"metadata": {"labels": {KWOK_LABEL: "fake" if managed else None}}}
    return api.call("PATCH", f"/api/v1/nodes/{name}", body=body, content_type=MERGE)


def node_ready(node: RawObject | None) -> bool:
    conditions = ((node or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def wait_gone(api: Api, path: str, *, timeout: float = 30.0) -> None:
    """Wait until GET `path` answers 404."""
    deadline = time.monotonic() + timeout
    while api.request("GET", path).status_code != 404:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} still exists after {timeout:.0f}s")
        time.sleep(0.2)
