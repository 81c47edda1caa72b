"""The soak's world: a real control plane with kwok, the chart's two webhook replicas behind a
Service and its two reconciler replicas with leader election, a GPU fleet, tenants, and the
steady population the churn works on (benchmarks/soak.py; the short form in
tests/e2e/test_e2e_soak.py).

Everything runs as the chart runs it: each binary as its chart ServiceAccount with the chart's
RBAC and policies, the webhook in its default certificate mode (`--cert-secret`: it issues its
own CA and certificate and keeps the configurations' caBundle), the chart's configurations
(only `clientConfig` pointed at the Service), launcher Pods created as KubeVirt's controller.
Each binary reaches the API server through its own :class:`FaultProxy`, so a fault can cut its
watches. Lifetimes are minutes, not days, so certificates and CAs rotate during a soak.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.builders import api_gpuclass, api_licensed_class, api_namespace, api_secret
from tests.chart_helpers import NAMESPACE as RELEASE_NS
from tests.chart_helpers import chart_webhook_configurations, documents, render, webhook_identity
from tests.controlplane.api import Api, ApiError, RawObject
from tests.controlplane.cluster import ControlPlane, User, eventually, free_port
from tests.controlplane.components import Component, kwok, kwok_node, set_allocatable
from tests.controlplane.faultproxy import FaultProxy
from tests.e2e_reconciler_helpers import (
    ENTITLED,
    KUBEVIRT_CONTROLLER,
    KUBEVIRT_CONTROLLER_GROUPS,
    KUBEVIRT_NAMESPACE,
    LEASE_NAME,
    LICENSE_NAMESPACE,
    LICENSE_SOURCES,
    SERVICE_ACCOUNT,
    SERVICE_ACCOUNT_GROUPS,
    TOKEN_KEY,
    Launchers,
    PermittedDevices,
    ReconcilerProcess,
    Timings,
    apply_chart_rbac,
    reconciler_args,
    wait_for_chart_rbac,
)
from tests.soak_service import ServiceBalancer
from tests.webhook_process import WebhookProcess

CERT_SECRET = "gpuclass-webhook-certs"
# Minutes instead of days: a serving certificate lives 6 minutes and is renewed with 3 left; a CA
# lives 20 minutes, a next one is made with 10 left and sits 30 s in every bundle before it signs.
CERT_LIFETIMES = (
    "--cert-ca-validity-seconds=1200",
    "--cert-ca-renew-before-seconds=600",
    "--cert-validity-seconds=360",
    "--cert-renew-before-seconds=180",
    "--cert-overlap-seconds=30",
    "--cert-poll-seconds=2",
)
DRAIN_SECONDS = 5  # the chart's shutdown.drainSeconds
PRE_STOP_SECONDS = 5  # the chart's shutdown.preStopSeconds
PODS_NS = "soak-pods"


@dataclass(frozen=True)
class ClassSpec:
    name: str
    resource: str
    units: int  # per node
    source: str | None = None  # licensed: the source Secret
    feature_type: int = 1
    vgpu: bool = False


CLASSES = (
    ClassSpec("soak-whole-a", "soak.example.com/whole-a", 8),
    ClassSpec("soak-whole-b", "soak.example.com/whole-b", 4),
    ClassSpec("soak-licensed-1", "soak.example.com/vgpu-1", 16, LICENSE_SOURCES[0], 1, True),
    ClassSpec("soak-licensed-4", "soak.example.com/vgpu-4", 16, LICENSE_SOURCES[1], 4, True),
    ClassSpec("soak-byol", "soak.example.com/vgpu-byol", 16, vgpu=True),
)


def class_object(spec: ClassSpec) -> RawObject:
    if spec.source is not None:
        return api_licensed_class(spec.name, spec.resource, spec.source, spec.feature_type)
    if spec.vgpu:
        return api_gpuclass(spec.name, spec.resource, mode="vgpu", profile="soak-1b")
    return api_gpuclass(spec.name, spec.resource)


def node_name(index: int) -> str:
    return f"soak-node-{index:04d}"


def tenant(index: int) -> str:
    return f"tenant-soak{index}"


@dataclass
class Tracked:
    """A process the soak started, for sampling: which role, which replica, its pid."""

    label: str
    pid: int
    started: float


@dataclass
class Fleet:
    """The binaries: webhook replicas behind the Service, reconciler replicas on a Lease."""

    plane: ControlPlane
    workdir: Path
    timings: Timings
    log: Callable[[str], None]
    service: ServiceBalancer = field(default_factory=ServiceBalancer)
    webhooks: dict[str, WebhookProcess] = field(default_factory=dict)
    reconcilers: dict[str, ReconcilerProcess] = field(default_factory=dict)
    tracked: list[Tracked] = field(default_factory=list)
    proxies: dict[str, FaultProxy] = field(default_factory=dict)
    kubeconfigs: dict[str, Path] = field(default_factory=dict)
    configurations: list[RawObject] = field(default_factory=list)
    started: dict[str, WebhookProcess | ReconcilerProcess] = field(default_factory=dict)
    _serial: int = 0

    def _proxied(self, role: str, user: User) -> None:
        proxy = FaultProxy(
            upstream=self.plane.server,
            ca_file=self.plane.ca_file,
            cert_file=user.cert_file,
            key_file=user.key_file,
            serving=self.plane.serving_cert(f"soak-proxy-{role}"),
        ).start()
        self.proxies[role] = proxy
        self.kubeconfigs[role] = proxy.kubeconfig(user.kubeconfig, self.workdir / f"{role}.conf")

    def prepare(self) -> None:
        name, groups = webhook_identity()
        self._proxied("webhook", self.plane.user(name, groups))
        self._proxied("reconciler", self.plane.user(SERVICE_ACCOUNT, list(SERVICE_ACCOUNT_GROUPS)))
        self.configurations = chart_webhook_configurations(self.service.url, b"")
        for configuration in self.configurations:
            for hook in configuration["webhooks"]:
                hook["clientConfig"].pop("caBundle", None)  # the webhook keeps it
        self.plane.admin.apply(self.configurations)

    def _name(self, role: str) -> str:
        self._serial += 1
        return f"{role}-{self._serial}"

    def start_webhook(self) -> str:
        mutating, validating = (
            next(c["metadata"]["name"] for c in self.configurations if c["kind"] == kind)
            for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
        )
        name = self._name("webhook")
        port = free_port()
        process = WebhookProcess(
            [
                "--kubeconfig", str(self.kubeconfigs["webhook"]),
                "--port", str(port),
                "--vgpu-entitled",
                "--cert-secret", CERT_SECRET,
                "--cert-namespace", RELEASE_NS,
                "--cert-mutating-webhook-configuration", mutating,
                "--cert-validating-webhook-configuration", validating,
                "--tls-hosts", "127.0.0.1",
                f"--drain-seconds={DRAIN_SECONDS}",
                *CERT_LIFETIMES,
            ],
            tls_dir=self.workdir / name,
        )  # fmt: skip
        self.webhooks[name] = process
        self.started[name] = process
        self.tracked.append(Tracked(name, process.proc.pid, time.monotonic()))
        self.service.add(name, process.port)
        eventually(lambda: name in self.service.ready_names(), timeout=60, what=f"{name} ready")
        self.log(f"started {name} (pid {process.proc.pid}, port {process.port})")
        return name

    def roll_webhook(self, old: str) -> str:
        """A rolling update's step: the new Pod ready first, then the old one leaves the endpoints,
        sleeps its preStop, gets SIGTERM and drains (the chart's shutdown settings)."""
        new = self.start_webhook()
        self.service.remove(old)
        time.sleep(PRE_STOP_SECONDS)
        process = self.webhooks.pop(old)
        process.stop(signal.SIGTERM, timeout=DRAIN_SECONDS + 20)
        self.service.forget(old)
        self.log(f"rolled {old} -> {new}")
        return new

    def start_reconciler(self) -> str:
        name = self._name("reconciler")
        process = ReconcilerProcess(
            self.kubeconfigs["reconciler"],
            pod_name=name,
            timings=self.timings,
            args=reconciler_args(),
            start_timeout=60,
        )
        self.reconcilers[name] = process
        self.started[name] = process
        self.tracked.append(Tracked(name, process.proc.pid, time.monotonic()))
        self.log(f"started {name} (pid {process.proc.pid})")
        return name

    def leader(self, api: Api) -> str | None:
        lease = api.get("coordination.k8s.io/v1", "Lease", LEASE_NAME, namespace=RELEASE_NS)
        holder = ((lease or {}).get("spec") or {}).get("holderIdentity")
        return holder if holder in self.reconcilers else None

    def kill_reconciler(self, name: str) -> None:
        self.reconcilers.pop(name).kill()
        self.log(f"SIGKILL {name}")

    def logs(self) -> dict[str, list[str]]:
        """Every process this fleet started, ended or not: its log lines."""
        return {name: list(process.lines) for name, process in self.started.items()}

    def close(self) -> None:
        for process in self.webhooks.values():
            with contextlib.suppress(Exception):
                process.stop(signal.SIGKILL, timeout=5)
        for reconciler in self.reconcilers.values():
            with contextlib.suppress(Exception):
                reconciler.kill()
        self.service.stop()
        for proxy in self.proxies.values():
            with contextlib.suppress(Exception):
                proxy.stop()


@dataclass
class Population:
    """What the churn works on: node shapes, plain Pods, VMIs with their launchers."""

    nodes: dict[str, ClassSpec] = field(default_factory=dict)
    pods: list[str] = field(default_factory=list)
    vmis: dict[tuple[str, str], RawObject] = field(default_factory=dict)  # stored VMI
    launchers: dict[tuple[str, str], RawObject] = field(default_factory=dict)  # by VMI key
    entitled: dict[str, bool] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)  # source -> current token


def build_world(
    plane: ControlPlane, *, nodes: int, tenants: int, rng: random.Random
) -> tuple[Component, Launchers, Population]:
    """Namespaces, the KubeVirt CR, the chart's RBAC and Secrets, classes, sources, kwok nodes."""
    admin = plane.admin
    world = Population()
    admin.apply(
        [api_namespace(n) for n in (LICENSE_NAMESPACE, KUBEVIRT_NAMESPACE, RELEASE_NS, PODS_NS)]
    )
    for i in range(tenants):
        world.entitled[tenant(i)] = i % 4 != 3  # a quarter not entitled to vGPU
        admin.apply([api_namespace(tenant(i), ENTITLED if world.entitled[tenant(i)] else None)])
    apply_chart_rbac(admin)
    webhook_rbac = documents(render(), template="rbac-webhook.yaml")
    admin.apply(webhook_rbac)
    admin.apply(documents(render(), template="webhook-cabundle-policy.yaml"))
    tls = [o for o in documents(render(), template="webhook-tls.yaml") if o["kind"] == "Secret"]
    admin.apply(tls)
    permitted = PermittedDevices()
    permitted.permit(admin, [c.resource for c in CLASSES if not c.vgpu])
    permitted.permit(admin, [c.resource for c in CLASSES if c.vgpu], mediated=True)
    for spec in CLASSES:
        if spec.source is not None:
            world.tokens[spec.source] = f"token-{rng.randrange(10**9)}"
            admin.apply(
                [api_secret(spec.source, LICENSE_NAMESPACE, {TOKEN_KEY: world.tokens[spec.source]})]
            )
        admin.apply([class_object(spec)])
    launchers = Launchers(plane.user(KUBEVIRT_CONTROLLER, list(KUBEVIRT_CONTROLLER_GROUPS)))
    launchers.grant(admin)
    with plane.user(SERVICE_ACCOUNT, list(SERVICE_ACCOUNT_GROUPS)).api() as as_reconciler:
        wait_for_chart_rbac(as_reconciler)
    fake = kwok(plane)
    for i in range(nodes):
        spec = CLASSES[i % len(CLASSES)]
        world.nodes[node_name(i)] = spec
        admin.create(kwok_node(node_name(i), {}))
        set_allocatable(admin, node_name(i), {spec.resource: spec.units})
    return fake, launchers, world


def stored_token(api: Api, source: str) -> str | None:
    import base64

    found = api.get("v1", "Secret", source, namespace=LICENSE_NAMESPACE)
    data = ((found or {}).get("data") or {}).get(TOKEN_KEY)
    return base64.b64decode(data).decode() if data else None


def rss_and_fds(pid: int) -> tuple[float, int] | None:
    """Resident memory (MB) and open file descriptors of a live process, None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as status:
            rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
        return rss / 1024.0, len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, StopIteration, ValueError):
        return None


def api_error_kind(exc: Exception) -> str:
    """'refused' for an answer admission meant (4xx from a webhook's decision or the API's own
    validation), 'failed' for one that says a webhook could not be reached or answered badly."""
    if isinstance(exc, ApiError):
        text = str(exc)
        if "failed calling webhook" in text or exc.status_code >= 500:
            return "failed"
        return "refused"
    return "unreachable"  # the API server itself did not answer (a restart)


def selection(spec: ClassSpec) -> list[dict[str, Any]]:
    return [{"className": spec.name}]
