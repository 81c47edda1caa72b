"""Faults on a real control plane: the reconciler never releases what a complete view would keep.

`gpuclass-reconciler` runs as a subprocess, as the chart's service account, but
talks to kube-apiserver through :class:`tests.controlplane.faultproxy.FaultProxy`,
which holds chosen lists, cuts watches, and records every request it forwards.
Each test starts from a cluster a previous replica left behind — classes holding
the in-use finalizer for VMIs that use them, a license copy a started VM mounts (its
virt-launcher Pod bound to a node), both copies in the copy record — plus one class
nobody uses and one recorded copy nobody mounts (the deletions a complete view does
make). The faults:

- the first VMI list (then, separately, the first Namespace list) held for 5 s;
- a re-list of VMIs held for 5 s after the watch is cut, while a VMI is deleted;
- kube-apiserver restarted with etcd compacted while it is down (410 on resume).

Each asserts from the proxy's record that nothing was written (first list) or
released (re-list) while the fault lasted, and that the state then converges:
held classes keep the finalizer, mounted copies stay, the unused ones go.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.builders import api_gpuclass, api_licensed_class, api_namespace, api_secret, api_vmi
from tests.controlplane.api import Api, RawObject
from tests.controlplane.cluster import ControlPlane, eventually
from tests.controlplane.faultproxy import Entry, FaultProxy, Rule
from tests.e2e_reconciler_helpers import (
    ENTITLED,
    FAST,
    FINALIZER,
    GPUCLASSES,
    KUBEVIRT_CONTROLLER,
    KUBEVIRT_CONTROLLER_GROUPS,
    KUBEVIRT_NAMESPACE,
    LICENSE_NAMESPACE,
    MANAGED,
    MERGE,
    SERVICE_ACCOUNT,
    SERVICE_ACCOUNT_GROUPS,
    TOKEN_KEY,
    Launchers,
    PermittedDevices,
    ReconcilerProcess,
    apply_chart_rbac,
    copy_digest,
    create_node,
    delete_all,
    delete_created,
    edit_copy_record,
    forget_copies,
    get_class,
    license_sources,
    reconciler_args,
    wait_for_chart_rbac,
)

HOLD = 5.0
SETTLE = 30.0
VMIS = "/apis/kubevirt.io/v1/virtualmachineinstances"
NAMESPACES = "/api/v1/namespaces"


def is_list(path: str) -> object:
    return lambda method, p, query: (
        method == "GET" and p == path and query.get("watch") not in ("true", "1")
    )


@dataclass
class Faulty:
    plane: ControlPlane
    proxy: FaultProxy
    kubeconfig: Path
    tenant: str
    spare: str
    launchers: Launchers
    node: str
    """Where the launcher Pods are bound."""
    source: str
    """The license source every licensed class here names (token-1, never changed)."""
    suffix: str = field(default_factory=lambda: secrets.token_hex(3))
    permitted: PermittedDevices = field(default_factory=PermittedDevices)
    created: list[RawObject] = field(default_factory=list, repr=False)  # holds test tokens

    @property
    def admin(self) -> Api:
        return self.plane.admin

    def create(self, obj: RawObject) -> RawObject:
        stored = self.admin.create(obj)
        self.created.append(stored)
        return stored

    def launch(self, machine: RawObject) -> RawObject:
        """The VMI's virt-launcher Pod, made as KubeVirt's controller makes it, bound."""
        stored = self.launchers.start(self.admin, machine, self.node)
        self.created.append(stored)
        return stored

    def cleanup(self) -> None:
        delete_created(self.admin, self.created)
        forget_copies(self.admin, self.suffix)
        self.permitted.restore(self.admin)
        self.launchers.close()


@dataclass
class LeftBehind:
    """What a previous replica left: names of what must stay and what may go."""

    held: list[str]  # classes a VMI uses (finalizer must stay)
    unused: str  # a class with the finalizer and no VMI (may be released)
    copy: tuple[str, str]  # (namespace, name) of a copy a VMI mounts
    stale_copy: tuple[str, str]  # a copy nothing mounts (may be deleted)
    vmis: dict[str, str]  # class -> VMI name using it


def left_behind(f: Faulty, tag: str) -> LeftBehind:
    base = f"flt-{tag}-{f.suffix}"
    used, licensed, unused = f"{base}-used", f"{base}-lic", f"{base}-unused"
    resources = {
        n: f"flt-{f.suffix}.example.com/{tag}-{n.rsplit('-', 1)[1]}"
        for n in (used, licensed, unused)
    }
    f.permitted.permit(f.admin, resources.values())
    for name in (used, unused):
        f.create(api_gpuclass(name, resources[name]))
    f.create(api_licensed_class(licensed, resources[licensed], f.source))
    for name in (used, licensed, unused):  # as the previous replica wrote them
        f.admin.call(
            "PATCH",
            f"{GPUCLASSES}/{name}",
            body={"metadata": {"finalizers": [FINALIZER]}},
            content_type=MERGE,
        )
    copy_name = f"gpuclass-license-{licensed}"
    copy_data = {TOKEN_KEY: "token-1", "gridd.conf": "FeatureType=1\n"}  # as the copy holds them
    vmis = {
        used: f"{base}-vm-used",
        licensed: f"{base}-vm-lic",
    }
    f.create(api_vmi(vmis[used], f.tenant, classes=[used], devices=[resources[used]]))
    machine = f.create(
        api_vmi(
            vmis[licensed],
            f.tenant,
            classes=[licensed],
            devices=[resources[licensed]],
            license_copy=copy_name,
        )
    )
    f.launch(machine)  # started: its copy stays
    for ns in (f.tenant, f.spare):
        f.create(api_secret(copy_name, ns, copy_data, labels=MANAGED))
    digest = copy_digest(copy_data)  # recorded as the previous replica wrote them
    edit_copy_record(
        f.admin,
        lambda entries: {**entries, **{f"{ns}/{copy_name}": digest for ns in (f.tenant, f.spare)}},
    )
    return LeftBehind(
        held=[used, licensed],
        unused=unused,
        copy=(f.tenant, copy_name),
        stale_copy=(f.spare, copy_name),
        vmis=vmis,
    )


def finalizers(api: Api, name: str) -> list[str]:
    obj = get_class(api, name)
    return list((obj or {}).get("metadata", {}).get("finalizers") or [])


def copy_exists(api: Api, where: tuple[str, str]) -> bool:
    return api.get("v1", "Secret", where[1], namespace=where[0]) is not None


def converged(f: Faulty, world: LeftBehind) -> None:
    """A complete view's outcome: held classes and the mounted copy stay, the unused go."""
    admin = f.admin
    eventually(
        lambda: finalizers(admin, world.unused) == [],
        timeout=SETTLE,
        what="the unused class released",
    )
    eventually(
        lambda: not copy_exists(admin, world.stale_copy),
        timeout=SETTLE,
        what="the copy nothing mounts deleted",
    )
    for name in world.held:
        assert finalizers(admin, name) == [FINALIZER], name
        status = (get_class(admin, name) or {}).get("status") or {}
        assert "free" in status, f"{name} has no status yet"
    assert copy_exists(admin, world.copy)


def about(world: LeftBehind, entries: list[Entry]) -> list[str]:
    """The recorded writes that touch this test's objects."""
    names = [*world.held, world.unused, world.copy[1]]
    return [str(e) for e in entries if any(n in e.path for n in names)]


@pytest.fixture(scope="module")
def faulty(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Faulty]:
    admin = control_plane.admin
    suffix = secrets.token_hex(3)
    tenant, spare = f"tenant-flt{suffix}", f"tenant-fltb{suffix}"
    mine = [api_namespace(tenant, ENTITLED), api_namespace(spare, ENTITLED)]
    admin.apply([api_namespace(n) for n in (LICENSE_NAMESPACE, KUBEVIRT_NAMESPACE)])
    admin.apply(mine)
    added_rbac = apply_chart_rbac(admin)
    launchers = Launchers(control_plane.user(KUBEVIRT_CONTROLLER, list(KUBEVIRT_CONTROLLER_GROUPS)))
    added_rbac += launchers.grant(admin)
    user = control_plane.user(SERVICE_ACCOUNT, list(SERVICE_ACCOUNT_GROUPS))
    with user.api() as as_reconciler:
        wait_for_chart_rbac(as_reconciler)
    proxy = FaultProxy(
        upstream=control_plane.server,
        ca_file=control_plane.ca_file,
        cert_file=user.cert_file,
        key_file=user.key_file,
        serving=control_plane.serving_cert("fault-proxy"),
    ).start()
    kubeconfig = proxy.kubeconfig(user.kubeconfig, tmp_path_factory.mktemp("faults") / "kubeconfig")
    node = f"flt-node-{suffix}"
    source = next(license_sources(5, 1))  # test_e2e_reconciler.py takes the first five
    f = Faulty(control_plane, proxy, kubeconfig, tenant, spare, launchers, node, source, suffix)
    try:
        f.created.append(create_node(admin, node, {}))
        f.create(api_secret(source, LICENSE_NAMESPACE, {TOKEN_KEY: "token-1"}))
        yield f
    finally:
        proxy.stop()
        admin = control_plane.admin
        f.cleanup()
        delete_all(admin, added_rbac)
        delete_all(admin, mine)


@contextlib.contextmanager
def replica(f: Faulty, name: str) -> Iterator[ReconcilerProcess]:
    process = ReconcilerProcess(
        f.kubeconfig, pod_name=f"{name}-{f.suffix}", timings=FAST, args=reconciler_args()
    )
    try:
        yield process
    finally:
        process.stop()


@pytest.mark.parametrize(("source", "path"), [("vmis", VMIS), ("namespaces", NAMESPACES)])
def test_a_slow_first_list_writes_nothing_until_it_arrives(
    faulty: Faulty, source: str, path: str
) -> None:
    world = left_behind(faulty, f"first-{source[:3]}")
    rule = faulty.proxy.add(Rule(is_list(path), hold=HOLD))  # type: ignore[arg-type]
    started = time.monotonic()
    with replica(faulty, f"flt-first-{source[:3]}") as process:
        assert not process.ready()  # serving, but the view is not complete
        assert process.metric("gpuclass_source_synced", resource=source) == 0
        arrived = eventually(
            lambda: faulty.proxy.forwarded(is_list(path), since=started) or None,  # type: ignore[arg-type]
            timeout=HOLD * 4,
            what=f"the held {source} list forwarded",
        )
        released = arrived[0].at
        during = faulty.proxy.writes(started, released)
        assert rule.used == 1 and released - started >= HOLD - 0.5
        assert during == [], [str(e) for e in during]
        converged(faulty, world)
        after = about(world, faulty.proxy.writes(released))
        assert not [w for w in after if world.copy[0] in w and "DELETE" in w], after
        print(
            f"\n[{source} first list held {released - started:.1f}s] written meanwhile: "
            f"{[str(e) for e in during]}; afterwards: {after}"
        )


def test_a_held_relist_releases_nothing_until_it_completes(faulty: Faulty) -> None:
    world = left_behind(faulty, "relist")
    with replica(faulty, "flt-relist") as process:
        eventually(process.ready, timeout=60, what="/readyz")
        converged(faulty, world)
        # the licensed VMI goes while the VMI view is re-listing: only the new list shows it
        rule = faulty.proxy.add(Rule(is_list(VMIS), hold=HOLD))  # type: ignore[arg-type]
        cut_at = time.monotonic()
        assert faulty.proxy.break_watches(lambda p: p == VMIS) >= 1
        licensed = world.held[1]
        faulty.admin.delete(
            {
                "apiVersion": "kubevirt.io/v1",
                "kind": "VirtualMachineInstance",
                "metadata": {"name": world.vmis[licensed], "namespace": faulty.tenant},
            }
        )
        time.sleep(HOLD / 2)  # mid-fault: the VMI view is re-listing, nothing is released
        assert process.metric("gpuclass_source_synced", resource="vmis") == 0
        assert finalizers(faulty.admin, licensed) == [FINALIZER]
        assert copy_exists(faulty.admin, world.copy)
        arrived = eventually(
            lambda: faulty.proxy.forwarded(is_list(VMIS), since=cut_at) or None,  # type: ignore[arg-type]
            timeout=HOLD * 4,
            what="the held VMI re-list forwarded",
        )
        released = arrived[0].at
        during = [e for e in faulty.proxy.writes(cut_at, released) if e.deletion]
        assert rule.used == 1
        assert during == [], [str(e) for e in during]
        # once the list is in, the deletion a complete view makes happens
        eventually(
            lambda: finalizers(faulty.admin, licensed) == [],
            timeout=SETTLE,
            what="the class released after its VMI went",
        )
        eventually(
            lambda: not copy_exists(faulty.admin, world.copy),
            timeout=SETTLE,
            what="the copy deleted after its VMI went",
        )
        assert finalizers(faulty.admin, world.held[0]) == [FINALIZER]
        print(
            f"\n[VMI re-list held {released - cut_at:.1f}s, a VMI deleted meanwhile] "
            f"released meanwhile: {[str(e) for e in during]}; afterwards: "
            f"{about(world, faulty.proxy.writes(released))}"
        )


def test_an_api_server_restart_with_compacted_history_releases_nothing(
    faulty: Faulty, control_plane: ControlPlane
) -> None:
    world = left_behind(faulty, "restart")
    with replica(faulty, "flt-restart") as process:
        eventually(process.ready, timeout=60, what="/readyz")
        converged(faulty, world)
        before = time.monotonic()
        compacted: list[int] = []
        faulty.proxy.outage = True  # watches end as if timed out and resume across the restart
        try:
            control_plane.restart_apiserver(
                while_down=lambda: compacted.append(control_plane.compact_etcd())
            )
        finally:
            faulty.proxy.outage = False
        eventually(process.ready, timeout=60, what="/readyz after the restart")
        time.sleep(3)  # time for anything wrong to be written
        released = [
            e
            for e in faulty.proxy.writes(before)
            if e.deletion and any(n in e.path for n in [*world.held, world.copy[1]])
        ]
        assert released == [], [str(e) for e in released]
        assert [finalizers(faulty.admin, n) for n in world.held] == [[FINALIZER]] * 2
        assert copy_exists(faulty.admin, world.copy)
        relists = [
            line for line in process.lines if "re-listing" in line or "list/watch failed" in line
        ]
        gone = [line for line in relists if "410" in line]
        assert gone, process.tail()  # the resumed watches met the compacted history
        print(
            f"\n[kube-apiserver restarted, etcd compacted to {compacted}] re-lists: "
            f"{len(relists)} (410 Gone: {len(gone)}); released: {released}"
        )


def test_a_leader_killed_between_a_status_write_and_a_copy_write_is_caught_up(
    faulty: Faulty,
) -> None:
    """kill -9 while its copy create is in flight (held by the proxy, never delivered): the next
    leader writes the missing copy and releases nothing."""
    world = left_behind(faulty, "kill")
    base = f"flt-kill-{faulty.suffix}"
    late, resource = f"{base}-late", f"flt-{faulty.suffix}.example.com/kill-late"
    copy = (faulty.spare, f"gpuclass-license-{late}")
    first = ReconcilerProcess(
        faulty.kubeconfig, pod_name=f"{base}-a", timings=FAST, args=reconciler_args()
    )
    second: ReconcilerProcess | None = None
    try:
        eventually(first.ready, timeout=60, what="/readyz")
        converged(faulty, world)
        held = faulty.proxy.add(
            Rule(
                lambda m, p, q: m == "POST" and p == f"/api/v1/namespaces/{copy[0]}/secrets",
                hold=8.0,
                status=503,  # answered by the proxy: the create never reaches the API server
            )
        )
        faulty.permitted.permit(faulty.admin, [resource])
        faulty.launch(
            faulty.create(
                api_vmi(
                    f"{base}-vm", copy[0], classes=[late], devices=[resource], license_copy=copy[1]
                )
            )
        )
        faulty.create(api_licensed_class(late, resource, faulty.source))
        eventually(lambda: held.used == 1 or None, timeout=SETTLE, what="the copy create in flight")
        status_first = (get_class(faulty.admin, late) or {}).get("status") or {}
        assert "free" in status_first, "the status is written before the copy"
        first.kill()
        killed_at = time.monotonic()
        assert not copy_exists(faulty.admin, copy)
        second = ReconcilerProcess(
            faulty.kubeconfig, pod_name=f"{base}-b", timings=FAST, args=reconciler_args()
        )
        eventually(
            lambda: copy_exists(faulty.admin, copy), timeout=SETTLE, what="the copy caught up"
        )
        assert finalizers(faulty.admin, late) == [FINALIZER]
        for name in world.held:
            assert finalizers(faulty.admin, name) == [FINALIZER]
        assert copy_exists(faulty.admin, world.copy)
        released = [e for e in faulty.proxy.writes(killed_at) if e.deletion]
        assert released == [], [str(e) for e in released]
        print(
            f"\n[leader killed with its copy create in flight] the next leader wrote: "
            f"{[str(e) for e in faulty.proxy.writes(killed_at) if late in e.path or copy[0] in e.path]}"
            f"; released: {released}"
        )
    finally:
        first.kill() if first.alive else None
        if second is not None:
            second.stop()
