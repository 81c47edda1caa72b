"""The webhook's live catalog store against a fake at the list/watch seam.

The real API server drives the same code in the control-plane tests; here a
scripted source proves the loop's contract: first full sync before ready, events
update the catalog, an expired watch (410) and a dropped watch re-list from
scratch, other errors back off and recover.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gpuclass.shared.core.status.catalog import Policy
from gpuclass.shared.kube.errors import ApiError
from gpuclass.shared.kube.listwatch import ListPage, RawObject, WatchEvent
from gpuclass.webhook.catalogs import CatalogStore

Expired = ApiError(410, "Expired", message="too old resource version")


def gpuclass(name: str, resource: str, rv: str = "1") -> RawObject:
    return {
        "kind": "GPUClass",
        "metadata": {"name": name, "resourceVersion": rv},
        "spec": {
            "vendor": "v",
            "model": "m",
            "mode": "passthrough",
            "source": {"devicePlugin": {"resourceName": resource}},
        },
    }


class ScriptedResource:
    """One resource: each list returns the next listing (one page); each watch replays the
    next script of events, then ends (the last one stays open and quiet)."""

    def __init__(
        self, name: str, listings: list[list[RawObject]], watches: list[list[Any]]
    ) -> None:
        self.name = name
        self.listings = listings
        self.watches = watches
        self.list_calls = 0
        self.watch_versions: list[str] = []

    async def list_pages(self) -> AsyncIterator[ListPage]:
        self.list_calls += 1
        index = min(self.list_calls - 1, len(self.listings) - 1)
        yield ListPage([dict(o) for o in self.listings[index]], str(100 * self.list_calls))

    async def watch(self, resource_version: str) -> AsyncIterator[WatchEvent]:
        self.watch_versions.append(resource_version)
        script = self.watches.pop(0) if self.watches else []
        for step in script:
            if isinstance(step, Exception):
                raise step
            yield WatchEvent(*step)
        if not self.watches:
            await asyncio.sleep(3600)  # a quiet, open watch


class ScriptedClient:
    """The list/watch seam of the shared reflector, one scripted resource each."""

    def __init__(self, sources: list[ScriptedResource]) -> None:
        self.sources = {s.name: s for s in sources}

    def list_pages(self, resource: str) -> AsyncIterator[ListPage]:
        return self.sources[resource].list_pages()

    def watch(self, resource: str, resource_version: str) -> AsyncIterator[WatchEvent]:
        return self.sources[resource].watch(resource_version)


def static(name: str, items: list[RawObject]) -> ScriptedResource:
    return ScriptedResource(name, [items], [])


async def run_until(state: CatalogStore, condition: Any, timeout: float = 5.0) -> None:
    task = asyncio.create_task(state.run())
    try:
        deadline = asyncio.get_running_loop().time() + timeout
        while not condition():
            if asyncio.get_running_loop().time() > deadline:
                pytest.fail("condition not reached")
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


QUOTA = {
    "kind": "ResourceQuota",
    "metadata": {"name": "gpus", "namespace": "tenant-a"},
    "status": {
        "hard": {"requests.x.com/a": "4", "requests.cpu": "8", "pods": "10"},
        "used": {"requests.x.com/a": "3"},
    },
}


def make_state(classes: ScriptedResource, restarts: list[tuple[str, str]]) -> CatalogStore:
    kubevirt = {
        "kind": "KubeVirt",
        "status": {"phase": "Deployed"},
        "metadata": {"name": "kv", "namespace": "cozy-kubevirt"},
        "spec": {
            "configuration": {
                "permittedHostDevices": {
                    "pciHostDevices": [{"resourceName": "x.com/a"}],
                    "mediatedDevices": [{"resourceName": "x.com/mdev"}],
                }
            }
        },
    }
    client = ScriptedClient(
        [
            classes,
            static("namespaces", [{"metadata": {"name": "tenant-a", "labels": {"l": "v"}}}]),
            static("kubevirts", [kubevirt]),
            static("resourcequotas", [QUOTA]),
        ]
    )
    return CatalogStore(
        client,
        Policy(),
        on_restart=lambda resource, reason: restarts.append((resource, reason)),
    )


def test_not_synced_until_every_resource_listed() -> None:
    state = make_state(ScriptedResource("gpuclasses", [[gpuclass("a", "x.com/a")]], []), [])
    assert state.synced is False
    asyncio.run(run_until(state, lambda: state.synced))
    assert set(state.catalog.offers) == {"a"}
    assert state.catalog.offers["a"].permitted is True
    assert state.catalog.namespaces == {"tenant-a": {"l": "v"}}
    # Every mediated device KubeVirt permits is a vGPU, named by a class or not (contract 4.5).
    assert state.catalog.vgpu_resources == frozenset({"x.com/mdev"})


def test_watch_events_update_the_catalog() -> None:
    source = ScriptedResource(
        "gpuclasses",
        [[gpuclass("a", "x.com/a")]],
        [
            [
                ("ADDED", gpuclass("b", "x.com/b", "101")),
                ("DELETED", gpuclass("a", "x.com/a", "102")),
            ]
        ],
    )
    state = make_state(source, [])
    asyncio.run(run_until(state, lambda: set(state.catalog.offers) == {"b"}))
    added = state.catalog.offers["b"].record  # the ADDED event's object, not a stale copy
    assert added.spec is not None  # a valid class, read from the event
    assert added.resource_name == "x.com/b"


def test_expired_watch_relists_from_scratch() -> None:
    source = ScriptedResource(
        "gpuclasses",
        [[gpuclass("a", "x.com/a")], [gpuclass("c", "x.com/c")]],
        [[("ADDED", gpuclass("b", "x.com/b", "101")), Expired]],
    )
    restarts: list[tuple[str, str]] = []
    state = make_state(source, restarts)
    asyncio.run(run_until(state, lambda: set(state.catalog.offers) == {"c"}))
    assert source.list_calls == 2
    assert ("gpuclasses", "expired") in restarts
    assert source.watch_versions[0] == "100", "the first watch starts at the listed version"


def test_dropped_watch_backs_off_and_relists() -> None:
    source = ScriptedResource(
        "gpuclasses",
        [[gpuclass("a", "x.com/a")], [gpuclass("d", "x.com/d")]],
        [[ConnectionResetError("connection dropped")]],
    )
    restarts: list[tuple[str, str]] = []
    state = make_state(source, restarts)
    asyncio.run(run_until(state, lambda: set(state.catalog.offers) == {"d"}, timeout=60))
    assert ("gpuclasses", "error") in restarts
    assert state.healthy() is False  # the tasks were cancelled by run_until's cleanup


def test_watch_resumes_from_the_last_version_seen() -> None:
    source = ScriptedResource(
        "gpuclasses",
        [[gpuclass("a", "x.com/a")]],
        [
            [("ADDED", gpuclass("b", "x.com/b", "150"))],  # ends normally (server-side timeout)
            [("ADDED", gpuclass("e", "x.com/e", "160"))],
        ],
    )
    state = make_state(source, [])
    asyncio.run(run_until(state, lambda: "e" in state.catalog.offers))
    assert source.watch_versions[:2] == ["100", "150"]
    assert source.list_calls == 1


def test_the_catalog_keeps_what_each_namespace_quota_leaves_of_extended_resources() -> None:
    """VM admission's quota warning reads `requests.<extended resource>` only; CPU and the Pod
    count are not kept."""
    state = make_state(static("gpuclasses", []), [])
    asyncio.run(run_until(state, lambda: state.synced))
    assert state.catalog.quota_left == {"tenant-a": {"requests.x.com/a": 1}}
