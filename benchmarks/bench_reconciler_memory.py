"""The reconciler's memory when a tenant floods its namespace with Secrets labelled as ours.

A tenant may label its own Secrets `app.kubernetes.io/managed-by=gpuclass`. A reconciler
that listed and watched every Secret with that label kept each one's data; it now reads
no Secret but the license sources, by name (docs/decisions.md, "License copies"), so the
flood should not show in its memory at all.

Starts etcd + kube-apiserver (the test control plane) and a small cluster: 4 classes (one
licensed, with its source Secret in cozy-system), 4 GPU nodes, an entitled tenant with a
started licensed VMI (its virt-launcher Pod bound to a node), so the reconciler writes
statuses, a finalizer and a license copy. `gpuclass-reconciler` runs as a subprocess with
the chart's arguments (`--license-secret-names`, production timings) and, like every
other benchmark here, as an administrator: what it holds is what it asks for, whatever
RBAC would allow. Memory is read from `/proc/<pid>/status`: VmRSS (resident now) and
VmHWM (the peak since the process started).

1. Baseline: a fresh start; once ready and the copy written, `BENCH_SETTLE` seconds
   (default 5) of steady state, then VmRSS and VmHWM.
2. Flood: `BENCH_FLOOD` Secrets (default 100) of ~1 MiB of random data each, labelled
   as ours, in a second tenant namespace, while the same process runs; after the
   settle time, its VmRSS again. A new class must then still get its status (the
   process kept working).
3. Fresh start with the flood present: a new process lists everything; VmRSS and
   VmHWM once it is ready and has settled.

Prints the figures and the ratios flood/baseline: goal about 1.0 (the flood never
enters the process). With `BENCH_BEFORE=<git ref>` (e.g. the commit before the change)
the same three steps also run that checkout's reconciler (exported with `git archive`,
run by this interpreter) on the same cluster, for the "before" figures.

Not run by pytest; prints its figures. `.venv/bin/python benchmarks/bench_reconciler_memory.py`
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.builders import api_gpuclass, api_licensed_class, api_namespace, api_secret, api_vmi  # noqa: E402
from tests.controlplane.api import Api  # noqa: E402
from tests.controlplane.cluster import ControlPlane, eventually, find_assets  # noqa: E402
from tests.controlplane.plugin import GPUCLASS_CRD, KUBEVIRT_CRDS  # noqa: E402
from tests.e2e_reconciler_helpers import (  # noqa: E402
    ENTITLED,
    KUBEVIRT_NAMESPACE,
    LICENSE_NAMESPACE,
    MANAGED,
    PRODUCTION,
    TOKEN_KEY,
    PermittedDevices,
    ReconcilerProcess,
    create_node,
    get_class,
    launcher_pod,
)

FLOOD = int(os.environ.get("BENCH_FLOOD", "100"))
FLOOD_BYTES = 1_000_000  # about the most a Secret's data may hold (1 MiB)
SETTLE = float(os.environ.get("BENCH_SETTLE", "5"))
BEFORE = os.environ.get("BENCH_BEFORE", "")
CLASSES = 4
SOURCE = "bench-license"
TENANT, FLOODED = "tenant-bench", "tenant-flood"
LICENSED = "bench-licensed"
COPY = f"gpuclass-license-{LICENSED}"


def resource(index: int) -> str:
    return f"bench.example.com/gpu-{index}"


@dataclass(frozen=True)
class Memory:
    rss: float
    """VmRSS, MiB."""
    peak: float
    """VmHWM, MiB."""


def memory(pid: int) -> Memory:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024  # kB -> MiB
    return Memory(fields["VmRSS"], fields["VmHWM"])


@dataclass(frozen=True)
class Code:
    """Which reconciler to run: this checkout's console script, or another checkout's."""

    label: str
    args: tuple[str, ...]
    command: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()

    def start(self, plane: ControlPlane, name: str) -> ReconcilerProcess:
        return ReconcilerProcess(
            plane.admin_kubeconfig,
            pod_name=name,
            timings=PRODUCTION,
            args=self.args,
            command=self.command,
            env=dict(self.env),
            start_timeout=60,
        )


CURRENT = Code(
    "this checkout",
    (
        "--vgpu-entitled",
        "--no-leader-elect",
        f"--license-namespace={LICENSE_NAMESPACE}",
        f"--license-secret-names={SOURCE}",
    ),
)


def checkout(ref: str, folder: Path) -> Code:
    """`ref`'s tree exported into `folder`, importable as `gpuclass` (a namespace package
    whose subpackages link to the top-level folders, as pyproject.toml maps them)."""
    tree = folder / "tree"
    tree.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref, "shared", "reconciler", "webhook"],
        capture_output=True,
        check=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    package = folder / "path" / "gpuclass"
    package.mkdir(parents=True)
    for part in ("shared", "reconciler", "webhook"):
        (package / part).symlink_to(tree / part)
    run = "import sys; from gpuclass.reconciler.main import main; sys.exit(main())"
    return Code(
        f"{ref} (before)",
        ("--vgpu-entitled", "--no-leader-elect", f"--license-namespace={LICENSE_NAMESPACE}"),
        command=(sys.executable, "-c", run),
        env=(("PYTHONPATH", str(folder / "path")),),
    )


def setup(api: Api) -> None:
    api.apply([api_namespace(n) for n in (LICENSE_NAMESPACE, KUBEVIRT_NAMESPACE)])
    api.apply([api_namespace(TENANT, ENTITLED), api_namespace(FLOODED, ENTITLED)])
    PermittedDevices().permit(api, [resource(i) for i in range(CLASSES)])
    api.create(api_secret(SOURCE, LICENSE_NAMESPACE, {TOKEN_KEY: "bench-token"}))
    for i in range(CLASSES - 1):
        api.create(api_gpuclass(f"bench-{i}", resource(i)))
        create_node(api, f"bench-node-{i}", {resource(i): 8})
    api.create(api_licensed_class(LICENSED, resource(CLASSES - 1), SOURCE))
    create_node(api, "bench-node-vgpu", {resource(CLASSES - 1): 4})
    machine = api.create(
        api_vmi(
            "bench-vm",
            TENANT,
            classes=[LICENSED],
            devices=[resource(CLASSES - 1)],
            license_copy=COPY,
        )
    )
    launcher = api.create(launcher_pod(machine))
    meta = launcher["metadata"]
    api.call(
        "POST",
        f"/api/v1/namespaces/{TENANT}/pods/{meta['name']}/binding",
        body={
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": meta["name"], "namespace": TENANT},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "bench-node-vgpu"},
        },
    )


def flood(api: Api) -> float:
    """The tenant's labelled Secrets; returns the seconds they took to create."""
    started = time.monotonic()
    for index in range(FLOOD):
        body = api_secret(f"flood-{index:03d}", FLOODED, {}, labels=MANAGED)
        body["data"] = {"blob": base64.b64encode(os.urandom(FLOOD_BYTES * 3 // 4)).decode()}
        api.create(body)
    return time.monotonic() - started


def unflood(api: Api) -> None:
    for index in range(FLOOD):
        api.request("DELETE", f"/api/v1/namespaces/{FLOODED}/secrets/flood-{index:03d}")


def ready(api: Api, process: ReconcilerProcess) -> None:
    """Ready, and the license copy written: the process has done its first full pass."""
    try:
        eventually(process.ready, timeout=120, what=f"{process.pod_name} /readyz")
        eventually(
            lambda: api.get("v1", "Secret", COPY, namespace=TENANT),
            timeout=60,
            what="the license copy",
        )
    except TimeoutError as exc:
        raise SystemExit(f"{exc}; its log ends:\n{process.tail()}") from None
    time.sleep(SETTLE)


def still_works(api: Api, tag: str) -> float:
    """A new class gets its status: seconds it took."""
    name = f"bench-control-{tag}"
    started = time.monotonic()
    api.create(api_gpuclass(name, resource(0)))
    eventually(
        lambda: "free" in ((get_class(api, name) or {}).get("status") or {}),
        timeout=60,
        what=f"{name}'s status",
    )
    elapsed = time.monotonic() - started
    api.delete(api_gpuclass(name, resource(0)))
    return elapsed


def measure(plane: ControlPlane, code: Code, tag: str) -> tuple[Memory, Memory, Memory]:
    """(baseline, same process after the flood, fresh start with the flood), printed."""
    api = plane.admin
    first = code.start(plane, f"bench-{tag}-a")
    try:
        ready(api, first)
        baseline = memory(first.proc.pid)
        print(
            f"[{code.label}] baseline, fresh start, steady: VmRSS {baseline.rss:.0f} MiB, "
            f"VmHWM {baseline.peak:.0f} MiB"
        )
        took = flood(api)
        time.sleep(SETTLE)
        flooded = memory(first.proc.pid)
        control = still_works(api, tag)
        print(
            f"[{code.label}] after {FLOOD} labelled Secrets of ~1 MiB in {FLOODED} "
            f"(created in {took:.1f} s), same process, steady: VmRSS {flooded.rss:.0f} MiB "
            f"(x{flooded.rss / baseline.rss:.2f}), VmHWM {flooded.peak:.0f} MiB "
            f"(x{flooded.peak / baseline.peak:.2f}); a new class got its status in "
            f"{control * 1000:.0f} ms"
        )
    finally:
        first.stop()
    second = code.start(plane, f"bench-{tag}-b")
    try:
        ready(api, second)
        fresh = memory(second.proc.pid)
        print(
            f"[{code.label}] fresh start with the flood present, steady: VmRSS "
            f"{fresh.rss:.0f} MiB (x{fresh.rss / baseline.rss:.2f} of baseline), VmHWM "
            f"{fresh.peak:.0f} MiB (x{fresh.peak / baseline.peak:.2f})   (goal about x1.0)"
        )
    finally:
        second.stop()
    unflood(api)
    return baseline, flooded, fresh


def main() -> int:
    codes = [CURRENT]
    scratch = Path(tempfile.mkdtemp(prefix="gpuclass-bench-before-"))
    try:
        if BEFORE:
            codes.append(checkout(BEFORE, scratch))
        with ControlPlane(find_assets()) as plane:
            plane.install_crds([GPUCLASS_CRD, *KUBEVIRT_CRDS])
            setup(plane.admin)
            print(
                f"cluster: {CLASSES} classes (one licensed, its copy in {TENANT}), "
                f"{CLASSES} GPU nodes; flood {FLOOD} Secrets x ~1 MiB; settle {SETTLE:.0f} s"
            )
            results = [measure(plane, code, str(i)) for i, code in enumerate(codes)]
        worst = max(max(f.rss, r.rss) / b.rss for b, f, r in results[:1])
        print(f"flood/baseline RSS, this checkout: x{worst:.2f} (goal about 1.0)")
        return 0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
