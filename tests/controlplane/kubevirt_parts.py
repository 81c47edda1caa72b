"""KubeVirt's own admission webhooks and launcher renderer beside the test control plane.

`kubevirt-parts` (the Go program in tests/controlplane/kubevirt/, built against the
`kubevirt.io/kubevirt` module its go.mod pins) serves virt-api's webhooks for
VirtualMachineInstances, VirtualMachines and launcher Pods and plays virt-controller for
launcher Pods: every new VMI gets the Pod virt-controller's TemplateService renders, every
new VirtualMachineInstanceMigration its target Pod. It installs KubeVirt's RBAC for virt-api
and virt-controller and the migration CRD, and registers virt-operator's own webhook
configurations, pointed at itself.

Here it runs as one process with three identities: the admin (installing), and client
certificates named as virt-api's and virt-controller's ServiceAccounts in KubeVirt's
namespace, which RBAC treats as those ServiceAccounts: they get exactly KubeVirt's rights.

KubeVirt reads its configuration only from a KubeVirt CR whose `status.phase` is set, and
takes its default architecture from `status.defaultArchitecture` (without it, its VMI
validation refuses every VMI: "unsupported architecture"); virt-operator writes both once it
has deployed KubeVirt (pkg/virt-operator/util/config.go). :func:`install_kubevirt_cr`
writes the CR and that status.

Boundary: process plumbing and the KubeVirt CR; what tests create on top is theirs.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.controlplane.api import Api, RawObject, manifests
from tests.controlplane.cluster import ControlPlane, built_binary, free_port
from tests.controlplane.components import MERGE, Component

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "kubevirt" / "build.sh"
BINARY_ENV = "GPUCLASS_KUBEVIRT_PARTS"
API_SERVICE_ACCOUNT = "kubevirt-apiserver"
CONTROLLER_SERVICE_ACCOUNT = "kubevirt-controller"
# virt-operator labels every webhook configuration it writes with this (KubeVirt's
# ManagedByLabel and ManagedByLabelOperatorValue).
MANAGED_BY = "app.kubernetes.io/managed-by=virt-operator"
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


def find_kubevirt_parts(*, build_script: Path = BUILD_SCRIPT) -> Path:
    """The kubevirt-parts binary: GPUCLASS_KUBEVIRT_PARTS if executable, else build.sh
    (cached by KubeVirt version, Go version and a hash of the program's sources)."""
    return built_binary("kubevirt-parts", build_script, BINARY_ENV)


def service_account_user(namespace: str, name: str) -> tuple[str, list[str]]:
    """The user name and groups the API server gives a ServiceAccount's token."""
    return (
        f"system:serviceaccount:{namespace}:{name}",
        ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"],
    )


def install_kubevirt_cr(
    api: Api, namespace: str, name: str, configuration: Mapping[str, Any]
) -> RawObject:
    """Create (or replace the spec of) a KubeVirt CR and write the status virt-operator writes
    once KubeVirt runs: KubeVirt's ClusterConfig ignores a CR without `status.phase`, and
    its default architecture is the operator's own (`runtime.GOARCH`, amd64 here)."""
    api.apply(
        [
            {
                "apiVersion": "kubevirt.io/v1",
                "kind": "KubeVirt",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"configuration": dict(configuration)},
            }
        ]
    )
    path = api.resource_path("kubevirt.io/v1", "KubeVirt", name=name, namespace=namespace)
    return api.call(
        "PATCH",
        f"{path}/status",
        body={"status": {"phase": "Deployed", "defaultArchitecture": "amd64"}},
        content_type=MERGE,
    )


def remove_kubevirt_webhooks(api: Api) -> None:
    """Delete every webhook configuration virt-operator's label marks (those kubevirt-parts
    registered), so no later test meets a webhook whose server is gone."""
    for kind in WEBHOOK_KINDS:
        path = api.resource_path("admissionregistration.k8s.io/v1", kind)
        listed = api.call("GET", path, params={"labelSelector": MANAGED_BY})
        for item in listed.get("items") or []:
            with contextlib.suppress(Exception):
                api.request("DELETE", f"{path}/{item['metadata']['name']}")


def start_kubevirt_parts(
    plane: ControlPlane, binary: Path, *, namespace: str, launcher_image: str
) -> Component:
    """Run kubevirt-parts for KubeVirt installed in `namespace` (which must exist, with a
    deployed KubeVirt CR); ready once it has registered KubeVirt's webhook configurations, its
    launcher loop runs, and both its virt-api and virt-controller halves read that CR."""
    api_user = plane.user(*service_account_user(namespace, API_SERVICE_ACCOUNT), stem="virt-api")
    controller_user = plane.user(
        *service_account_user(namespace, CONTROLLER_SERVICE_ACCOUNT), stem="virt-controller"
    )
    cert, key = plane.serving_cert("kubevirt-parts")
    port = free_port()
    argv = [
        str(binary),
        f"-admin-kubeconfig={plane.admin_kubeconfig}",
        f"-api-kubeconfig={api_user.kubeconfig}",
        f"-controller-kubeconfig={controller_user.kubeconfig}",
        f"-namespace={namespace}",
        f"-listen=127.0.0.1:{port}",
        f"-tls-cert-file={cert}",
        f"-tls-key-file={key}",
        f"-ca-file={plane.ca_file}",
        f"-launcher-image={launcher_image}",
    ]
    context = ssl.create_default_context(cafile=str(plane.ca_file))

    def ready(_: Component) -> bool:
        try:
            answer = httpx.get(f"https://127.0.0.1:{port}/readyz", verify=context, timeout=2)
        except httpx.HTTPError:
            return False
        return answer.status_code == 200

    # A first start installs KubeVirt's RBAC and the migration CRD and syncs two sets of
    # informers: a minute on a busy two-core machine.
    process = Component(plane, "kubevirt-parts", argv, ready=ready, start_timeout=120.0)
    try:
        process.start()
    except BaseException:
        remove_kubevirt_webhooks(plane.admin)
        raise
    return process


def stop_kubevirt_parts(plane: ControlPlane, process: Component) -> None:
    process.stop()
    remove_kubevirt_webhooks(plane.admin)


def object_files(roots: Iterable[str]) -> list[Path]:
    """The YAML files of the `--objects` roots (a file, or every `*.yaml` under a folder), sorted."""
    files: list[Path] = []
    for root in map(Path, roots):
        files += sorted(root.rglob("*.yaml")) if root.is_dir() else [root]
    return files


def golden_objects(roots: Iterable[str]) -> list[RawObject]:
    """Every Kubernetes object of those files; a file that holds none (a review) is skipped."""
    found: list[RawObject] = []
    for path in object_files(roots):
        try:
            found += manifests(path)
        except (ValueError, yaml.YAMLError):
            continue
    return found


def remove_labelled(api: Api, label: tuple[str, str], collections: Sequence[str]) -> None:
    """Delete what a module created (objects carrying `label`) in `collections`: VMIs first lose
    KubeVirt's finalizer (no virt-controller is left to remove it), Pods go at once (no kubelet
    may be left)."""
    selector = {"labelSelector": f"{label[0]}={label[1]}"}
    for collection in collections:
        for item in api.call("GET", collection, params=selector).get("items") or []:
            meta = item["metadata"]
            path = collection.replace("/v1/", f"/v1/namespaces/{meta['namespace']}/", 1)
            path += f"/{meta['name']}"
            if meta.get("finalizers"):
                api.request(
                    "PATCH", path, body={"metadata": {"finalizers": None}}, content_type=MERGE
                )
            api.request("DELETE", path, params={"gracePeriodSeconds": "0"})
