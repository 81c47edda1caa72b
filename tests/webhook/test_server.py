"""The webhook's limits and error shapes, each attacked over a real TLS connection on 127.0.0.1.

Contract section 3 (every error a JSON `{"status", "error"}`, never a 500 on input) and
docs/conventions.md rule 25 (servers bounded by default): a wrong envelope type, unknown paths and
methods, a trailing slash, oversized and malformed requests, clients that send headers or
bodies too slowly or not at all, and more connections than the cap.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from uvicorn.server import ServerState

from gpuclass.shared.process.memory import return_free_memory
from gpuclass.webhook import paths
from gpuclass.webhook.server import ConnectionLimits, GuardedProtocol, JoinedWrites
from tests.conftest import OBJECTS
from tests.controlplane.cluster import eventually
from tests.webhook_process import WebhookProcess

OBJECT_ARGS = [a for p in OBJECTS for a in ("--objects", p)]
ROOT = Path(__file__).resolve().parents[2]
REVIEWS = {
    paths.MUTATE_VMIS: "vmi-whole-gpu",
    paths.MUTATE_PODS: "launcher-pod",
    paths.VALIDATE_GPUCLASSES: "gpuclass-invalid",
}
LIMITS = [
    "--header-timeout-seconds=1",
    "--body-timeout-seconds=1.5",
    "--keep-alive-seconds=2",
    "--max-connections=20",
    "--max-body-bytes=1048576",
    "--max-header-bytes=4096",
    "--max-in-flight=4",
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebhookProcess]:
    process = WebhookProcess([*OBJECT_ARGS, *LIMITS], tls_dir=tmp_path_factory.mktemp("tls"))
    yield process
    assert process.stop() == 0


def client(server: WebhookProcess) -> httpx.Client:
    return httpx.Client(verify=ssl.create_default_context(cafile=server.ca), timeout=10)


def review_body(path: str, **fields: object) -> bytes:
    body = json.loads((ROOT / "examples" / "reviews" / f"{REVIEWS[path]}.json").read_text())
    body["request"].update(fields)
    return json.dumps(body).encode()


def tls_socket(server: WebhookProcess) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=server.ca)
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    return context.wrap_socket(raw, server_hostname="127.0.0.1")


def read_until_closed(sock: ssl.SSLSocket, within: float) -> tuple[bytes, float]:
    """Everything the server sends until it closes, and how long that took."""
    started, data = time.monotonic(), b""
    sock.settimeout(within)
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (ConnectionResetError, ssl.SSLError):
        pass
    except TimeoutError:
        pytest.fail(f"connection still open after {within} s; got {data[:200]!r}")
    return data, time.monotonic() - started


def answered_then_cut(server: WebhookProcess, reason: str) -> float:
    """Post a good review (it must be allowed), then read how many connections `reason` cut."""
    with client(server) as http:
        response = http.post(
            server.url + paths.MUTATE_VMIS,
            content=review_body(paths.MUTATE_VMIS),
            headers={"content-type": "application/json"},
        )
        assert response.status_code == 200 and response.json()["response"]["allowed"]
        metrics = http.get(server.url + paths.METRICS).text
    prefix = f'gpuclass_webhook_connections_cut_total{{reason="{reason}"}}'
    return float(next(x for x in metrics.splitlines() if x.startswith(prefix)).split()[-1])


def json_error(raw: bytes) -> tuple[int, dict[str, object]]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    assert b"content-type: application/json" in head.lower()
    return status, json.loads(body)


@pytest.mark.parametrize("path", list(REVIEWS))
@pytest.mark.parametrize("operation", [[], {}], ids=["list", "object"])
def test_a_wrong_operation_type_is_a_counted_400(
    server: WebhookProcess, path: str, operation: object
) -> None:
    with client(server) as http:
        response = http.post(
            server.url + path,
            content=review_body(path, operation=operation),
            headers={"content-type": "application/json"},
        )
        assert response.status_code == 400
        assert response.json()["status"] == 400
        assert response.json()["error"].startswith("request.operation")
        metrics = http.get(server.url + paths.METRICS).text
    webhook = path.rsplit("/", 1)[1]
    assert f'webhook="{webhook}"' in metrics and 'code="400"' in metrics


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        pytest.param("GET", "/no/such/path", 404, id="unknown-path"),
        pytest.param("POST", paths.MUTATE_VMIS + "/", 404, id="trailing-slash-no-redirect"),
        pytest.param("GET", paths.HEALTHZ + "/", 404, id="trailing-slash-on-health"),
        pytest.param("GET", paths.MUTATE_VMIS, 405, id="get-on-admission"),
        pytest.param("POST", paths.HEALTHZ, 405, id="post-on-health"),
    ],
)
def test_router_errors_have_the_contract_shape(
    server: WebhookProcess, method: str, path: str, status: int
) -> None:
    with client(server) as http:
        response = http.request(
            method,
            server.url + path,
            content=b"{}",
            headers={"content-type": "application/json", "host": "evil.example"},
        )
    assert response.status_code == status
    assert "location" not in response.headers
    assert response.headers["content-type"] == "application/json"
    assert response.json()["status"] == status and response.json()["error"]


def test_a_413_closes_the_connection_instead_of_draining_the_body(server: WebhookProcess) -> None:
    with tls_socket(server) as sock:
        sock.sendall(
            f"POST {paths.MUTATE_VMIS} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            f"content-length: {1 << 30}\r\n\r\n".encode()
        )
        # Some of the body. The server may close while it is still being sent: it does not
        # drain the body, which is what this test wants.
        with contextlib.suppress(ssl.SSLError, OSError):
            sock.sendall(b" " * 65536)
        data, _ = read_until_closed(sock, within=5)
    status, body = json_error(data)
    assert (status, body["status"]) == (413, 413)


def test_a_malformed_request_gets_a_json_400_and_the_connection_closes(
    server: WebhookProcess,
) -> None:
    with tls_socket(server) as sock:
        sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        data, _ = read_until_closed(sock, within=5)
    assert json_error(data) == (400, {"status": 400, "error": "malformed HTTP request"})


def test_headers_over_the_cap_are_refused(server: WebhookProcess) -> None:
    with tls_socket(server) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-pad: " + b"a" * 8192 + b"\r\n\r\n")
        data, _ = read_until_closed(sock, within=5)
    assert json_error(data)[0] == 431


def trickle(sock: ssl.SSLSocket, pieces: list[bytes], every: float) -> tuple[bytes, float]:
    """Send `pieces` one by one, `every` seconds apart, until the server answers or closes;
    then everything it sends until it closes, and how long the whole took."""
    started, data = time.monotonic(), b""
    sock.settimeout(every)
    for piece in pieces:
        try:
            sock.sendall(piece)
            data = sock.recv(65536)
        except TimeoutError:
            continue
        except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
            break
        break
    if data:
        rest, _ = read_until_closed(sock, within=5)
        data += rest
    return data, time.monotonic() - started


HEADER_CAP = 4096  # --max-header-bytes in LIMITS
PAD = b"x-pad: " + b"a" * (2 * HEADER_CAP) + b"\r\n"


@pytest.mark.parametrize(
    ("pieces", "every"),
    [
        pytest.param(
            [b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-pad: "] + [b"a" * 512] * 40,
            0.02,
            id="one-header-line-trickled-past-the-cap",
        ),
        pytest.param(
            [
                b"GET /healthz HTTP/1.1\r\nhost: x\r\n"
                + b"x-h: 0123456789abcdef\r\n" * 300
                + b"\r\n"
            ],
            0.02,
            id="many-small-headers-in-one-write",
        ),
        pytest.param(
            [b"GET /healthz HTTP/1.1\r\nhost: x\r\n" + PAD[:3000], PAD[3000:] + b"\r\n"],
            0.2,
            id="under-the-cap-then-completed-past-it",
        ),
        pytest.param(
            [b"GET /" + b"a" * (2 * HEADER_CAP) + b" HTTP/1.1\r\nhost: x\r\n\r\n"],
            0.02,
            id="request-target-past-the-cap",
        ),
    ],
)
def test_header_blocks_past_the_cap_get_431_however_they_arrive(
    server: WebhookProcess, pieces: list[bytes], every: float
) -> None:
    with tls_socket(server) as sock:
        data, took = trickle(sock, pieces, every)
    assert json_error(data) == (431, {"status": 431, "error": "request headers too large"})
    assert took < 1, "refused at the cap, not at the header timeout"


def test_pipelined_requests_are_answered_in_order(server: WebhookProcess) -> None:
    good = review_body(paths.MUTATE_VMIS)
    post = (
        f"POST {paths.MUTATE_VMIS} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        f"content-length: {len(good)}\r\n\r\n"
    ).encode() + good
    last = b"GET /readyz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
    with tls_socket(server) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n" + post + post + last)
        data, _ = read_until_closed(sock, within=5)
    answers = data.split(b"HTTP/1.1 ")[1:]
    assert [a[:3] for a in answers] == [b"200"] * 4
    bodies = [json.loads(a.partition(b"\r\n\r\n")[2]) for a in answers]
    assert bodies[0]["message"] == bodies[3]["message"] == "ok"
    assert [b["response"]["allowed"] for b in bodies[1:3]] == [True, True]


@pytest.mark.parametrize(
    ("first", "then"),
    [
        pytest.param(
            b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\nGET /healthz HTTP/1.1\r\n",
            b"x",
            id="pipelined-request-trickling-its-headers",
        ),
        pytest.param(
            b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n", b"\r\n", id="empty-lines-after-an-answer"
        ),
    ],
)
def test_bytes_trickled_after_an_answer_are_cut_at_the_header_timeout(
    server: WebhookProcess, first: bytes, then: bytes
) -> None:
    """Every byte read resets the idle keep-alive timer, so only the header deadline ends these."""
    with tls_socket(server) as sock:
        sock.sendall(first)
        started, data = time.monotonic(), b""
        sock.settimeout(0.25)
        while time.monotonic() - started < 8:
            try:
                sock.sendall(then)
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
                break
            if not chunk:
                break
            data += chunk
        took = time.monotonic() - started
    assert data.startswith(b"HTTP/1.1 200")
    assert took < 5, "the header timeout is 1 s; the trickle would go on for 8 s"


@pytest.mark.parametrize(
    "send",
    [
        pytest.param(b"", id="idle-before-first-request"),
        pytest.param(b"POST /mutate/pods HTTP/1.1\r\nhost: x\r\n", id="headers-never-finished"),
    ],
)
def test_slow_headers_are_cut_at_the_header_timeout(server: WebhookProcess, send: bytes) -> None:
    with tls_socket(server) as sock:
        sock.sendall(send)
        _, took = read_until_closed(sock, within=5)
    assert took < 4, "the header timeout is 1 s"


def test_a_body_that_never_finishes_gets_408_and_the_connection_closes(
    server: WebhookProcess,
) -> None:
    with tls_socket(server) as sock:
        sock.sendall(
            f"POST {paths.MUTATE_VMIS} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            "content-length: 1000\r\n\r\n{".encode()
        )
        data, took = read_until_closed(sock, within=6)
    assert json_error(data)[0] == 408
    assert took < 5, "the body timeout is 1.5 s"


def test_an_idle_keep_alive_connection_is_closed(server: WebhookProcess) -> None:
    with tls_socket(server) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        data, took = read_until_closed(sock, within=8)
    assert data.startswith(b"HTTP/1.1 200")
    assert took < 6, "the keep-alive timeout is 2 s"


def test_over_the_connection_cap_the_longest_idle_connection_gives_way(
    server: WebhookProcess,
) -> None:
    idle = [tls_socket(server) for _ in range(25)]  # the cap is 20
    try:
        assert answered_then_cut(server, "idle_evicted") >= 5
    finally:
        for sock in idle:
            sock.close()


def test_a_huge_uid_makes_a_short_decision_line(server: WebhookProcess) -> None:
    uid = "u" * 900_000
    with client(server) as http:
        response = http.post(
            server.url + paths.MUTATE_VMIS,
            content=review_body(paths.MUTATE_VMIS, uid=uid),
            headers={"content-type": "application/json"},
        )
    assert response.json()["response"]["uid"] == uid, "the response still copies it whole"
    time.sleep(0.3)
    lines = [line for line in server.lines if '"msg":"admission"' in line and '"uid":"uuu' in line]
    assert len(lines) == 1, "one line per decision"
    assert len(lines[0]) < 2000


def test_a_client_leaving_mid_body_is_logged_at_debug_only(server: WebhookProcess) -> None:
    before = len(server.lines)
    with tls_socket(server) as sock:
        sock.sendall(
            f"POST {paths.MUTATE_VMIS} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            "content-length: 5000\r\n\r\n{".encode()
        )
        time.sleep(0.2)
    time.sleep(0.5)
    new = [json.loads(line) for line in server.lines[before:] if line.startswith("{")]
    assert not [e for e in new if e.get("level") in ("warning", "error") or "exc" in e], new


def test_every_setting_is_documented_with_its_flag() -> None:
    from gpuclass.webhook.settings import WebhookSettings

    documented = (ROOT / "docs" / "webhook.md").read_text()
    flags = ["--" + name.replace("_", "-") for name in WebhookSettings.model_fields]
    assert [f for f in flags if f"`{f}" not in documented] == []
    for limit in ("max_connections", "max_in_flight", "header_timeout_seconds"):
        assert f"`GPUCLASS_{limit.upper()}`" in documented


def test_over_the_in_flight_cap_the_slowest_body_gives_way(server: WebhookProcess) -> None:
    head = (
        f"POST {paths.MUTATE_VMIS} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        "content-length: 1000\r\n\r\n{"
    ).encode()
    slow = [tls_socket(server) for _ in range(6)]  # the cap is 4
    try:
        for sock in slow:
            sock.sendall(head)
            time.sleep(0.05)
        assert answered_then_cut(server, "slow_body_evicted") >= 3
    finally:
        for sock in slow:
            sock.close()


class RecordingTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, bytes]] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.calls.append(("write", bytes(data)))

    def close(self) -> None:
        self.calls.append(("close", b""))

    def abort(self) -> None:
        self.calls.append(("abort", b""))


@pytest.mark.parametrize(
    ("end", "expected"),
    [
        pytest.param(None, [("write", b"head|body")], id="one-write-at-the-end-of-the-turn"),
        pytest.param("close", [("write", b"head|body"), ("close", b"")], id="close-sends-first"),
        pytest.param("abort", [("abort", b"")], id="abort-drops-what-is-held"),
    ],
)
def test_joined_writes_send_one_piece_per_event_loop_turn(
    end: str | None, expected: list[tuple[str, bytes]]
) -> None:
    async def turn() -> list[tuple[str, bytes]]:
        inner = RecordingTransport()
        joined = JoinedWrites(inner, asyncio.get_running_loop())
        joined.write(b"head|")
        joined.write(b"body")
        assert inner.calls == [], "nothing is written within the turn"
        if end:
            getattr(joined, end)()
        await asyncio.sleep(0)
        return inner.calls

    assert asyncio.run(turn()) == expected


class OpenTransport(RecordingTransport):
    """A connection's transport that knows when it was aborted (the protocol asks)."""

    def is_closing(self) -> bool:
        return ("abort", b"") in self.calls

    def get_extra_info(self, name: str, default: object = None) -> object:
        return default


def test_connections_arriving_together_at_the_cap_each_evict_their_own_victim() -> None:
    """docs/webhook.md "Limits": at the cap a new connection takes the place of the longest-idle
    one. Several arriving in one event-loop turn (before the evicted ones are gone) must each
    evict another, or the cap drifts up by one each time."""

    async def turn() -> tuple[list[str], list[bool]]:
        cut: list[str] = []
        limits = ConnectionLimits(
            max_connections=3,
            max_in_flight=4,
            max_header_bytes=4096,
            header_timeout=60,
            handshake_timeout=60,
            on_close=cut.append,
        )
        config = uvicorn.Config(app=lambda scope, receive, send: None, http="httptools")
        state = ServerState()
        loop = asyncio.get_running_loop()
        open_ = [OpenTransport() for _ in range(3)]
        for transport in open_:
            GuardedProtocol(config, state, {}, loop, limits=limits).connection_made(transport)
            await asyncio.sleep(0.002)  # each a little longer in its phase than the next
        for _ in range(2):  # two more in one turn: the two longest in theirs give way
            GuardedProtocol(config, state, {}, loop, limits=limits).connection_made(OpenTransport())
        return cut, [t.is_closing() for t in open_]

    cut, closed = asyncio.run(turn())
    assert cut == ["idle_evicted", "idle_evicted"]
    assert closed == [True, True, False]


def test_the_webhook_gives_free_heap_back_on_its_period(tmp_path: Path) -> None:
    """`--memory-return-seconds` reaches the running server (shared.process.memory): its debug
    line says whether glibc gave pages back (true or false; null only off glibc)."""
    process = WebhookProcess(
        [*OBJECT_ARGS, "--memory-return-seconds", "0.2", "--log-level", "debug"],
        tls_dir=tmp_path,
    )
    try:
        lines = eventually(
            lambda: (
                [e for e in process.logs() if e.get("msg") == "free heap pages returned"] or None
            ),
            timeout=10,
            what="the webhook's memory-return log line",
            every=0.1,
        )
        # true or false where glibc is (our images); null only without malloc_trim
        assert isinstance(lines[0]["returned"], bool) or return_free_memory() is None
    finally:
        assert process.stop() == 0
