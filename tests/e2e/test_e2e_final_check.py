"""The check after every mutation (docs/contract.md rule 4.11) on a real API server.

The chart's own webhook configurations (its validating one now holds
`final-virtualmachineinstances.gpuclass.cozystack.io`, `POST /validate/virtualmachineinstances`)
point at a gpuclass-webhook serving the golden fixtures' world; KubeVirt's own webhooks run
beside it (`kubevirt-parts`), and a hostile mutating webhook, a small HTTPS server of this
module, is registered after ours (its configuration's name sorts last).

How the hostile webhook gets its change past our mutating webhook: the API server calls each
mutating webhook once in order, then once more (never twice more) those with
`reinvocationPolicy: IfNeeded` that ran before a later change (k8s.io/apiserver,
pkg/admission/plugin/webhook/mutating/dispatcher.go and reinvocationcontext.go). The hostile
configuration holds two hooks: `attack` (IfNeeded) and `mark` (Never), which only adds a
marker annotation. In the first pass `attack` finds no marker and does nothing; `mark` adds
it, so ours and `attack` are called again; ours (first in order) finds a resolved VMI and
patches nothing; `attack` now finds the marker and adds its GPU entry or license volume. No
mutating webhook sees that; only a validating one can.

Every create here is a dry run: admission runs in full (both passes, every validating
webhook), nothing is stored. Expected answers come from the contract (rules 4.6, 4.8, 4.11)
and the class files, never from our code.
"""

from __future__ import annotations

import base64
import copy
import json
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonpatch
import pytest

from gpuclass.shared.core.admission.patches import pointer
from tests.builders import ANN
from tests.chart_helpers import chart_webhook_configurations
from tests.conftest import NOT_KUBEVIRT, OBJECTS, GoldenCase, golden_cases
from tests.controlplane.api import Api, ApiError, RawObject
from tests.controlplane.cluster import ControlPlane, eventually, unique_name
from tests.controlplane.components import Component
from tests.controlplane.kubevirt_parts import golden_objects
from tests.controlplane.webhooks import Hook, rule, webhook_configuration
from tests.webhook_process import WebhookProcess

pytestmark = pytest.mark.controlplane

FINAL_HOOK = "final-virtualmachineinstances.gpuclass.cozystack.io"
MUTATING_HOOK = "virtualmachineinstances.gpuclass.cozystack.io"
FINAL_ROUTE = "final-virtualmachineinstances"  # the webhook's log and metrics name of the path
HOSTILE_LABEL = ("gpuclass-tests/hostile", "on")
ATTACK = "gpuclass-tests/attack"  # raw-gpu | license | none
WHEN = "gpuclass-tests/when"  # late: on the reinvocation; early: at once
MARKER = "gpuclass-tests/marked"
LICENSE_COPY = "gpuclass-license-example-licensed-vgpu"
RAW_GPU = {"name": "gpu99", "deviceName": "example.com/whole-gpu"}
STOLEN_VOLUME = {"name": "stolen", "secret": {"secretName": LICENSE_COPY}}
STOLEN_DISK = {"name": "stolen", "disk": {"bus": "virtio"}}


GOLDEN_OBJECTS = golden_objects(OBJECTS)


@pytest.fixture(scope="module")
def kubevirt_configuration() -> dict[str, Any]:
    """KubeVirt permits every device the fixture world's KubeVirt CRs permit (it reads one CR,
    the world spreads them over several); no feature gates."""
    union: dict[str, list[RawObject]] = {"pciHostDevices": [], "mediatedDevices": []}
    for obj in GOLDEN_OBJECTS:
        if obj.get("kind") != "KubeVirt":
            continue
        permitted = obj["spec"]["configuration"].get("permittedHostDevices") or {}
        for key, entries in union.items():
            entries += [e for e in permitted.get(key) or [] if e not in entries]
    return {"permittedHostDevices": union}


# -- the hostile webhook ----------------------------------------------------------------------------


@dataclass
class Call:
    """One call the hostile webhook answered: which hook, for which VMI, and what it changed."""

    path: str
    name: str
    operations: list[RawObject] = field(default_factory=list)


def _attack(obj: RawObject) -> list[RawObject]:
    """The change the VMI's annotations ask for, unless it is there already."""
    annotations = obj["metadata"].get("annotations") or {}
    spec = obj.get("spec") or {}
    devices = spec.get("domain", {}).get("devices", {})
    if annotations.get(ATTACK) == "raw-gpu" and RAW_GPU not in (devices.get("gpus") or []):
        if "gpus" in devices:
            return [{"op": "add", "path": "/spec/domain/devices/gpus/-", "value": RAW_GPU}]
        return [{"op": "add", "path": "/spec/domain/devices/gpus", "value": [RAW_GPU]}]
    if annotations.get(ATTACK) == "license" and STOLEN_VOLUME not in (spec.get("volumes") or []):
        return [
            {"op": "add", "path": "/spec/volumes/-", "value": STOLEN_VOLUME},
            {"op": "add", "path": "/spec/domain/devices/disks/-", "value": STOLEN_DISK},
        ]
    return []


def _hostile_operations(path: str, obj: RawObject) -> list[RawObject]:
    annotations = obj["metadata"].get("annotations") or {}
    if path == "/mark":
        if MARKER in annotations:
            return []
        return [
            {
                "op": "add",
                "path": pointer(("metadata", "annotations", MARKER)),
                "value": "true",
            }
        ]
    if annotations.get(WHEN) == "early" or MARKER in annotations:
        return _attack(obj)
    return []


class _HostileHandler(BaseHTTPRequestHandler):
    calls: list[Call]

    def do_POST(self) -> None:
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        request = review["request"]
        obj = request["object"]
        path = urlsplit(self.path).path  # the API server adds `?timeout=...`
        operations = _hostile_operations(path, obj)
        self.calls.append(Call(path, obj["metadata"].get("name", ""), operations))
        response: RawObject = {"uid": request["uid"], "allowed": True}
        if operations:
            response["patchType"] = "JSONPatch"
            response["patch"] = _b64(json.dumps(operations))
        body = json.dumps(
            {"apiVersion": review["apiVersion"], "kind": "AdmissionReview", "response": response}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        return None


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@dataclass
class Hostile:
    url: str
    calls: list[Call]

    def calls_for(self, name: str) -> list[Call]:
        return [c for c in list(self.calls) if c.name == name]


@pytest.fixture(scope="module")
def hostile(control_plane: ControlPlane) -> Iterator[Hostile]:
    cert, key = control_plane.serving_cert(unique_name("hostile"))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    calls: list[Call] = []
    handler = type("Handler", (_HostileHandler,), {"calls": calls})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield Hostile(f"https://127.0.0.1:{server.server_address[1]}", calls)
    server.shutdown()
    server.server_close()


def _hostile_configuration(plane: ControlPlane, url: str) -> RawObject:
    """Registered after ours: the API server orders mutating configurations by name."""
    vmis = [rule("kubevirt.io", "v1", "virtualmachineinstances", ["CREATE"], "Namespaced")]
    selector = {"matchLabels": dict([HOSTILE_LABEL])}
    hooks = [
        Hook(
            "attack.hostile.gpuclass-tests.example.com", "/attack", vmis, object_selector=selector
        ),
        Hook(
            "mark.hostile.gpuclass-tests.example.com",
            "/mark",
            vmis,
            object_selector=selector,
            reinvocation_policy="Never",
        ),
    ]
    return webhook_configuration(
        "Mutating", "zz-gpuclass-tests-hostile", base_url=url, ca_bundle=plane.ca_pem, hooks=hooks
    )


# -- the cluster ------------------------------------------------------------------------------------


@dataclass
class Cluster:
    api: Api
    webhook: WebhookProcess
    hostile: Hostile

    def logged_final_answers(self, name: str) -> list[dict[str, object]]:
        """What our check has logged so far for the VMI `name` (one line per call)."""
        return [
            e
            for e in self.webhook.logs()
            if e.get("msg") == "admission"
            and e.get("webhook") == FINAL_ROUTE
            and e.get("name") == name
        ]

    def final_answers(self, name: str) -> list[dict[str, object]]:
        """What our check logged for the VMI `name`, once the line has arrived: the webhook logs
        after it answers, and its log is read from a pipe."""
        answers: list[dict[str, object]] = eventually(
            lambda: self.logged_final_answers(name) or None,
            timeout=10,
            what=f"the check's log line for {name}",
        )
        return answers

    def mutating_refusals(self, name: str) -> list[dict[str, object]]:
        """Our mutating webhook's refusals of the VMI `name`, as logged so far."""
        return [
            e
            for e in self.webhook.logs()
            if e.get("msg") == "admission"
            and e.get("webhook") == "virtualmachineinstances"
            and e.get("name") == name
            and e.get("allowed") is False
        ]


def _vmi(name: str, selection: list[RawObject] | None, **annotations: str) -> RawObject:
    meta: RawObject = {
        "name": name,
        "namespace": "tenant-a",
        "labels": dict([HOSTILE_LABEL]),
        "annotations": dict(annotations),
    }
    if selection is not None:
        meta["annotations"][ANN] = json.dumps(selection)
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": meta,
        "spec": {
            "domain": {
                "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]},
                "memory": {"guest": "1Gi"},
            },
            "volumes": [{"name": "root", "emptyDisk": {"capacity": "1Gi"}}],
        },
    }


def _kubevirt_mutated(stored: RawObject) -> bool:
    """KubeVirt's VMI mutator was in the chain: it alone sets the phase and its finalizer."""
    return (stored.get("status") or {}).get("phase") == "Pending" and (
        "kubevirt.io/foregroundDeleteVirtualMachine" in stored["metadata"].get("finalizers", [])
    )


@pytest.fixture(scope="module")
def cluster(
    control_plane: ControlPlane,
    kubevirt_parts: Component,
    hostile: Hostile,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Cluster]:
    api = control_plane.admin
    namespaces = [o for o in GOLDEN_OBJECTS if o.get("kind") == "Namespace"]
    api.apply([{k: o[k] for k in ("apiVersion", "kind", "metadata")} for o in namespaces])
    arguments = [a for path in OBJECTS for a in ("--objects", path)]
    webhook = WebhookProcess(
        [*arguments, "--vgpu-entitled"], tls_dir=tmp_path_factory.mktemp("final-check-tls")
    )
    configurations = [
        *chart_webhook_configurations(webhook.url, Path(webhook.ca).read_bytes()),
        _hostile_configuration(control_plane, hostile.url),
    ]
    cluster = Cluster(api, webhook, hostile)
    try:
        api.apply(configurations)
        eventually(lambda: _chain_ready(cluster), timeout=30, what="every webhook in the chain")
        yield cluster
    finally:
        for configuration in configurations:
            api.delete(configuration)
        webhook.stop()


def _chain_ready(cluster: Cluster) -> bool:
    """Ours, KubeVirt's and the hostile webhook mutate, and our check is called."""
    name = unique_name("ready")
    try:
        stored = cluster.api.create(
            _vmi(name, [{"className": "example-whole-gpu"}], **{ATTACK: "none"}), dryRun="All"
        )
    except ApiError:
        return False
    return (
        bool(stored["spec"]["domain"]["devices"].get("gpus"))
        and _kubevirt_mutated(stored)
        and MARKER in stored["metadata"]["annotations"]
        and bool(cluster.logged_final_answers(name))
    )


# -- (a) our own mutation, KubeVirt's after it: admitted ----------------------------------------------


def _allowed_golden_vmi_creates() -> list[GoldenCase]:
    cases = []
    for case in golden_cases():
        request = case.request["request"]
        if (
            request["kind"]["kind"] == "VirtualMachineInstance"
            and request["operation"] == "CREATE"
            and case.endpoint is None
            and case.expected()["response"]["allowed"]
            and case.name not in NOT_KUBEVIRT
        ):
            cases.append(case)
    return cases


# A raw `hostDevices` entry needs KubeVirt's HostDevices feature gate, which this KubeVirt CR
# does not turn on (tests/e2e/test_e2e_kubevirt.py shows the refusal and the gate).
NEEDS_HOST_DEVICES_GATE = "vmi-4.5-raw-unclassed-mdev-entitled"
ALLOWED = [c for c in _allowed_golden_vmi_creates() if c.name != NEEDS_HOST_DEVICES_GATE]


def test_the_chain_is_checked_for_enough_golden_vmis() -> None:
    assert len(ALLOWED) >= 15
    assert sum("patch" in c.expected()["response"] for c in ALLOWED) >= 12


@pytest.mark.parametrize("case", ALLOWED, ids=[c.name for c in ALLOWED])
def test_a_golden_vmi_our_mutation_allows_passes_the_check_after_kubevirts_mutation(
    cluster: Cluster, case: GoldenCase
) -> None:
    vmi = copy.deepcopy(case.request["request"]["object"])
    vmi["metadata"]["name"] = name = unique_name(case.name[:40])
    stored = cluster.api.create(vmi, dryRun="All")  # every webhook, both passes, nothing stored
    assert _kubevirt_mutated(stored)
    patch = case.folder / "patch.json"
    operations = json.loads(patch.read_text()) if patch.exists() else []
    ours = jsonpatch.apply_patch(case.request["request"]["object"], operations)
    devices = stored["spec"]["domain"]["devices"]
    assert devices.get("gpus") == ours["spec"]["domain"]["devices"].get("gpus")
    # The check saw the final object and allowed it (once per create: validating webhooks run
    # once, after every mutation).
    answers = cluster.final_answers(name)
    assert [(a["operation"], a["allowed"]) for a in answers] == [("CREATE", True)]


# -- (b) a hostile mutating webhook after ours: refused ----------------------------------------------


def _refusal(cluster: Cluster, vmi: RawObject) -> ApiError:
    with pytest.raises(ApiError) as refused:
        cluster.api.create(vmi, dryRun="All")
    return refused.value


def test_without_an_attack_the_hostile_chain_admits_and_reinvokes_as_described(
    cluster: Cluster,
) -> None:
    """The control case: the marker is added, ours is called again and patches nothing,
    `attack` is called again and does nothing; the VMI is admitted, resolved."""
    name = unique_name("hostile-none")
    stored = cluster.api.create(
        _vmi(name, [{"className": "example-whole-gpu"}], **{ATTACK: "none", WHEN: "late"}),
        dryRun="All",
    )
    assert stored["spec"]["domain"]["devices"]["gpus"] == [
        {"name": "gpu1", "deviceName": "example.com/whole-gpu"}
    ]
    assert [c.path for c in cluster.hostile.calls_for(name)] == ["/attack", "/mark", "/attack"]
    assert [(a["allowed"]) for a in cluster.final_answers(name)] == [True]


def test_a_raw_gpu_added_after_ours_is_refused_by_the_check(cluster: Cluster) -> None:
    name = unique_name("hostile-gpu")
    vmi = _vmi(name, [{"className": "example-whole-gpu"}], **{ATTACK: "raw-gpu", WHEN: "late"})
    error = _refusal(cluster, vmi)
    calls = cluster.hostile.calls_for(name)
    assert [(c.path, bool(c.operations)) for c in calls] == [
        ("/attack", False),
        ("/mark", True),
        ("/attack", True),  # after our webhook's second and last call
    ]
    assert error.status_code == 422
    message = error.body["message"]
    assert f'admission webhook "{FINAL_HOOK}" denied the request' in message
    assert (
        "spec.domain.devices.gpus: must be exactly what the selected classes resolve to "
        "(gpu1=example.com/whole-gpu) but holds (gpu1=example.com/whole-gpu, "
        "gpu99=example.com/whole-gpu)"
    ) in message
    assert [a["causes"] for a in cluster.final_answers(name)] == [["GPUEntriesMismatch"]]


@pytest.mark.parametrize(
    "selection",
    [
        pytest.param([{"className": "example-whole-gpu"}], id="beside-a-passthrough-class"),
        pytest.param([{"className": "example-byol-vgpu"}], id="beside-a-byol-class"),
        pytest.param(None, id="without-a-selection"),
    ],
)
def test_a_foreign_license_volume_added_after_ours_is_refused_by_the_check(
    cluster: Cluster, selection: list[RawObject] | None
) -> None:
    name = unique_name("hostile-license")
    error = _refusal(cluster, _vmi(name, selection, **{ATTACK: "license", WHEN: "late"}))
    assert [c.path for c in cluster.hostile.calls_for(name) if c.operations] == ["/mark", "/attack"]
    assert error.status_code == 403
    message = error.body["message"]
    assert f'admission webhook "{FINAL_HOOK}" denied the request' in message
    assert f"spec.volumes[1].secret.secretName: names Secret {LICENSE_COPY}" in message


def test_a_raw_gpu_added_before_our_second_call_is_refused_by_our_mutating_webhook(
    cluster: Cluster,
) -> None:
    """Why the check is needed only for what comes after: a change made in the first pass
    reaches our mutating webhook again (reinvocationPolicy IfNeeded), which refuses it."""
    name = unique_name("hostile-early")
    vmi = _vmi(name, [{"className": "example-whole-gpu"}], **{ATTACK: "raw-gpu", WHEN: "early"})
    error = _refusal(cluster, vmi)
    assert error.status_code == 422
    assert f'admission webhook "{MUTATING_HOOK}" denied the request' in error.body["message"]
    eventually(
        lambda: cluster.mutating_refusals(name) or None, timeout=10, what="the refusal's log line"
    )
    # Refused before any validating webhook ran (the webhook writes its log lines in order).
    assert cluster.logged_final_answers(name) == []
