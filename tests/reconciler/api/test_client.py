"""The kubernetes_asyncio adapter against a scripted HTTP server speaking the API's wire format.

What is checked is what the loop relies on: paginated lists with the server-side
selectors, watch lines split across chunks, bookmarks, an in-stream 410 raised as
`ApiError.gone`, error bodies mapped to status and reason, merge patches with
their content type, the label-tested JSON patch of a license copy, license sources read one
name at a time (lists and merged watches), and a missing Lease read as None. The
real API server drives the same adapter in the control-plane tests.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import orjson
import pytest
from aiohttp import web
from kubernetes_asyncio import client

from gpuclass.reconciler.api.client import KubeAdapter
from gpuclass.reconciler.api.port import ApiError
from gpuclass.reconciler.state.resources import POD_FIELD_SELECTOR, Scope
from gpuclass.shared.core.base.jsonsize import json_values
from gpuclass.shared.kube.kubeclient import user_agent
from gpuclass.shared.kube.ratelimit import TokenBucket

Seen = list[dict[str, Any]]


def status(code: int, reason: str, message: str) -> web.Response:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }
    return web.json_response(body, status=code)


def pod(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": "1"}}


def build_app(seen: Seen) -> web.Application:
    async def pods(request: web.Request) -> web.StreamResponse:
        seen.append({"path": request.path, "query": dict(request.query)})
        if request.query.get("watch") == "true":
            response = web.StreamResponse()
            await response.prepare(request)
            line = json.dumps({"type": "ADDED", "object": pod("w1")}).encode() + b"\n"
            await response.write(line[:10])  # one event split across chunks
            await asyncio.sleep(0.01)
            await response.write(line[10:])
            bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "77"}}}
            await response.write(json.dumps(bookmark).encode() + b"\n\n")
            expired = {
                "type": "ERROR",
                "object": {
                    "kind": "Status",
                    "code": 410,
                    "reason": "Expired",
                    "message": "too old resource version",
                },
            }
            await response.write(json.dumps(expired).encode() + b"\n")
            return response
        if request.query.get("continue") == "t1":
            return web.json_response({"metadata": {"resourceVersion": "42"}, "items": [pod("c")]})
        return web.json_response(
            {"metadata": {"resourceVersion": "42", "continue": "t1"}, "items": [pod("a"), pod("b")]}
        )

    async def secrets(request: web.Request) -> web.StreamResponse:
        """The license namespace's Secrets: only by name (as RBAC with resourceNames allows)."""
        query = dict(request.query)
        seen.append({"path": request.path, "query": query})
        name = query.get("fieldSelector", "").removeprefix("metadata.name=")
        if not name or name == query.get("fieldSelector"):
            return status(403, "Forbidden", "secrets is forbidden: cannot list the namespace")
        versions = {"src-a": "5", "src-b": "8"}
        if query.get("watch") == "true":
            response = web.StreamResponse()
            await response.prepare(request)
            if name == "src-b":
                changed = {"metadata": {"name": name, "namespace": "cozy-system"}}
                changed["metadata"]["resourceVersion"] = "9"
                await response.write(
                    json.dumps({"type": "MODIFIED", "object": changed}).encode() + b"\n"
                )
            await asyncio.sleep(0.05 if name == "src-b" else 1)
            return response
        item = {"metadata": {"name": name, "namespace": "cozy-system"}}
        item["metadata"]["resourceVersion"] = versions.get(name, "1")
        items = [item] if name in versions else []
        return web.json_response(
            {"metadata": {"resourceVersion": versions.get(name, "3")}, "items": items}
        )

    async def patch_secret(request: web.Request) -> web.Response:
        seen.append(
            {
                "path": request.path,
                "content_type": request.content_type,
                "query": dict(request.query),
                "body": await request.json(),
            }
        )
        return web.json_response({"kind": "Secret", "metadata": {"name": "s"}})

    async def patch_status(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(
            {
                "path": request.path,
                "content_type": request.content_type,
                "body": body,
                "query": dict(request.query),
                "user_agent": request.headers.get("User-Agent"),
            }
        )
        if body["metadata"]["resourceVersion"] == "old":
            return status(409, "Conflict", "the object has been modified")
        return web.json_response(
            {"metadata": {"name": "c", "resourceVersion": "9"}, "status": body["status"]}
        )

    async def missing(request: web.Request) -> web.Response:
        return status(404, "NotFound", "not found")

    async def delete_secret(request: web.Request) -> web.Response:
        seen.append({"path": request.path, "body": await request.read()})
        return web.json_response({"kind": "Status", "status": "Success"})

    async def create_secret(request: web.Request) -> web.Response:
        return status(
            403, "Forbidden", "ValidatingAdmissionPolicy 'gpuclass-licence-copies' denied request"
        )

    app = web.Application()
    app.router.add_get("/api/v1/pods", pods)
    app.router.add_get("/api/v1/namespaces/cozy-system/secrets", secrets)
    app.router.add_patch("/api/v1/namespaces/t/secrets/s", patch_secret)
    app.router.add_patch("/apis/cozystack.io/v1alpha1/gpuclasses/c/status", patch_status)
    app.router.add_get("/apis/cozystack.io/v1alpha1/gpuclasses/gone", missing)
    app.router.add_get("/apis/coordination.k8s.io/v1/namespaces/ns/leases/l", missing)
    app.router.add_delete("/api/v1/namespaces/t/secrets/s", delete_secret)
    app.router.add_post("/api/v1/namespaces/t/secrets", create_secret)
    return app


@asynccontextmanager
async def adapter() -> AsyncIterator[tuple[KubeAdapter, Seen]]:
    seen: Seen = []
    runner = web.AppRunner(build_app(seen))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    api = client.ApiClient(client.Configuration(host=f"http://127.0.0.1:{port}"))
    api.user_agent = user_agent("gpuclass-reconciler")
    scope = Scope(license_secret_names=frozenset({"src-a", "src-b", "absent"}))
    kube = KubeAdapter(api, scope=scope, page_size=2)
    try:
        yield kube, seen
    finally:
        await kube.close()
        await runner.cleanup()


def run(test: Callable[[KubeAdapter, Seen], Awaitable[None]]) -> None:
    async def scenario() -> None:
        async with adapter() as (kube, seen):
            await test(kube, seen)

    asyncio.run(asyncio.wait_for(scenario(), 20))


def test_list_pages_with_selectors() -> None:
    async def test(kube: KubeAdapter, seen: Seen) -> None:
        pages = [page async for page in kube.list_pages("pods")]
        assert [[i["metadata"]["name"] for i in p.items] for p in pages] == [["a", "b"], ["c"]]
        assert [p.last for p in pages] == [False, True] and pages[-1].resource_version == "42"
        assert seen[0]["query"] == {"fieldSelector": POD_FIELD_SELECTOR, "limit": "2"}
        assert seen[1]["query"]["continue"] == "t1"

    run(test)


def test_a_page_too_large_is_asked_for_again_with_fewer_objects() -> None:
    """Objects a tenant made as large as the API server allows cannot make one page costly:
    a body over the bound is dropped unread and the page asked for with half the limit."""

    async def test(kube: KubeAdapter, seen: Seen) -> None:
        kube.max_page_bytes = 150  # the first page (two pods) is larger, the last (one) is not
        pages = [page async for page in kube.list_pages("pods")]
        assert [[i["metadata"]["name"] for i in p.items] for p in pages] == [["a", "b"], ["c"]]
        assert [(s["query"]["limit"], s["query"].get("continue")) for s in seen] == [
            ("2", None),  # too large: dropped
            ("1", None),  # one object is read whatever it weighs
            ("2", "t1"),  # the next page asks for the full limit again
        ]

    run(test)


def test_a_page_of_too_many_values_is_asked_for_again_with_fewer_objects() -> None:
    """A page small as bytes but large as a tree (objects a tenant filled with empty objects) is
    dropped before parsing and asked for with half the limit, as a page too large in bytes is."""

    async def test(kube: KubeAdapter, seen: Seen) -> None:
        first = await kube._page("/api/v1/pods", {"limit": "2"})
        assert first is not None
        two_pods = json_values(orjson.dumps(first))
        kube.max_page_values = two_pods - 1  # the first page (two pods) holds more, the last not
        seen.clear()
        pages = [page async for page in kube.list_pages("pods")]
        assert [[i["metadata"]["name"] for i in p.items] for p in pages] == [["a", "b"], ["c"]]
        assert [(s["query"]["limit"], s["query"].get("continue")) for s in seen] == [
            ("2", None),  # too many values: dropped unparsed
            ("1", None),  # one object is read whatever it holds
            ("2", "t1"),  # the next page asks for the full limit again
        ]

    run(test)


def test_license_sources_are_read_one_name_at_a_time() -> None:
    """No request for the license namespace's Secrets goes without a metadata.name selector."""

    async def test(kube: KubeAdapter, seen: Seen) -> None:
        pages = [page async for page in kube.list_pages("licence-secrets")]
        assert [i["metadata"]["name"] for p in pages for i in p.items] == ["src-a", "src-b"]
        assert sorted(s["query"]["fieldSelector"] for s in seen) == [
            "metadata.name=absent",
            "metadata.name=src-a",
            "metadata.name=src-b",
        ]
        seen.clear()
        events = [e async for e in kube.watch("licence-secrets", "8")]
        assert [(e.type, e.object["metadata"]["name"]) for e in events] == [("MODIFIED", "src-b")]
        watches = {s["query"]["fieldSelector"]: s["query"]["resourceVersion"] for s in seen}
        # each name resumes from its own list's version, whatever version the caller passes
        assert watches == {
            "metadata.name=absent": "3",
            "metadata.name=src-a": "5",
            "metadata.name=src-b": "8",
        }
        seen.clear()
        [e async for e in kube.watch("licence-secrets", "")]
        assert {s["query"]["fieldSelector"]: s["query"]["resourceVersion"] for s in seen}[
            "metadata.name=src-b"
        ] == "9"

    run(test)


def test_named_sources_with_no_name_read_nothing_and_never_end() -> None:
    async def scenario() -> None:
        api = client.ApiClient(client.Configuration(host="http://127.0.0.1:9"))
        kube = KubeAdapter(api, scope=Scope(license_secret_names=frozenset()))
        try:
            pages = [page async for page in kube.list_pages("licence-secrets")]
            assert [p.items for p in pages] == [[]]
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(anext(kube.watch("licence-secrets", "")), 0.2)
        finally:
            await kube.close()

    asyncio.run(scenario())


def test_watch_splits_lines_passes_bookmarks_and_raises_410() -> None:
    async def test(kube: KubeAdapter, seen: Seen) -> None:
        events = []
        with pytest.raises(ApiError) as raised:
            async for event in kube.watch("pods", "42"):
                events.append(
                    (
                        event.type,
                        event.object["metadata"].get("name")
                        or event.object["metadata"]["resourceVersion"],
                    )
                )
        assert events == [("ADDED", "w1"), ("BOOKMARK", "77")]
        assert raised.value.gone and raised.value.reason == "Expired"
        query = seen[0]["query"]
        assert query["watch"] == "true" and query["resourceVersion"] == "42"
        assert (
            query["allowWatchBookmarks"] == "true" and query["fieldSelector"] == POD_FIELD_SELECTOR
        )

    run(test)


def test_status_merge_patch_and_conflict() -> None:
    async def test(kube: KubeAdapter, seen: Seen) -> None:
        written = await kube.patch_class_status(
            "c", {"metadata": {"resourceVersion": "8"}, "status": {"free": 1}}
        )
        assert written == {"metadata": {"name": "c", "resourceVersion": "9"}, "status": {"free": 1}}
        assert seen[0]["content_type"] == "application/merge-patch+json"
        assert seen[0]["query"] == {"fieldManager": "gpuclass-reconciler"}
        assert seen[0]["user_agent"] == user_agent("gpuclass-reconciler")
        assert seen[0]["user_agent"].startswith("gpuclass-reconciler/")
        with pytest.raises(ApiError) as raised:
            await kube.patch_class_status(
                "c", {"metadata": {"resourceVersion": "old"}, "status": {}}
            )
        assert (raised.value.status, raised.value.reason) == (409, "Conflict")

    run(test)


def test_errors_and_missing_objects() -> None:
    async def test(kube: KubeAdapter, seen: Seen) -> None:
        assert await kube.get_lease("ns", "l") is None
        with pytest.raises(ApiError) as raised:
            await kube.get_class("gone")
        assert raised.value.status == 404
        with pytest.raises(ApiError) as refused:
            await kube.create_secret("t", {"metadata": {"name": "s"}})
        assert refused.value.status == 403 and "ValidatingAdmissionPolicy" in refused.value.message

    run(test)


def test_copy_writes_patch_and_delete() -> None:
    async def test(kube: KubeAdapter, seen: Seen) -> None:
        patch = [{"op": "test", "path": "/metadata/labels/x", "value": "y"}]
        assert await kube.patch_secret("t", "s", patch=patch) == {
            "kind": "Secret",
            "metadata": {"name": "s"},
        }
        assert seen[0]["content_type"] == "application/json-patch+json"
        assert seen[0]["query"] == {"fieldManager": "gpuclass-reconciler"}
        assert seen[0]["body"] == patch
        await kube.delete_secret("t", "s")
        assert seen[1]["path"] == "/api/v1/namespaces/t/secrets/s"

    run(test)


def test_unreachable_server_is_status_0() -> None:
    async def scenario() -> None:
        api = client.ApiClient(client.Configuration(host="http://127.0.0.1:9"))
        kube = KubeAdapter(api, scope=Scope("a", "b"), request_timeout=5)
        try:
            with pytest.raises(ApiError) as raised:
                await kube.get_class("x")
            assert raised.value.status == 0
        finally:
            await kube.close()

    asyncio.run(scenario())


def test_token_bucket_allows_the_burst_then_the_rate() -> None:
    now = [0.0]
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    async def scenario() -> None:
        bucket = TokenBucket(10, 3, clock=lambda: now[0], sleep=sleep)
        for _ in range(3):
            await bucket.acquire()
        assert slept == []  # the burst goes out at once
        for _ in range(5):
            await bucket.acquire()
        assert now[0] == pytest.approx(0.5)  # then 10 per second
        unlimited = TokenBucket(0, 1, clock=lambda: now[0], sleep=sleep)
        for _ in range(100):
            await unlimited.acquire()
        assert now[0] == pytest.approx(0.5)

    asyncio.run(scenario())
