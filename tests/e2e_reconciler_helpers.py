"""Plumbing for `gpuclass-reconciler` against the test control plane (tests and benchmark).

- :class:`ReconcilerProcess` runs the real console script as a subprocess (its own
  process group, killed with the test process if that dies), reads its JSON log,
  finds the port it serves `/metrics` on (`--port 0`) and reads its metrics;
- the few writes a kubelet or KubeVirt would make (a Node with its status, pod phase,
  force delete); the object bodies themselves are built by `tests/builders.py`
  (`api_gpuclass`, `api_pod`, `api_secret`, ...);
- :class:`PermittedDevices` adds resource names to the KubeVirt CR and takes them out
  again, leaving other entries (other test modules') alone;
- :func:`apply_chart_rbac` applies the chart's reconciler RBAC and Secret policy, rendered
  with the license sources the tests use (:data:`LICENSE_SOURCES`), and returns what to
  delete afterwards (only what did not exist before);
- :class:`Launchers` makes virt-launcher Pods as KubeVirt's controller does (as its user,
  the VMI their controlling owner, its Secret volumes theirs), binds them as the scheduler
  would and ends them as a kubelet would: the reconciler copies a license only for a
  launcher bound to a node that mounts it (docs/contract.md 6.5);
- the copy record (:data:`COPY_RECORD`): read it, and write entries as a previous replica
  would have left them.

Every API call goes through an :class:`~tests.controlplane.api.Api` given by the caller,
so a test can pass `control_plane.admin` again after `restart_apiserver()`.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.builders import KUBEVIRT_DEVICES, KUBEVIRT_NODE_LABELS, b64
from tests.controlplane.api import Api, ApiError, RawObject
from tests.controlplane.cluster import User, eventually
from tests.controlplane.kubevirt_parts import install_kubevirt_cr

ROOT = Path(__file__).resolve().parent.parent
RECONCILER = Path(sys.executable).with_name("gpuclass-reconciler")
GPUCLASSES = "/apis/cozystack.io/v1alpha1/gpuclasses"
MERGE = "application/merge-patch+json"
FINALIZER = "gpu.cozystack.io/in-use"
ENTITLED = {"gpu.cozystack.io/vgpu": "true"}
MANAGED = {"app.kubernetes.io/managed-by": "gpuclass"}
TOKEN_KEY = "client_configuration_token.tok"
LICENSE_NAMESPACE = "cozy-system"
KUBEVIRT_NAMESPACE = "cozy-kubevirt"
RELEASE_NAMESPACE = "cozy-system"
"""Where the chart is rendered: the reconciler's account, its Lease and its copy record live here."""
LEASE_NAME = "gpuclass-reconciler"  # the chart's Role may get/update only this Lease
COPY_RECORD = "gpuclass-license-copies"  # ... and only this ConfigMap
COPY_RECORD_KEY = "copies.json"
SERVICE_ACCOUNT = f"system:serviceaccount:{RELEASE_NAMESPACE}:gpuclass-reconciler"
SERVICE_ACCOUNT_GROUPS = ("system:serviceaccounts", f"system:serviceaccounts:{RELEASE_NAMESPACE}")
KUBEVIRT_CONTROLLER = f"system:serviceaccount:{KUBEVIRT_NAMESPACE}:kubevirt-controller"
KUBEVIRT_CONTROLLER_GROUPS = (
    "system:serviceaccounts",
    f"system:serviceaccounts:{KUBEVIRT_NAMESPACE}",
)
LICENSE_SOURCES: tuple[str, ...] = tuple(f"e2e-license-source-{i}" for i in range(8))
"""The license source Secrets the tests may use. The chart is rendered with these as
`settings.licenseSecretNames` (a Role with these resourceNames) and the reconciler runs with
`--license-secret-names` naming them: any other Secret is beyond its reach. A handful, as a
hoster lists: each name is one list and one watch of the reconciler. Test modules take
disjoint slices (:func:`license_sources`) and delete theirs when done."""
RBAC_KINDS = (
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
)
_LISTENING = re.compile(r"Uvicorn running on https?://[^\s:]+:(\d+)")


# -- the reconciler as a process ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Timings:
    """Lease and worker timings; the tests use short ones, the benchmark the defaults."""

    lease_duration: float = 3.0
    renew_deadline: float = 2.0
    retry_period: float = 0.5
    coalesce: float = 0.05

    def args(self) -> list[str]:
        return [
            f"--lease-duration-seconds={self.lease_duration}",
            f"--renew-deadline-seconds={self.renew_deadline}",
            f"--retry-period-seconds={self.retry_period}",
            f"--coalesce-seconds={self.coalesce}",
        ]


FAST = Timings()
PRODUCTION = Timings(lease_duration=15.0, renew_deadline=10.0, retry_period=2.0, coalesce=0.2)


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: SIGKILL the reconciler if the process that started it dies without stopping it."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class ReconcilerProcess:
    """`gpuclass-reconciler --kubeconfig ... --port 0` in its own process group."""

    def __init__(
        self,
        kubeconfig: Path,
        *,
        pod_name: str,
        timings: Timings = FAST,
        args: Sequence[str] = (),
        start_timeout: float = 30.0,
        command: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> None:
        """`command` replaces the console script (e.g. another checkout's reconciler run by
        this interpreter) and `env` adds variables; flags and settings are the same."""
        self.pod_name = pod_name
        self.lines: list[str] = []
        self.port = 0
        self._listening = threading.Event()
        argv = [
            *(command or [str(RECONCILER)]),
            f"--kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            "--port=0",
            f"--pod-name={pod_name}",
            "--log-format=json",
            *timings.args(),
            *args,
        ]
        environment = {k: v for k, v in os.environ.items() if not k.startswith("GPUCLASS_")}
        environment.update({"PYTHONUNBUFFERED": "1", **(env or {})})
        self.proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=environment,
            start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )
        assert self.proc.stderr is not None
        self._reader = threading.Thread(target=self._read, args=(self.proc.stderr,), daemon=True)
        self._reader.start()
        self._http = httpx.Client(timeout=5.0)
        if not self._listening.wait(start_timeout):
            self.stop()
            raise RuntimeError(f"{pod_name} did not start serving; its log ends:\n{self.tail()}")

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.append(line.rstrip("\n"))
            if not self._listening.is_set() and (found := _LISTENING.search(line)):
                self.port = int(found.group(1))
                self._listening.set()

    # -- probes -----------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def ready(self) -> bool:
        try:
            return self._http.get(f"{self.url}/readyz").status_code == 200
        except httpx.HTTPError:
            return False

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """Every sample of /metrics: (name, sorted labels) -> value."""
        text = self._http.get(f"{self.url}/metrics").text
        return {
            (s.name, tuple(sorted(s.labels.items()))): float(s.value)
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    def metric(self, name: str, **labels: str) -> float | None:
        """One sample's value, or None when the series does not exist (yet)."""
        try:
            samples = self.metrics()
        except httpx.HTTPError:
            return None
        return samples.get((name, tuple(sorted(labels.items()))))

    def logs(self) -> list[dict[str, Any]]:
        entries = []
        for line in list(self.lines):
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                if isinstance(entry, dict):
                    entries.append(entry)
        return entries

    def tail(self, count: int = 30) -> str:
        return "\n".join(self.lines[-count:])

    # -- ending -----------------------------------------------------------------------------------

    def kill(self) -> None:
        """SIGKILL, no goodbye: the Lease stays held until it expires."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self._http.close()

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM (writes stop, the Lease is released), SIGKILL if it does not exit in time."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
        code = self.proc.wait(10)
        self._reader.join(5)
        self._http.close()
        return code


def reconciler_args(*extra: str) -> list[str]:
    """The arguments the chart gives the reconciler (templates/reconciler-deployment.yaml), with
    the tests' license sources: entitled, the sources by name, its own namespace."""
    return [
        "--vgpu-entitled",
        f"--license-namespace={LICENSE_NAMESPACE}",
        f"--license-secret-names={','.join(LICENSE_SOURCES)}",
        f"--leader-election-namespace={RELEASE_NAMESPACE}",
        *extra,
    ]


def license_sources(first: int, count: int) -> Iterator[str]:
    """A module's slice of :data:`LICENSE_SOURCES`, one name per licensed class it makes."""
    names = LICENSE_SOURCES[first : first + count]
    assert len(names) == count, "LICENSE_SOURCES has too few names for this slice"
    return iter(names)


# -- what a kubelet or KubeVirt would write --------------------------------------------------------


def node_path(name: str) -> str:
    return f"/api/v1/nodes/{name}"


def pod_path(ns: str, name: str) -> str:
    return f"/api/v1/namespaces/{ns}/pods/{name}"


def set_node_status(
    api: Api, name: str, *, ready: bool = True, allocatable: Mapping[str, int] | None = None
) -> RawObject:
    """The node's Ready condition and (when given) its allocatable, through /status; the
    allocatable holds virt-handler's devices unless `allocatable` names them (at 0: missing)."""
    status: RawObject = {
        "conditions": [
            {
                "type": "Ready",
                "status": "True" if ready else "False",
                "reason": "KubeletReady" if ready else "KubeletNotReady",
                "message": "e2e",
            }
        ]
    }
    if allocatable is not None:
        amounts = {"cpu": "16", "memory": "64Gi", "pods": "110", **KUBEVIRT_DEVICES}
        amounts.update({k: str(v) for k, v in allocatable.items()})
        status["allocatable"] = amounts
        status["capacity"] = dict(amounts)
    return api.call(
        "PATCH", node_path(name) + "/status", body={"status": status}, content_type=MERGE
    )


def set_taints(api: Api, name: str, taints: Sequence[Mapping[str, str]]) -> RawObject:
    """Replace the node's taints (the API server adds `not-ready:NoSchedule` to a new Node)."""
    body = {"spec": {"taints": [dict(t) for t in taints] or None}}
    return api.call("PATCH", node_path(name), body=body, content_type=MERGE)


def create_node(
    api: Api,
    name: str,
    allocatable: Mapping[str, int],
    *,
    ready: bool = True,
    taints: Sequence[Mapping[str, str]] | None = (),
    labels: Mapping[str, str] | None = None,
    kubevirt: bool = True,
) -> RawObject:
    """A Node with its status set; `taints` replace the API server's not-ready taint
    (None keeps it, as on a node whose controller has not cleared it yet). A KubeVirt node
    (virt-handler's label) unless `kubevirt` is False."""
    meta: RawObject = {"name": name}
    all_labels = {**(KUBEVIRT_NODE_LABELS if kubevirt else {}), **(labels or {})}
    if all_labels:
        meta["labels"] = all_labels
    api.create({"apiVersion": "v1", "kind": "Node", "metadata": meta})
    stored = set_node_status(api, name, ready=ready, allocatable=allocatable)
    if taints is not None:
        stored = set_taints(api, name, taints)
    return stored


def cordon(api: Api, name: str, unschedulable: bool = True) -> RawObject:
    body = {"spec": {"unschedulable": True if unschedulable else None}}
    return api.call("PATCH", node_path(name), body=body, content_type=MERGE)


def set_pod_phase(api: Api, ns: str, name: str, phase: str) -> RawObject:
    return api.call(
        "PATCH",
        pod_path(ns, name) + "/status",
        body={"status": {"phase": phase}},
        content_type=MERGE,
    )


def force_delete(api: Api, path: str) -> None:
    """Delete at once (a bound Pod otherwise waits for its kubelet); a missing object is fine."""
    response = api.request("DELETE", path, params={"gracePeriodSeconds": "0"})
    if response.status_code not in (200, 202, 404):
        raise ApiError("DELETE", path, response)


# -- reading what the reconciler wrote --------------------------------------------------------------


def get_class(api: Api, name: str) -> RawObject | None:
    return api.get("cozystack.io/v1alpha1", "GPUClass", name)


def figures(obj: RawObject | None) -> tuple[int, int, int] | None:
    """(free, maxFreePerNode, maxUnitsPerNode) of a class, None before any status."""
    status = (obj or {}).get("status") or {}
    if "free" not in status:
        return None
    return (status["free"], status["maxFreePerNode"], status["maxUnitsPerNode"])


def settled_figures(
    api: Api, classes: Sequence[str], *, quiet: float = 1.5, timeout: float = 60.0
) -> list[tuple[int, int, int]]:
    """Each class's figures once none of them has changed for `quiet` seconds (and every class
    has a status): the reconciler has caught up with the last change."""
    last: list[Any] = [None]
    since = [time.monotonic()]

    def settled() -> list[Any] | None:
        current = [figures(get_class(api, name)) for name in classes]
        if current != last[0] or None in current:
            last[0], since[0] = current, time.monotonic()
            return None
        return current if time.monotonic() - since[0] >= quiet else None

    found: list[tuple[int, int, int]] = eventually(
        settled, timeout=timeout, what="class statuses to stop changing", every=0.25
    )
    return found


def pod_scheduled(pod: RawObject | None) -> bool | None:
    """True once bound, False once the scheduler said Unschedulable, None before either."""
    if pod is None:
        return None
    if (pod.get("spec") or {}).get("nodeName"):
        return True
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if (condition.get("type"), condition.get("status"), condition.get("reason")) == (
            "PodScheduled",
            "False",
            "Unschedulable",
        ):
            return False
    return None


def conditions(obj: RawObject | None) -> dict[str, str]:
    """Condition type -> status of a class."""
    found = ((obj or {}).get("status") or {}).get("conditions") or []
    return {c["type"]: c["status"] for c in found}


def events_about(api: Api, class_name: str) -> list[RawObject]:
    """Events the reconciler recorded about a class (they live in namespace default)."""
    body = api.call(
        "GET",
        "/api/v1/namespaces/default/events",
        params={"fieldSelector": f"involvedObject.name={class_name}"},
    )
    return list(body.get("items") or [])


# -- the KubeVirt CR -------------------------------------------------------------------------------


DEVICE_LISTS = ("pciHostDevices", "mediatedDevices")


class PermittedDevices:
    """Adds resource names to the KubeVirt CR in `cozy-kubevirt` (creating it if missing) and
    removes exactly those again; entries other modules put there are kept."""

    def __init__(self, ns: str = KUBEVIRT_NAMESPACE) -> None:
        self.ns = ns
        self.added: set[str] = set()
        self.created: str | None = None

    def _current(self, api: Api) -> RawObject | None:
        path = f"/apis/kubevirt.io/v1/namespaces/{self.ns}/kubevirts"
        deadline = time.monotonic() + 30
        while (response := api.request("GET", path)).status_code == 429:  # CRD storage starting
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if response.status_code >= 400:
            raise ApiError("GET", path, response)
        items = response.json()["items"]
        return items[0] if items else None

    def _write(self, api: Api, change: Any) -> None:
        for _ in range(5):
            cr = self._current(api)
            if cr is None:
                cr = install_kubevirt_cr(api, self.ns, "kubevirt", {"permittedHostDevices": {}})
                self.created = cr["metadata"]["name"]
            permitted = cr.get("spec", {}).get("configuration", {}).get("permittedHostDevices", {})
            lists = {key: list(permitted.get(key) or []) for key in DEVICE_LISTS}
            body = {
                "metadata": {"resourceVersion": cr["metadata"]["resourceVersion"]},
                "spec": {"configuration": {"permittedHostDevices": change(lists)}},
            }
            response = api.request(
                "PATCH",
                f"/apis/kubevirt.io/v1/namespaces/{self.ns}/kubevirts/{cr['metadata']['name']}",
                body=body,
                content_type=MERGE,
            )
            if response.status_code == 409:
                continue
            if response.status_code >= 400:
                raise ApiError("PATCH", "kubevirts", response)
            return
        raise RuntimeError("the KubeVirt CR kept changing under us")

    def permit(self, api: Api, resources: Iterable[str], *, mediated: bool = False) -> None:
        """Add PCI devices, or with `mediated` mediated devices (vGPUs, class or not)."""
        wanted = [r for r in resources if r not in self.added]
        self.added.update(wanted)
        key, selector, value = (
            ("mediatedDevices", "mdevNameSelector", "EXAMPLE-PROFILE")
            if mediated
            else ("pciHostDevices", "pciVendorSelector", "10DE:FFFF")
        )

        def add(lists: dict[str, list[Any]]) -> dict[str, list[Any]]:
            lists[key] = lists[key] + [{selector: value, "resourceName": r} for r in wanted]
            return lists

        self._write(api, add)

    def forbid(self, api: Api, resources: Iterable[str]) -> None:
        gone = set(resources)
        self.added -= gone
        self._write(
            api,
            lambda lists: {
                key: [d for d in devices if d.get("resourceName") not in gone]
                for key, devices in lists.items()
            },
        )

    def restore(self, api: Api) -> None:
        """Take every added name out; delete the CR if this helper created it."""
        if self.created is not None:
            api.request(
                "DELETE", f"/apis/kubevirt.io/v1/namespaces/{self.ns}/kubevirts/{self.created}"
            )
            self.created = None
        elif self.added:
            self.forbid(api, set(self.added))
        self.added.clear()


# -- the chart's RBAC ------------------------------------------------------------------------------


def chart_rbac(license_secret_names: Sequence[str] = LICENSE_SOURCES) -> list[RawObject]:
    """The chart's reconciler rights and policies, rendered with `settings.licenseSecretNames`."""
    from tests.chart_helpers import render_objects  # helm: imported only when needed

    values = {"settings": {"licenseSecretNames": list(license_secret_names)}}
    return [o for o in render_objects(values) if o["kind"] in RBAC_KINDS]


def apply_chart_rbac(
    api: Api, *, license_secret_names: Sequence[str] = LICENSE_SOURCES
) -> list[RawObject]:
    """Apply the chart's reconciler rights (ServiceAccount, roles, bindings, the Role on the
    license sources by name, the ValidatingAdmissionPolicies) as rendered with the tests'
    license sources; returns the objects that did not exist before, for the caller to delete
    when done."""
    objects = chart_rbac(license_secret_names)
    new = [o for o in objects if _absent(api, o)]
    api.apply(objects)
    return new


def wait_for_chart_rbac(user_api: Api) -> None:
    """The chart's rights reach the authorizer's cache a moment after they are applied: wait
    until the reconciler's account may read the classes and a license source by name."""
    source = f"/api/v1/namespaces/{LICENSE_NAMESPACE}/secrets/{LICENSE_SOURCES[0]}"
    eventually(
        lambda: (
            user_api.request("GET", GPUCLASSES).status_code == 200
            and user_api.request("GET", source).status_code in (200, 404)
        ),
        timeout=30,
        what="the chart's RBAC in effect",
    )


def access(
    api: Api, verb: str, resource: str, *, group: str = "", namespace: str = "", name: str = ""
) -> bool:
    """What the authorizer answers `api`'s user for one request (SelfSubjectAccessReview)."""
    attributes = {
        "verb": verb,
        "group": group,
        "resource": resource,
        "namespace": namespace,
        "name": name,
    }
    body = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {k: v for k, v in attributes.items() if v}},
    }
    path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
    return bool(api.call("POST", path, body=body)["status"].get("allowed"))


def _absent(api: Api, obj: RawObject) -> bool:
    return api.request("GET", api.object_path(obj)).status_code == 404


def delete_all(api: Api, objects: Iterable[RawObject]) -> None:
    for obj in objects:
        with contextlib.suppress(ApiError):
            api.delete(obj)


def delete_created(api: Api, created: Iterable[RawObject]) -> None:
    """Delete what a test module created, newest first; classes lose their finalizers first
    (no reconciler may be left to release them)."""
    for obj in reversed(list(created)):
        meta = obj["metadata"]
        if obj["kind"] == "GPUClass":
            api.request(
                "PATCH",
                f"{GPUCLASSES}/{meta['name']}",
                body={"metadata": {"finalizers": None}},
                content_type=MERGE,
            )
        with contextlib.suppress(ApiError, LookupError):
            force_delete(api, api.object_path(obj))


# -- virt-launcher Pods, as KubeVirt's controller makes them ---------------------------------------

LAUNCHER_ROLE: RawObject = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRole",
    "metadata": {"name": "e2e-kubevirt-controller-launchers"},
    "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "delete"]}],
}
LAUNCHER_BINDING: RawObject = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRoleBinding",
    "metadata": {"name": "e2e-kubevirt-controller-launchers"},
    "roleRef": {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "e2e-kubevirt-controller-launchers",
    },
    "subjects": [
        {"kind": "ServiceAccount", "name": "kubevirt-controller", "namespace": KUBEVIRT_NAMESPACE}
    ],
}


def launcher_pod(machine: Mapping[str, Any]) -> RawObject:
    """The virt-launcher Pod KubeVirt v1.8.4's controller renders for a stored VMI
    (pkg/virt-controller/services/template.go, rendervolumes.go): the VMI as controlling
    owner, its annotations, each of its Secret volumes as a Pod volume of the same name and
    Secret, and a request of each GPU device it names. Unbound: the scheduler binds it."""
    meta, spec = machine["metadata"], machine["spec"]
    volumes = [
        {"name": v["name"], "secret": {"secretName": v["secret"]["secretName"]}}
        for v in spec.get("volumes") or []
        if "secret" in v
    ]
    wanted: dict[str, int] = {}
    for gpu in spec.get("domain", {}).get("devices", {}).get("gpus") or []:
        wanted[gpu["deviceName"]] = wanted.get(gpu["deviceName"], 0) + 1
    compute: RawObject = {"name": "compute", "image": "example.org/virt-launcher:1"}
    if wanted:
        amounts = {k: str(v) for k, v in wanted.items()}
        compute["resources"] = {"requests": amounts, "limits": dict(amounts)}
    pod_spec: RawObject = {"containers": [compute]}
    if volumes:
        pod_spec["volumes"] = volumes
    launcher_meta: RawObject = {
        "name": f"virt-launcher-{meta['name'][:40]}-{os.urandom(3).hex()}",
        "namespace": meta["namespace"],
        "labels": {"kubevirt.io": "virt-launcher"},
        "ownerReferences": [
            {
                "apiVersion": "kubevirt.io/v1",
                "kind": "VirtualMachineInstance",
                "name": meta["name"],
                "uid": meta["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    if meta.get("annotations"):
        launcher_meta["annotations"] = dict(meta["annotations"])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": launcher_meta, "spec": pod_spec}


class Launchers:
    """virt-launcher Pods made as KubeVirt's controller makes them: created by its account
    (the only one the chart lets create a Pod that mounts a `gpuclass-license-*` Secret),
    bound to a node through the binding subresource as the scheduler does, and ended through
    the status subresource as a kubelet does. :meth:`grant` gives that account the right to
    create Pods (in a cluster KubeVirt's own install does)."""

    def __init__(self, controller: User) -> None:
        self.controller = controller
        self._api: Api | None = None

    @property
    def api(self) -> Api:
        if self._api is None:
            self._api = self.controller.api()
        return self._api

    def grant(self, admin: Api) -> list[RawObject]:
        """Bind the controller's account its Pod rights; returns what did not exist before."""
        objects = [LAUNCHER_ROLE, LAUNCHER_BINDING]
        new = [o for o in objects if _absent(admin, o)]
        admin.apply(objects)
        eventually(
            lambda: access(self.api, "create", "pods", namespace="default"),
            timeout=30,
            what="KubeVirt's controller may create Pods",
        )
        return new

    def start(self, admin: Api, machine: Mapping[str, Any], node: str | None = None) -> RawObject:
        """The VMI's launcher Pod, created as KubeVirt's controller; bound to `node` if given."""
        stored = self.api.create(launcher_pod(machine))
        if node is not None:
            stored = self.bind(admin, stored, node)
        return stored

    def bind(self, admin: Api, launcher: Mapping[str, Any], node: str) -> RawObject:
        """What the scheduler does: POST pods/<name>/binding."""
        meta = launcher["metadata"]
        admin.call(
            "POST",
            pod_path(meta["namespace"], meta["name"]) + "/binding",
            body={
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            },
        )
        bound = admin.get("v1", "Pod", meta["name"], namespace=meta["namespace"])
        assert bound is not None and bound["spec"].get("nodeName") == node
        return bound

    def end(self, admin: Api, launcher: Mapping[str, Any], phase: str = "Succeeded") -> RawObject:
        """What the kubelet reports when the guest has stopped."""
        meta = launcher["metadata"]
        return set_pod_phase(admin, meta["namespace"], meta["name"], phase)

    def close(self) -> None:
        if self._api is not None:
            self._api.close()
            self._api = None


# -- the copy record ------------------------------------------------------------------------------


def copy_record(api: Api) -> dict[str, str]:
    """The reconciler's record of its copies: `<namespace>/<name>` -> digest ({} when none)."""
    stored = api.get("v1", "ConfigMap", COPY_RECORD, namespace=RELEASE_NAMESPACE)
    text = ((stored or {}).get("data") or {}).get(COPY_RECORD_KEY)
    found = json.loads(text) if text else {}
    return dict(found) if isinstance(found, dict) else {}


def copy_digest(data: Mapping[str, str]) -> str:
    """The digest the record keeps for a copy of `data` (plain values, as the copy decodes)."""
    from gpuclass.reconciler.state.licenses import copy_digest as digest
    from gpuclass.shared.core.model.secrets import Redacted

    return digest({key: Redacted(b64(value)) for key, value in data.items()})


def edit_copy_record(api: Api, change: Callable[[dict[str, str]], dict[str, str]]) -> None:
    """Read, change and write the record back (created when missing; retried on a conflict),
    as an administrator: what a previous replica left, or the clean-up of a test's entries."""
    path = f"/api/v1/namespaces/{RELEASE_NAMESPACE}/configmaps"
    for _ in range(10):
        stored = api.get("v1", "ConfigMap", COPY_RECORD, namespace=RELEASE_NAMESPACE)
        text = ((stored or {}).get("data") or {}).get(COPY_RECORD_KEY)
        entries = change(dict(json.loads(text)) if text else {})
        body: RawObject = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": COPY_RECORD, "namespace": RELEASE_NAMESPACE, "labels": MANAGED},
            "data": {COPY_RECORD_KEY: json.dumps(dict(sorted(entries.items())))},
        }
        if stored is None:
            response = api.request("POST", path, body=body)
        else:
            body["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"]
            response = api.request("PUT", f"{path}/{COPY_RECORD}", body=body)
        if response.status_code == 409:
            continue
        if response.status_code >= 400:
            raise ApiError("PUT", path, response)
        return
    raise RuntimeError("the copy record kept changing under us")


def forget_copies(api: Api, namespace_part: str) -> None:
    """Take the entries of namespaces whose name contains `namespace_part` out of the record
    (a module's clean-up: its copies are deleted, the next module's reconciler need not)."""
    edit_copy_record(
        api, lambda entries: {k: v for k, v in entries.items() if namespace_part not in k}
    )
