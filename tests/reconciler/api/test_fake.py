"""One script of requests through the reconciler's `KubeAPI`, against the fake and the real server.

`reconciler/api/fake.py` is the offline twin and the unit tests' API server; this test
keeps it honest. The same script — creates, stale-resourceVersion updates (409),
deletion of a class held by a finalizer, license copies written as the reconciler
writes them (create, a label-tested JSON patch, delete), every refusal of the chart's
license-copy ValidatingAdmissionPolicy, the copy record ConfigMap (create, replace
pinned to its resourceVersion), 404, and a watch from a compacted resourceVersion
(410) — runs through :class:`reconciler.api.port.KubeAPI` twice: against `MemoryKube`,
and against a real kube-apiserver as the reconciler's service account with the
chart's RBAC and policy applied. Each step's expected outcome is Kubernetes' (API
conventions, docs/contract.md section 6 for the copies), written here; both runs
must produce it, step by step.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from gpuclass.reconciler.api.fake import MemoryKube
from gpuclass.reconciler.api.port import ApiError, KubeAPI, RawObject
from gpuclass.reconciler.state.licenses import DesiredCopy, copy_patch
from gpuclass.shared.core.model.secrets import Redacted
from tests.builders import STORED_STATUS as STATUS
from tests.builders import api_gpuclass, api_namespace
from tests.controlplane.cluster import ControlPlane, eventually, unique_name
from tests.e2e_reconciler_helpers import (
    COPY_RECORD,
    FINALIZER,
    KUBEVIRT_NAMESPACE,
    LICENSE_NAMESPACE,
    MANAGED,
    RELEASE_NAMESPACE,
    SERVICE_ACCOUNT,
    SERVICE_ACCOUNT_GROUPS,
    TOKEN_KEY,
    apply_chart_rbac,
    delete_all,
    delete_created,
    wait_for_chart_rbac,
)

COPY_KEYS = {TOKEN_KEY: "dG9rZW4=", "gridd.conf": "RmVhdHVyZVR5cGU9MQo="}
# Step by step: what Kubernetes answers (the API conventions; the copy policy of the chart).
EXPECTED = [
    ("get the class", "ok"),
    ("status patch at the current resourceVersion", "ok"),
    ("status patch at a stale resourceVersion", "409"),
    ("finalizer patch at a stale resourceVersion", "409"),
    ("get a class that does not exist", "404"),
    ("status patch of a class that does not exist", "404"),
    ("create a license copy", "ok"),
    ("create it again", "409"),
    ("patch it with another content (its label tested)", "ok"),
    ("an unchanged patch keeps the resourceVersion", "kept"),
    ("patch a copy that does not exist", "404"),
    ("refused: a name outside gpuclass-license-*", "403"),
    ("refused: without the managed-by label", "403"),
    ("refused: a type other than Opaque", "403"),
    ("refused: a third key", "403"),
    ("refused: one key only", "403"),
    ("refused: stringData", "403"),
    ("refused: a foreign annotation", "403"),
    ("refused by the patch's label test: a Secret that is not labelled ours", "422"),
    ("refused: deleting a Secret that is not labelled ours", "403"),
    ("delete the copy", "ok"),
    ("delete it again", "404"),
    ("create a copy in a namespace that does not exist", "404"),
    ("patch a copy in a namespace that does not exist", "404"),
    ("replace the copy record before it exists", "404"),
    ("create the copy record", "ok"),
    ("create it again", "409"),
    ("replace it at a stale resourceVersion", "409"),
    ("replace it at the current resourceVersion", "ok"),
    ("an unchanged replace keeps the resourceVersion", "kept"),
    ("the class deleted by a user while held", "deleting"),
    ("refused: a new finalizer on a deleting class", "422"),
    ("release the last finalizer", "deleting"),  # 200: the object as it was when released
    ("the class is gone", "404"),
    ("watch from a compacted resourceVersion", "410"),
]


@dataclass
class Backend:
    """What the script needs besides the KubeAPI: another client's writes, and compaction."""

    connect: Callable[[], Awaitable[KubeAPI]]
    create: Callable[[RawObject], RawObject]
    delete: Callable[[RawObject], None]
    compact: Callable[[], None]
    forget_record: Callable[[], None]
    """Remove the copy record, if any: the script creates it (no reconciler runs meanwhile)."""


def secret(
    ns: str,
    name: str,
    *,
    labels: dict[str, str] | None = MANAGED,
    kind: str = "Opaque",
    data: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    resource_version: str = "",
    string_data: dict[str, str] | None = None,
) -> RawObject:
    meta: RawObject = {"name": name, "namespace": ns}
    if labels is not None:
        meta["labels"] = dict(labels)
    if annotations is not None:
        meta["annotations"] = annotations
    if resource_version:
        meta["resourceVersion"] = resource_version
    body: RawObject = {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "type": kind}
    body["data"] = dict(COPY_KEYS if data is None else data)
    if string_data is not None:
        body["stringData"] = string_data
    return body


def patch_of(ns: str, name: str, data: dict[str, str] | None = None) -> list[RawObject]:
    """The label-tested patch the reconciler sends to update a copy (reconciler.state.licenses.copy_patch)."""
    content = {k: Redacted(v) for k, v in (COPY_KEYS if data is None else data).items()}
    return copy_patch(DesiredCopy(ns, name, name.removeprefix("gpuclass-license-"), content))


async def outcome(call: Awaitable[Any]) -> str:
    try:
        result = await call
    except ApiError as exc:
        return str(exc.status)
    meta = result.get("metadata", {}) if isinstance(result, dict) else {}
    return "deleting" if meta.get("deletionTimestamp") else "ok"


def version(obj: RawObject | None) -> str:
    assert obj is not None
    return str(obj["metadata"]["resourceVersion"])


def record(entries: str, resource_version: str = "") -> RawObject:
    """The copy record ConfigMap as the reconciler writes it (reconciler.state.licenses.record_body)."""
    meta: RawObject = {"name": COPY_RECORD, "namespace": RELEASE_NAMESPACE, "labels": MANAGED}
    if resource_version:
        meta["resourceVersion"] = resource_version
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta,
        "data": {"copies.json": entries},
    }


async def script(backend: Backend, ns: str, suffix: str) -> list[tuple[str, str]]:
    """Run every step; returns (step, outcome) in order."""
    name, copy = f"contract-{suffix}", f"gpuclass-license-contract-{suffix}"
    held = api_gpuclass(name, f"contract-{suffix}.example.com/gpu")
    held["metadata"]["finalizers"] = [FINALIZER]
    backend.create(held)
    foreign = backend.create(secret(ns, f"gpuclass-license-foreign-{suffix}", labels=None))
    api = await backend.connect()
    seen: list[tuple[str, str]] = []
    steps = iter(EXPECTED)

    async def step(call: Awaitable[Any]) -> None:
        seen.append((next(steps)[0], await outcome(call)))

    try:
        first = await api.get_class(name)
        await step(api.get_class(name))
        fresh = {"metadata": {"resourceVersion": version(first)}, "status": STATUS}
        await step(api.patch_class_status(name, fresh))
        await step(api.patch_class_status(name, fresh))
        await step(api.patch_class_finalizers(name, [], resource_version=version(first)))
        await step(api.get_class(f"{name}-absent"))
        await step(api.patch_class_status(f"{name}-absent", {"status": STATUS}))

        await step(api.create_secret(ns, secret(ns, copy)))
        await step(api.create_secret(ns, secret(ns, copy)))
        changed = {**COPY_KEYS, "gridd.conf": "RmVhdHVyZVR5cGU9Mgo="}
        applied = await api.patch_secret(ns, copy, patch=patch_of(ns, copy, changed))
        seen.append((next(steps)[0], "ok"))
        again = await api.patch_secret(ns, copy, patch=patch_of(ns, copy, changed))
        seen.append((next(steps)[0], "kept" if version(again) == version(applied) else "moved"))
        await step(api.patch_secret(ns, f"{copy}-absent", patch=patch_of(ns, f"{copy}-absent")))
        for refused in (
            secret(ns, f"other-{suffix}"),
            secret(ns, f"{copy}-x", labels={}),
            secret(ns, f"{copy}-x", kind="example.com/other"),
            secret(ns, f"{copy}-x", data={**COPY_KEYS, "extra": "eA=="}),
            secret(ns, f"{copy}-x", data={TOKEN_KEY: COPY_KEYS[TOKEN_KEY]}),
            secret(ns, f"{copy}-x", string_data={"extra": "x"}),
            secret(ns, f"{copy}-x", annotations={"kubernetes.io/service-account.name": "default"}),
        ):
            await step(api.create_secret(ns, refused))
        theirs = foreign["metadata"]["name"]
        await step(api.patch_secret(ns, theirs, patch=patch_of(ns, theirs)))
        await step(api.delete_secret(ns, theirs))
        await step(api.delete_secret(ns, copy))
        await step(api.delete_secret(ns, copy))
        await step(api.create_secret(f"{ns}-absent", secret(f"{ns}-absent", copy)))
        await step(api.patch_secret(f"{ns}-absent", copy, patch=patch_of(f"{ns}-absent", copy)))

        backend.forget_record()
        entries = f'{{"{ns}/{copy}": ""}}'
        await step(api.replace_config_map(RELEASE_NAMESPACE, COPY_RECORD, body=record(entries)))
        first_record = await api.create_config_map(RELEASE_NAMESPACE, record(entries))
        seen.append((next(steps)[0], "ok"))
        await step(api.create_config_map(RELEASE_NAMESPACE, record(entries)))
        stale_record = record("{}", str(int(version(first_record)) - 1))
        await step(api.replace_config_map(RELEASE_NAMESPACE, COPY_RECORD, body=stale_record))
        emptied = await api.replace_config_map(
            RELEASE_NAMESPACE, COPY_RECORD, body=record("{}", version(first_record))
        )
        seen.append((next(steps)[0], "ok"))
        unchanged = await api.replace_config_map(
            RELEASE_NAMESPACE, COPY_RECORD, body=record("{}", version(emptied))
        )
        seen.append((next(steps)[0], "kept" if version(unchanged) == version(emptied) else "moved"))
        backend.forget_record()

        backend.delete(held)
        deleting = await api.get_class(name)
        await step(api.get_class(name))
        await step(
            api.patch_class_finalizers(
                name, [FINALIZER, "x.example/y"], resource_version=version(deleting)
            )
        )
        await step(api.patch_class_finalizers(name, [], resource_version=version(deleting)))
        await step(api.get_class(name))
    finally:
        await api.close()

    backend.compact()
    api = await backend.connect()
    try:
        await step(_first_event(api, version(first)))
    finally:
        await api.close()
    return seen


async def _first_event(api: KubeAPI, since: str) -> object:
    """The watch's first event; a 429 (a server still starting after a restart) is retried,
    as every client retries it, up to 30 times."""
    for _ in range(30):
        try:
            async for event in api.watch("gpuclasses", since):
                return event
            return None
        except ApiError as exc:
            if exc.status != 429:
                raise
            await asyncio.sleep(1)
    raise AssertionError("the API server kept answering 429")


def test_the_fake_answers_as_kubernetes_does() -> None:
    suffix = unique_name("m").split("-")[-1]
    ns = f"tenant-contract-{suffix}"  # license copies live in tenant namespaces only
    kube = MemoryKube([api_namespace(ns), api_namespace(LICENSE_NAMESPACE)])

    async def connect() -> KubeAPI:
        return kube

    def forget_record() -> None:
        kube.remove("ConfigMap", RELEASE_NAMESPACE, name=COPY_RECORD)

    backend = Backend(
        connect,
        kube.apply,
        lambda o: kube.remove(o["kind"], _ref(o)[0], name=_ref(o)[1]),
        kube.compact,
        forget_record,
    )
    assert asyncio.run(script(backend, ns, suffix)) == EXPECTED


def _ref(obj: RawObject) -> tuple[str, str]:
    meta = obj["metadata"]
    return meta.get("namespace", ""), meta["name"]


@pytest.fixture(scope="module")
def as_reconciler(control_plane: ControlPlane) -> Iterator[tuple[ControlPlane, Any]]:
    """The reconciler's service account with the chart's RBAC and license-copy policy in force."""
    user = control_plane.user(SERVICE_ACCOUNT, list(SERVICE_ACCOUNT_GROUPS))
    admin = control_plane.admin
    admin.apply([api_namespace(n) for n in (LICENSE_NAMESPACE, KUBEVIRT_NAMESPACE)])
    added = apply_chart_rbac(admin)
    probe = secret(LICENSE_NAMESPACE, f"not-a-copy-{unique_name('p').split('-')[-1]}")
    try:
        with user.api() as api:
            wait_for_chart_rbac(api)
            eventually(
                lambda: "gpuclass-licence-copies" in _dry_run_create(api, probe),
                timeout=30,
                what="the chart's Secret policy in effect",
            )
        yield control_plane, user
    finally:
        delete_all(control_plane.admin, added)


def _dry_run_create(api: Any, body: RawObject) -> str:
    path = f"/api/v1/namespaces/{body['metadata']['namespace']}/secrets"
    return str(api.request("POST", path, body=body, params={"dryRun": "All"}).text)


@pytest.mark.controlplane
def test_the_real_api_server_answers_the_same(as_reconciler: tuple[ControlPlane, Any]) -> None:
    from gpuclass.reconciler.api.client import KubeAdapter
    from gpuclass.reconciler.settings import ReconcilerSettings

    control_plane, user = as_reconciler
    suffix = unique_name("r").split("-")[-1]
    ns = f"tenant-contract-{suffix}"  # license copies live in tenant namespaces only
    made: list[RawObject] = [api_namespace(ns)]
    control_plane.admin.apply(made)
    settings = ReconcilerSettings(kubeconfig=str(user.kubeconfig), vgpu_entitled=True)

    def create(obj: RawObject) -> RawObject:
        made.append(control_plane.admin.create(obj))
        return made[-1]

    def delete(obj: RawObject) -> None:
        control_plane.admin.delete(obj)

    def compact() -> None:  # a restart drops the watch cache; its new window starts after
        control_plane.restart_apiserver(
            while_down=lambda: print(f"compacted to {control_plane.compact_etcd()}")
        )

    def forget_record() -> None:
        control_plane.admin.request(
            "DELETE", f"/api/v1/namespaces/{RELEASE_NAMESPACE}/configmaps/{COPY_RECORD}"
        )

    backend = Backend(lambda: KubeAdapter.connect(settings), create, delete, compact, forget_record)
    try:
        assert asyncio.run(script(backend, ns, suffix)) == EXPECTED
    finally:
        delete_created(control_plane.admin, made)
