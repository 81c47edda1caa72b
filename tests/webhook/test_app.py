"""The webhook as users meet it: a real `gpuclass-webhook --objects` process over HTTPS.

Every golden fixture is replayed against it and must come back byte-for-byte as
`gpuclass review` prints it; bad bodies get the documented statuses; health,
readiness and metrics answer; files and certificates are reloaded in place.
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import ssl
import time
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import httpx
import pytest

from gpuclass.shared.cli.reviewcmd import offline_catalog
from gpuclass.shared.core.admission.decisions import encode_response
from gpuclass.shared.core.admission.review import review
from gpuclass.shared.core.status.catalog import Catalog, Policy
from gpuclass.webhook import paths
from gpuclass.webhook.certs.tls import self_signed
from tests.conftest import OBJECTS, GoldenCase, golden_cases
from tests.webhook_process import WebhookProcess

CASES = list(golden_cases())
ENDPOINT = {
    "VirtualMachineInstance": paths.MUTATE_VMIS,
    "Pod": paths.MUTATE_PODS,
    "GPUClass": paths.VALIDATE_GPUCLASSES,
    "VirtualMachine": paths.VALIDATE_VMS,
}
OBJECT_ARGS = [a for p in OBJECTS for a in ("--objects", p)]
VMI_BODY = (
    next(c for c in CASES if c.name == "vmi-4.6-whole-gpu-resolved")
    .folder.joinpath("request.json")
    .read_bytes()
)


@cache
def catalog(vgpu_entitled: bool) -> Catalog:
    return offline_catalog(OBJECTS, Policy(vgpu_entitled=vgpu_entitled))


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[bool, WebhookProcess]]:
    entitled = WebhookProcess(
        [*OBJECT_ARGS, "--vgpu-entitled"], tls_dir=tmp_path_factory.mktemp("tls-on")
    )
    plain = WebhookProcess(OBJECT_ARGS, tls_dir=tmp_path_factory.mktemp("tls-off"))
    yield {True: entitled, False: plain}
    for server in (entitled, plain):
        assert server.stop() == 0, "webhook must exit cleanly on SIGTERM"


def post(
    server: WebhookProcess, path: str, content: bytes, content_type: str = "application/json"
) -> httpx.Response:
    with httpx.Client(verify=ssl.create_default_context(cafile=server.ca), timeout=10) as client:
        return client.post(
            server.url + path, content=content, headers={"content-type": content_type}
        )


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_fixture_answer_is_byte_for_byte_the_cli_answer(
    case: GoldenCase, servers: dict[bool, WebhookProcess]
) -> None:
    server = servers[case.vgpu_entitled]
    path = case.endpoint or ENDPOINT[case.request["request"]["kind"]["kind"]]
    response = post(server, path, (case.folder / "request.json").read_bytes())
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.content == encode_response(
        review(case.request, catalog(case.vgpu_entitled), endpoint=case.endpoint)
    )
    assert response.json() == case.expected()


BAD_BODIES = [
    pytest.param(b"\x00\xff garbage", "application/json", 400, id="garbage-bytes"),
    pytest.param(b"", "application/json", 400, id="empty"),
    pytest.param(b"{}", "application/json", 400, id="json-not-a-review"),
    pytest.param(b"[1, 2]", "application/json", 400, id="json-list"),
    pytest.param(
        json.dumps(
            {"apiVersion": "admission.k8s.io/v2", "kind": "AdmissionReview", "request": {}}
        ).encode(),
        "application/json",
        400,
        id="unknown-api-version",
    ),
    pytest.param(
        json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(),
        "application/json",
        400,
        id="no-request",
    ),
    pytest.param(
        b'{"apiVersion": "admission.k8s.io/v1"}', "text/plain", 400, id="wrong-content-type"
    ),
    pytest.param(b" " * (8 * 1024 * 1024), "application/json", 413, id="8-MiB-body"),
    pytest.param(
        b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u",'
        b' "kind": {"group": "kubevirt.io", "version": "v1", "kind": "VirtualMachineInstance"},'
        b' "operation": "CREATE", "object": {"metadata": {"name": "v"}, "spec": '
        + b'{"x":' * 1015
        + b"{}"
        + b"}" * 1015
        + b"}}}",
        "application/json",
        400,
        id="nested-as-deep-as-json-allows",
    ),
]


@pytest.mark.parametrize(("body", "content_type", "status"), BAD_BODIES)
def test_bad_bodies_get_a_json_client_error(
    body: bytes, content_type: str, status: int, servers: dict[bool, WebhookProcess]
) -> None:
    response = post(servers[True], paths.MUTATE_VMIS, body, content_type)
    assert response.status_code == status
    assert response.json()["status"] == status
    assert response.json()["error"]


def test_a_review_of_another_kind_is_refused_by_the_endpoint(
    servers: dict[bool, WebhookProcess],
) -> None:
    pod_case = next(c for c in CASES if c.name == "pod-launcher-gets-class-tolerations")
    response = post(servers[True], paths.MUTATE_VMIS, json.dumps(pod_case.request).encode())
    assert response.status_code == 400
    assert "admits kubevirt.io/VirtualMachineInstance, not core/Pod" in response.json()["error"]


def test_server_survives_bad_input_and_logs_no_payload(servers: dict[bool, WebhookProcess]) -> None:
    secret = "TOKEN-" + "x" * 20
    body = json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {"uid": "u", "kind": {"kind": "Secret"}, "object": {"data": {"t": secret}}},
        }
    )
    assert post(servers[True], paths.MUTATE_PODS, body.encode()).status_code == 400
    assert post(servers[True], paths.MUTATE_VMIS, VMI_BODY).status_code == 200
    assert all(secret not in line for line in servers[True].lines)


def test_health_readiness_and_metrics(servers: dict[bool, WebhookProcess]) -> None:
    server = servers[True]
    with httpx.Client(verify=ssl.create_default_context(cafile=server.ca), timeout=10) as client:
        assert client.get(server.url + paths.HEALTHZ).status_code == 200
        assert client.get(server.url + paths.READYZ).status_code == 200
        post(server, paths.MUTATE_VMIS, VMI_BODY)
        text = client.get(server.url + paths.METRICS).text
    assert "gpuclass_webhook_catalog_synced 1.0" in text
    assert 'gpuclass_webhook_requests_total{allowed="true",code="200"' in text
    assert "gpuclass_webhook_request_duration_seconds_bucket" in text
    assert "gpuclass_webhook_cert_expiry_timestamp_seconds" in text


def test_a_request_being_answered_counts_in_flight(servers: dict[bool, WebhookProcess]) -> None:
    """`gpuclass_webhook_requests_in_flight` counts a request whose body is still arriving."""
    server = servers[True]
    context = ssl.create_default_context(cafile=server.ca)

    def in_flight() -> float:
        with httpx.Client(verify=context, timeout=10) as client:
            text = client.get(server.url + paths.METRICS).text
        [line] = [
            x for x in text.splitlines() if x.startswith("gpuclass_webhook_requests_in_flight ")
        ]
        return float(line.split()[1])

    host, port = server.url.removeprefix("https://").rsplit(":", 1)
    with (
        socket.create_connection((host, int(port)), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        tls.sendall(
            b"POST " + paths.MUTATE_VMIS.encode() + b" HTTP/1.1\r\nhost: x\r\n"
            b"content-type: application/json\r\ncontent-length: %d\r\n\r\n"
            % len(VMI_BODY)
            + VMI_BODY[:10]
        )
        deadline = time.monotonic() + 5
        while in_flight() != 1.0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert in_flight() == 1.0
        tls.sendall(VMI_BODY[10:])
        assert tls.recv(4096).startswith(b"HTTP/1.1 200")
    assert in_flight() == 0.0


def test_one_decision_log_line_per_request(servers: dict[bool, WebhookProcess]) -> None:
    case = next(c for c in CASES if c.name == "vmi-4.3-class-not-found")
    post(servers[True], paths.MUTATE_VMIS, json.dumps(case.request).encode())
    time.sleep(0.2)
    lines = [
        e
        for e in servers[True].logs()
        if e.get("msg") == "admission" and e.get("uid") == case.request["request"]["uid"]
    ]
    assert lines, "expected a decision log line"
    entry = lines[-1]
    assert entry["allowed"] is False and entry["causes"] == ["ClassNotFound"]
    assert entry["namespace"] == "tenant-a" and entry["kind"] == "VirtualMachineInstance"
    assert isinstance(entry["duration_ms"], float)


def test_the_decision_line_stays_short_whatever_the_review_holds(
    servers: dict[bool, WebhookProcess],
) -> None:
    """Every request-derived field of the line per review is clipped by the route itself."""
    review = json.loads(VMI_BODY)
    uid = "u" * 200_000
    review["request"]["uid"] = uid
    review["request"]["object"]["metadata"]["name"] = "n" * 200_000
    assert post(servers[True], paths.MUTATE_VMIS, json.dumps(review).encode()).status_code == 200
    time.sleep(0.2)
    [line] = [line for line in servers[True].lines if '"uuuuuuuu' in line]
    assert len(line) < 1_000
    entry = json.loads(line)
    assert entry["msg"] == "admission" and entry["uid"].startswith("u" * 128)


def test_objects_are_reloaded_when_files_change(tmp_path: Path) -> None:
    objects = tmp_path / "objects"
    shutil.copytree(OBJECTS[0], objects)
    server = WebhookProcess(
        ["--objects", str(objects), "--objects-poll-seconds", "0.2"], tls_dir=tmp_path / "tls"
    )
    try:
        case = next(c for c in CASES if c.name == "vmi-4.3-class-not-found")
        body = json.dumps(case.request).encode()
        assert post(server, paths.MUTATE_VMIS, body).json()["response"]["allowed"] is False
        (objects / "catalog" / "no-such-class.yaml").write_text(
            (objects / "catalog" / "example-whole-gpu.yaml")
            .read_text()
            .replace("name: example-whole-gpu", "name: no-such-class")
            .replace("example.com/whole-gpu", "example.com/new-whole-gpu")
        )
        (objects / "cluster" / "kubevirt.yaml").write_text(
            (objects / "cluster" / "kubevirt.yaml")
            .read_text()
            .replace(
                "resourceName: example.com/whole-gpu}",
                "resourceName: example.com/whole-gpu}\n"
                '        - {pciVendorSelector: "10DE:FFFE", resourceName: example.com/new-whole-gpu}',
            )
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if post(server, paths.MUTATE_VMIS, body).json()["response"]["allowed"]:
                break
            time.sleep(0.2)
        else:
            pytest.fail("the new class was not picked up from the changed files")
    finally:
        server.stop()


def _served_certificate(url: str, ca: str) -> bytes:
    host, port = url.removeprefix("https://").rsplit(":", 1)
    context = ssl.create_default_context(cafile=ca)
    import socket

    with (
        socket.create_connection((host, int(port)), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def test_certificate_files_replaced_under_a_running_server(tmp_path: Path) -> None:
    first = self_signed(tmp_path / "first", ["127.0.0.1", "localhost"])
    second = self_signed(tmp_path / "second", ["127.0.0.1", "localhost"])
    live = tmp_path / "live"
    live.mkdir()
    shutil.copy(first.cert, live / "tls.crt")
    shutil.copy(first.key, live / "tls.key")
    server = WebhookProcess(
        [
            *OBJECT_ARGS,
            "--tls-cert-file",
            str(live / "tls.crt"),
            "--tls-key-file",
            str(live / "tls.key"),
            "--tls-reload-seconds",
            "0.2",
        ],
        tls_dir=live,
    )
    body = VMI_BODY
    try:
        old_client = httpx.Client(
            verify=ssl.create_default_context(cafile=str(first.ca)), timeout=10
        )
        headers = {"content-type": "application/json"}
        assert (
            old_client.post(
                server.url + paths.MUTATE_VMIS, content=body, headers=headers
            ).status_code
            == 200
        )
        shutil.copy(second.key, live / "tls.key.new")
        shutil.copy(second.cert, live / "tls.crt.new")
        (live / "tls.key.new").replace(live / "tls.key")
        (live / "tls.crt.new").replace(live / "tls.crt")
        expected = ssl.PEM_cert_to_DER_cert(second.cert.read_text())
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if _served_certificate(server.url, str(second.ca)) == expected:
                    break
            except ssl.SSLError:
                pass
            time.sleep(0.2)
        else:
            pytest.fail("the replaced certificate was not served")
        # The connection opened before the rotation still works (kept alive, not dropped).
        assert (
            old_client.post(
                server.url + paths.MUTATE_VMIS, content=body, headers=headers
            ).status_code
            == 200
        )
        old_client.close()
        with httpx.Client(
            verify=ssl.create_default_context(cafile=str(second.ca)), timeout=10
        ) as new_client:
            assert (
                new_client.post(
                    server.url + paths.MUTATE_VMIS, content=body, headers=headers
                ).status_code
                == 200
            )
        assert server.proc.poll() is None
    finally:
        server.stop()


def test_sigterm_drains_and_exits_cleanly(tmp_path: Path) -> None:
    server = WebhookProcess(OBJECT_ARGS, tls_dir=tmp_path)
    assert post(server, paths.MUTATE_VMIS, VMI_BODY).status_code == 200
    assert server.stop(signal.SIGTERM) == 0


def test_bad_objects_fail_start_with_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("kind: [unclosed")
    with pytest.raises(RuntimeError, match="not valid YAML"):
        WebhookProcess(["--objects", str(tmp_path / "bad.yaml")], tls_dir=tmp_path)


def test_sigterm_fails_readiness_and_serves_the_drain_before_closing(tmp_path: Path) -> None:
    """Rolling updates: every request sent in the drain after SIGTERM is answered."""
    server = WebhookProcess([*OBJECT_ARGS, "--drain-seconds", "3"], tls_dir=tmp_path)
    context = ssl.create_default_context(cafile=server.ca)
    headers = {"content-type": "application/json"}
    with httpx.Client(verify=context, timeout=5) as pooled:
        assert pooled.post(server.url + paths.MUTATE_VMIS, content=VMI_BODY, headers=headers)
        server.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 2.5  # inside the 3 s drain
        answers, closing, ready = [], [], []
        while time.monotonic() < deadline:
            response = pooled.post(
                server.url + paths.MUTATE_VMIS, content=VMI_BODY, headers=headers
            )
            answers.append(response.status_code)
            closing.append(response.headers.get("connection"))
            with httpx.Client(verify=context, timeout=5) as fresh:  # a new connection each time
                answers.append(
                    fresh.post(
                        server.url + paths.MUTATE_VMIS, content=VMI_BODY, headers=headers
                    ).status_code
                )
                ready.append(fresh.get(server.url + paths.READYZ).status_code)
            time.sleep(0.05)
    assert len(answers) >= 20 and set(answers) == {200}, answers
    assert set(ready) == {503}, "readiness fails from the first moment of the drain"
    assert set(closing) == {"close"}, "drain answers ask the client to reconnect elsewhere"
    assert server.proc.wait(timeout=15) == 0
    with pytest.raises(httpx.ConnectError):
        httpx.get(server.url + paths.HEALTHZ, verify=context, timeout=2)


def test_every_admission_path_is_served_by_its_endpoint_admitter() -> None:
    """The routes are exactly docs/contract.md section 3's six paths, each for its kind, each
    answered by the admitter the one table of endpoints names."""
    from gpuclass.shared.core.admission import (
        mutate_pod,
        mutate_vmi,
        validate_gpuclass,
        validate_pod,
        validate_vm,
        validate_vmi,
    )
    from gpuclass.shared.core.admission.envelope import GPUCLASS, POD, VM, VMI
    from gpuclass.shared.core.admission.review import ENDPOINTS
    from gpuclass.webhook.app import WEBHOOKS

    contract = {  # path: (kind, the admitter whose role its name says)
        "/validate/gpuclasses": (GPUCLASS, validate_gpuclass.admit),
        "/mutate/virtualmachineinstances": (VMI, mutate_vmi.admit),
        "/mutate/pods": (POD, mutate_pod.admit),
        "/validate/virtualmachineinstances": (VMI, validate_vmi.admit),
        "/validate/virtualmachines": (VM, validate_vm.admit),
        "/validate/pods": (POD, validate_pod.admit),
    }
    assert {path: kind for path, (_, kind) in WEBHOOKS.items()} == {
        path: kind for path, (kind, _) in contract.items()
    }
    assert {path: (e.kind, e.admit) for path, e in ENDPOINTS.items()} == contract
