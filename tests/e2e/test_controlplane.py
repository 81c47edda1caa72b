"""The test control plane itself: a real kube-apiserver + etcd with our CRDs, RBAC on,
users and webhooks as tests need them, restart without data loss, nothing left behind."""

from __future__ import annotations

import asyncio
import json
import ssl
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.builders import example_class as gpuclass
from tests.builders import with_status
from tests.controlplane import (
    ApiError,
    ControlPlane,
    ControlPlaneError,
    eventually,
    unique_name,
)
from tests.controlplane.api import RawObject
from tests.controlplane.plugin import WebhookRegistry
from tests.controlplane.webhooks import Hook, gpuclass_webhooks, rule, webhook_configuration

pytestmark = pytest.mark.controlplane

GPUCLASSES = "/apis/cozystack.io/v1alpha1/gpuclasses"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
COLUMNS = ["Name", "Mode", "Resource", "Free", "MaxFreePerNode", "Ready", "Age"]
# `kubectl get -o wide` adds the priority-1 columns
WIDE = ["Name", "Mode", "Profile", "Resource", "Free", "MaxFreePerNode", "MaxUnitsPerNode"]
WIDE += ["Ready", "Reason", "Advertising", "Eligible", "Schedulable", "Why", "Age"]


def namespace(name: str) -> RawObject:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


# -- the API server and the CRDs --------------------------------------------------------------


def test_api_server_answers_on_loopback(control_plane: ControlPlane) -> None:
    version = control_plane.admin.call("GET", "/version")
    assert version["major"] == "1"
    assert control_plane.assets.name.startswith(version["gitVersion"])
    ready = control_plane.admin.request("GET", "/readyz", accept="text/plain")
    assert (ready.status_code, ready.text) == (200, "ok")
    assert control_plane.server.startswith("https://127.0.0.1:")


def test_gpuclass_crd_is_established(control_plane: ControlPlane) -> None:
    crd = control_plane.admin.get(
        "apiextensions.k8s.io/v1", "CustomResourceDefinition", "gpuclasses.cozystack.io"
    )
    assert crd is not None
    conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conditions["Established"] == conditions["NamesAccepted"] == "True"
    assert crd["spec"]["scope"] == "Cluster"
    assert crd["status"]["acceptedNames"]["shortNames"] == ["gpuc"]
    resources = control_plane.admin.call("GET", "/apis/cozystack.io/v1alpha1")["resources"]
    assert {r["name"] for r in resources} == {"gpuclasses", "gpuclasses/status"}


def test_kubevirt_crds_are_kubevirts_own(control_plane: ControlPlane) -> None:
    """KubeVirt's CRDs as virt-operator installs them (tests/e2e/test_kubevirt_crds.py checks the
    schemas): VMIs have no status subresource there, so KubeVirt writes status in place."""
    resources = control_plane.admin.call("GET", "/apis/kubevirt.io/v1")["resources"]
    # kubevirt-parts adds the migration CRD when a module using it ran earlier on this plane.
    migrations = ("virtualmachineinstancemigrations", "virtualmachineinstancemigrations/status")
    served = {r["name"]: r["namespaced"] for r in resources if r["name"] not in migrations}
    assert served == {
        "virtualmachineinstances": True,
        "virtualmachines": True,
        "virtualmachines/status": True,
        "kubevirts": True,
        "kubevirts/status": True,
    }
    ns = unique_name("tenant-cp")
    control_plane.admin.apply([namespace(ns)])
    spec = {
        "domain": {"devices": {"gpus": [{"name": "gpu1", "deviceName": "example.com/x"}]}},
    }
    vmi = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "vm", "namespace": ns},
        "spec": spec,
    }
    created = control_plane.admin.create(vmi)
    assert created["spec"] == spec
    created["status"] = {"phase": "Running"}
    control_plane.admin.call("PUT", control_plane.admin.object_path(vmi), body=created)
    stored = control_plane.admin.get("kubevirt.io/v1", "VirtualMachineInstance", "vm", namespace=ns)
    assert stored is not None
    assert (stored["spec"], stored["status"]) == (spec, {"phase": "Running"})


def test_printer_columns_through_the_table_api(control_plane: ControlPlane) -> None:
    name = unique_name("printer")
    with_status(control_plane, name)
    table = control_plane.admin.call(
        "GET", GPUCLASSES, params={"fieldSelector": f"metadata.name={name}"}, accept=TABLE
    )
    assert table["kind"] == "Table"
    definitions = table["columnDefinitions"]
    assert [c["name"] for c in definitions] == WIDE
    assert [c["name"] for c in definitions if c["priority"] == 0] == COLUMNS
    [row] = table["rows"]
    cells = dict(zip(WIDE, row["cells"], strict=True))
    assert {k: v for k, v in cells.items() if k not in {"Profile", "Age"}} == {
        "Name": name,
        "Mode": "passthrough",
        "Resource": f"example.com/{name}",
        "Free": 3,
        "MaxFreePerNode": 2,
        "MaxUnitsPerNode": 4,
        "Ready": "True",
        "Reason": "Ready",
        "Advertising": 3,
        "Eligible": 2,
        "Schedulable": "True",
        "Why": "Fragmented",
    }
    assert cells["Profile"] in (None, "")  # passthrough has no profile
    assert cells["Age"].endswith("s")  # age, e.g. "1s"


def _kubectl(plane: ControlPlane, *args: str) -> str:
    """The kubectl built with the control plane (same version as the API server)."""
    done = subprocess.run(
        [str(plane.assets / "kubectl"), "--kubeconfig", str(plane.admin_kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout


def test_kubectl_get_wide_adds_profile_units_and_reason(control_plane: ControlPlane) -> None:
    name = unique_name("wide")
    with_status(control_plane, name, mode="vgpu", profile="A100-2-10C")
    header, line = _kubectl(control_plane, "get", "gpuc", name, "-o", "wide").splitlines()
    assert header.split() == [c.upper() for c in WIDE]
    assert line.split()[:13] == [
        name, "vgpu", "A100-2-10C", f"example.com/{name}", "3", "2", "4", "True", "Ready",
        "3", "2", "True", "Fragmented",
    ]  # fmt: skip
    plain = _kubectl(control_plane, "get", "gpuc", name).splitlines()[0]
    assert plain.split() == [c.upper() for c in COLUMNS]


@pytest.mark.parametrize(
    ("field", "words"),
    [
        pytest.param("gpuclasses.spec.mode", "passthrough", id="mode"),
        pytest.param("gpuclasses.spec.profile", "vGPU profile", id="profile"),
        pytest.param(
            "gpuclasses.spec.source.devicePlugin.resourceName", "Extended resource", id="resource"
        ),
        pytest.param("gpuclasses.spec.tolerations.operator", "Exists", id="toleration-operator"),
        pytest.param("gpuclasses.status.maxUnitsPerNode", "allocatable", id="status"),
        pytest.param("gpuclasses.status.conditions.reason", "CamelCase", id="condition-reason"),
    ],
)
def test_kubectl_explain_describes_the_fields(
    control_plane: ControlPlane, field: str, words: str
) -> None:
    explained = _kubectl(control_plane, "explain", field)
    assert "DESCRIPTION:" in explained
    description = explained.split("DESCRIPTION:", 1)[1]
    assert words in description
    assert "<empty>" not in description


# -- users, RBAC, admission plugins -----------------------------------------------------------


def test_a_service_account_user_is_subject_to_rbac(control_plane: ControlPlane) -> None:
    # An account of its own: other modules on this plane bind the chart's accounts, and which
    # ran first depends on how the run spreads files over workers.
    account = unique_name("rbac-probe")
    username = f"system:serviceaccount:cozy-system:{account}"
    groups = ["system:serviceaccounts", "system:serviceaccounts:cozy-system"]
    user = control_plane.user(username, groups)
    role = unique_name("gpuclass-reader")
    with user.api() as api:
        review = api.call(
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
        info = review["status"]["userInfo"]
        assert info["username"] == username
        assert set(groups) <= set(info["groups"])
        with pytest.raises(ApiError) as refused:
            api.call("GET", GPUCLASSES)
        assert refused.value.status_code == 403
        control_plane.admin.apply(
            [
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRole",
                    "metadata": {"name": role},
                    "rules": [
                        {
                            "apiGroups": ["cozystack.io"],
                            "resources": ["gpuclasses"],
                            "verbs": ["list"],
                        }
                    ],
                },
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRoleBinding",
                    "metadata": {"name": role},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole",
                        "name": role,
                    },
                    "subjects": [
                        {
                            "kind": "ServiceAccount",
                            "name": account,
                            "namespace": "cozy-system",
                        }
                    ],
                },
            ]
        )
        eventually(
            lambda: api.request("GET", GPUCLASSES).status_code == 200,
            timeout=15,
            what="RBAC to allow list",
        )
        assert api.request("DELETE", f"{GPUCLASSES}/anything").status_code == 403


def test_kubeconfig_works_with_kubernetes_asyncio(control_plane: ControlPlane) -> None:
    from kubernetes_asyncio import client, config

    async def namespaces() -> list[str]:
        api_client = await config.new_client_from_config(
            config_file=str(control_plane.admin_kubeconfig)
        )
        async with api_client:
            listed = await client.CoreV1Api(api_client).list_namespace()
            return [item.metadata.name for item in listed.items]

    assert "kube-system" in asyncio.run(namespaces())


def test_pods_need_no_service_account(control_plane: ControlPlane) -> None:
    """The ServiceAccount admission plugin is off: no controller-manager makes `default`."""
    ns = unique_name("tenant-pods")
    control_plane.admin.apply([namespace(ns)])
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": ns},
        "spec": {"containers": [{"name": "c", "image": "example.org/c:1"}]},
    }
    created = control_plane.admin.create(pod)
    assert "serviceAccountName" not in created["spec"]
    assert control_plane.admin.get("v1", "ServiceAccount", "default", namespace=ns) is None


# -- webhooks -----------------------------------------------------------------------------------


class _DenyingWebhook(BaseHTTPRequestHandler):
    """A stand-in webhook server that refuses everything it is asked about."""

    reviews: list[RawObject]

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.reviews.append(body)
        answer = {
            "apiVersion": body["apiVersion"],
            "kind": "AdmissionReview",
            "response": {
                "uid": body["request"]["uid"],
                "allowed": False,
                "status": {"code": 403, "message": "refused by the test webhook"},
            },
        }
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_: Any) -> None:
        return None


@pytest.fixture
def denying_webhook(control_plane: ControlPlane) -> Iterator[tuple[str, list[RawObject]]]:
    cert, key = control_plane.serving_cert(unique_name("webhook"))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    reviews: list[RawObject] = []
    handler = type("Handler", (_DenyingWebhook,), {"reviews": reviews})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{server.server_address[1]}", reviews
    server.shutdown()
    server.server_close()


def test_registered_webhook_is_called_then_removed(
    control_plane: ControlPlane,
    webhook_registry: WebhookRegistry,
    denying_webhook: tuple[str, list[RawObject]],
) -> None:
    url, reviews = denying_webhook
    marker = unique_name("webhook-test")
    hook = Hook(
        name="deny.gpuclass-tests.example.com",
        path="/deny",
        rules=[rule("cozystack.io", "v1alpha1", "gpuclasses", ["CREATE"], "Cluster")],
        object_selector={"matchLabels": {"gpuclass-tests/webhook": marker}},  # only our objects
    )
    configuration = webhook_configuration(
        "Validating", marker, base_url=url, ca_bundle=control_plane.ca_pem, hooks=[hook]
    )
    obj = gpuclass(marker)
    obj["metadata"]["labels"] = {"gpuclass-tests/webhook": marker}

    def verdict() -> str:
        response = control_plane.admin.request(
            "POST", GPUCLASSES, body=obj, params={"dryRun": "All"}
        )
        return (
            "refused"
            if "refused by the test webhook" in response.text
            else str(response.status_code)
        )

    webhook_registry.register([configuration])
    eventually(lambda: verdict() == "refused", timeout=15, what="the webhook to be called")
    request = reviews[-1]["request"]
    assert (request["operation"], request["name"], request["dryRun"]) == ("CREATE", marker, True)
    webhook_registry.remove([configuration])
    eventually(lambda: verdict() == "201", timeout=15, what="the webhook to be gone")


def test_gpuclass_webhook_configurations_are_accepted(control_plane: ControlPlane) -> None:
    configurations = gpuclass_webhooks("https://127.0.0.1:9443", control_plane.ca_pem)
    for configuration in configurations:
        stored = control_plane.admin.create(configuration, dryRun="All")
        assert [h["clientConfig"]["url"] for h in stored["webhooks"]] == [
            h["clientConfig"]["url"] for h in configuration["webhooks"]
        ]
    urls = {h["clientConfig"]["url"] for c in configurations for h in c["webhooks"]}
    assert urls == {
        "https://127.0.0.1:9443/validate/gpuclasses",
        "https://127.0.0.1:9443/mutate/virtualmachineinstances",
        "https://127.0.0.1:9443/mutate/pods",
        "https://127.0.0.1:9443/validate/virtualmachineinstances",
    }


# -- lifecycle ----------------------------------------------------------------------------------


def test_restart_apiserver_keeps_stored_objects(control_plane: ControlPlane) -> None:
    name = unique_name("restart")
    stored = with_status(control_plane, name)
    before = dict(control_plane.pids)
    control_plane.restart_apiserver()
    assert control_plane.pids["etcd"] == before["etcd"]
    assert control_plane.pids["kube-apiserver"] != before["kube-apiserver"]
    again = control_plane.admin.get("cozystack.io/v1alpha1", "GPUClass", name)
    assert again is not None
    assert again["metadata"]["uid"] == stored["metadata"]["uid"]
    assert (again["spec"], again["status"]) == (stored["spec"], stored["status"])
    assert control_plane.admin.create(gpuclass(unique_name("after-restart")))["metadata"]["uid"]


def _running_in(folder: Path) -> list[str]:
    """Processes whose command line names `folder` (etcd's data dir, the API server's certs)."""
    found = subprocess.run(
        ["pgrep", "-af", str(folder)], capture_output=True, text=True, check=False
    )
    return found.stdout.splitlines()


def test_stop_leaves_nothing_behind(control_plane: ControlPlane) -> None:
    plane = ControlPlane(control_plane.assets).start()
    workdir = plane.workdir
    assert len(_running_in(workdir)) == 2
    plane.stop()
    assert _running_in(workdir) == []
    assert not workdir.exists()


def test_failed_start_quotes_the_log_and_cleans_up(control_plane: ControlPlane) -> None:
    plane = ControlPlane(control_plane.assets, apiserver_flags=["--no-such-flag"])
    with pytest.raises(ControlPlaneError, match="kube-apiserver exited") as failed:
        plane.start()
    assert "unknown flag: --no-such-flag" in str(failed.value)  # the log's tail
    assert _running_in(plane.workdir) == []
    assert not plane.workdir.exists()
    assert control_plane.admin.request("GET", "/readyz").status_code == 200  # untouched
