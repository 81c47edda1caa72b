"""`gpuclass status` on a large cluster file against plainly loading the same JSON.

Generates one JSON file (`kind: List`) in a temporary folder: 5,000 nodes,
150,000 pods, 64 classes (plus the KubeVirt CR, tenant namespaces and license
Secrets), shaped like `kubectl get -o json` output. Then, in the same run and the
same way (each in a fresh subprocess, wall time around it, peak memory from the
child's own rusage via os.wait4), it measures

  (a) the baseline: `orjson.loads(path.read_bytes())` and nothing else;
  (b) `gpuclass status --objects FILE` (the installed console script);
  (c) with BENCH_BEFORE=<git ref>: the same command from that ref's tree (exported with
      `git archive`, run by this interpreter), for before/after figures from one run;
  and, for context, (a) with Python's cyclic garbage collector off (the loader parses
  without it: docs/decisions.md, "Loading without the cyclic collector").

It alternates them for BENCH_ROUNDS rounds (default 3) and reports medians.
Goals (issue 24): time ratio (b)/(a) <= 1.0x, peak-memory ratio (b)/(a) <= 1.2x.

Run: `.venv/bin/python benchmarks/bench_status.py` (needs ~3 GB of free memory).
The generator is `generate_cluster()` below; `benchmarks/gencluster.py`, when it
offers the same function, is used instead so both benchmarks read the same cluster.
"""

from __future__ import annotations

import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
NODES, PODS, CLASSES = 5_000, 150_000, 64
GOAL_TIME, GOAL_MEMORY = 1.0, 1.2
TAINT_KEY = "gpu.example.com/dedicated"
BASELINE = "import orjson, pathlib, sys; orjson.loads(pathlib.Path(sys.argv[1]).read_bytes())"
BASELINE_NO_GC = "import gc; gc.disable(); " + BASELINE
BEFORE = os.environ.get("BENCH_BEFORE", "")


def _uid(rng: random.Random) -> str:
    return "%08x-%04x-4%03x-8%03x-%012x" % (  # noqa: UP031 - fixed-width hex fields
        rng.getrandbits(32),
        rng.getrandbits(16),
        rng.getrandbits(12),
        rng.getrandbits(12),
        rng.getrandbits(48),
    )


def _class(i: int) -> dict[str, Any]:
    vgpu = i % 4 == 3
    spec: dict[str, Any] = {
        "displayName": f"Example GPU {i}",
        "vendor": "example",
        "model": f"model-{i}",
        "mode": "vgpu" if vgpu else "passthrough",
        "source": {"devicePlugin": {"resourceName": f"example.com/gpu-{i}"}},
    }
    if vgpu:
        spec["profile"] = f"profile-{i}"
        if i % 8 == 7:
            spec["license"] = {"secretName": "example-vgpu-license", "featureType": 1}
    if i % 2 == 0:
        spec["tolerations"] = [{"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]
    return {
        "apiVersion": "cozystack.io/v1alpha1",
        "kind": "GPUClass",
        "metadata": {
            "name": f"example-gpu-{i}",
            "uid": f"00000000-0000-4000-8000-{i:012d}",
            "generation": 1,
            "creationTimestamp": f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z",
        },
        "spec": spec,
    }


def _node(i: int, rng: random.Random) -> dict[str, Any]:
    resource = f"example.com/gpu-{i % CLASSES}"
    taints = [{"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"}] if i % 10 == 0 else []
    if i % 50 == 1:
        taints.append({"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"})
    ready = "False" if i % 50 == 1 else "True"
    name = f"node-{i:05d}"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": _uid(rng),
            "resourceVersion": str(1000 + i),
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": "gpu-8x",
                "topology.kubernetes.io/zone": f"zone-{i % 3}",
            },
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": {
            "podCIDR": f"10.{i // 250}.{i % 250}.0/24",
            "taints": taints,
            "unschedulable": i % 100 == 2,
        },
        "status": {
            "capacity": {"cpu": "64", "memory": "527952840Ki", "pods": "110", resource: "8"},
            "allocatable": {"cpu": "63500m", "memory": "526904264Ki", "pods": "110", resource: "8"},
            "conditions": [
                {
                    "type": t,
                    "status": "False",
                    "reason": f"No{t}",
                    "lastHeartbeatTime": "2026-01-02T00:00:00Z",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
                for t in ("MemoryPressure", "DiskPressure", "PIDPressure")
            ]
            + [
                {
                    "type": "Ready",
                    "status": ready,
                    "reason": "KubeletReady",
                    "lastHeartbeatTime": "2026-01-02T00:00:00Z",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ],
            "addresses": [
                {"type": "InternalIP", "address": f"192.168.{i // 250}.{i % 250}"},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "kubeletVersion": "v1.31.4",
                "containerRuntimeVersion": "containerd://1.7.24",
                "osImage": "Talos (v1.9.1)",
                "kernelVersion": "6.12.6-talos",
            },
        },
    }


def _pod(i: int, rng: random.Random) -> dict[str, Any]:
    node_index = rng.randrange(NODES)
    gpu = i % 5 == 0  # one pod in five is a GPU VM's launcher
    phase = rng.choices(["Running", "Pending", "Succeeded", "Failed"], weights=[90, 4, 4, 2])[0]
    namespace = f"tenant-t{i % 200}"
    name = (
        f"virt-launcher-vm-{i}-{rng.getrandbits(20):05x}"
        if gpu
        else f"app-{i % 997}-{rng.getrandbits(24):06x}"
    )
    requests: dict[str, str] = {"cpu": "500m", "memory": "1Gi"}
    limits: dict[str, str] = {"memory": "1Gi"}
    if gpu:
        resource = f"example.com/gpu-{node_index % CLASSES}"
        limits[resource] = requests[resource] = str(rng.choice((1, 1, 2)))
    container = {
        "name": "compute" if gpu else "app",
        "image": "registry.example.org/kubevirt/virt-launcher:v1.4.0"
        if gpu
        else "registry.example.org/app:1.2.3",
        "resources": {"requests": requests, "limits": limits},
        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        "ports": [{"containerPort": 8080, "protocol": "TCP"}],
        "volumeMounts": [
            {
                "name": "kube-api-access",
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                "readOnly": True,
            }
        ],
        "terminationMessagePath": "/dev/termination-log",
        "imagePullPolicy": "IfNotPresent",
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": _uid(rng),
            "resourceVersion": str(100000 + i),
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"app": f"app-{i % 997}", "pod-template-hash": "5d8f7c9b4"}
            | ({"kubevirt.io": "virt-launcher"} if gpu else {}),
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"app-{i % 997}-5d8f7c9b4",
                    "uid": _uid(rng),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "nodeName": f"node-{node_index:05d}",
            "containers": [container],
            "restartPolicy": "Always",
            "serviceAccountName": "default",
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
                {
                    "key": "node.kubernetes.io/unreachable",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
            ],
            "volumes": [
                {
                    "name": "kube-api-access",
                    "projected": {
                        "sources": [
                            {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}}
                        ]
                    },
                }
            ],
        },
        "status": {
            "phase": phase,
            "hostIP": f"192.168.{node_index // 250}.{node_index % 250}",
            "podIP": f"10.{node_index // 250}.{node_index % 250}.{i % 250}",
            "startTime": "2026-01-01T00:00:05Z",
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if phase == "Running" else "False",
                    "lastTransitionTime": "2026-01-01T00:00:09Z",
                }
            ],
            "containerStatuses": [
                {
                    "name": container["name"],
                    "ready": phase == "Running",
                    "restartCount": 0,
                    "image": container["image"],
                    "imageID": "registry.example.org/app@sha256:" + "ab" * 32,
                    "containerID": "containerd://" + "cd" * 32,
                    "state": {"running": {"startedAt": "2026-01-01T00:00:08Z"}},
                }
            ],
        },
    }


def generate_cluster(
    *, nodes: int = NODES, pods: int = PODS, classes: int = CLASSES, seed: int = 1
) -> dict[str, Any]:
    """The cluster as one `kind: List` document (deterministic for a seed)."""
    rng = random.Random(seed)
    items: list[dict[str, Any]] = [_class(i) for i in range(classes)]
    items += [_node(i, rng) for i in range(nodes)]
    items += [_pod(i, rng) for i in range(pods)]
    permitted = [{"resourceName": f"example.com/gpu-{i}"} for i in range(classes) if i % 16 != 5]
    items.append(
        {
            "apiVersion": "kubevirt.io/v1",
            "kind": "KubeVirt",
            "metadata": {"name": "kubevirt", "namespace": "cozy-kubevirt"},
            "spec": {"configuration": {"permittedHostDevices": {"pciHostDevices": permitted}}},
        }
    )
    items.append(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "example-vgpu-license", "namespace": "cozy-system"},
            "data": {"client_configuration_token.tok": "ZXhhbXBsZS1ub3QtYS1yZWFsLXRva2Vu"},
        }
    )
    items += [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": f"tenant-t{i}", "labels": {"gpu.cozystack.io/vgpu": "true"}},
        }
        for i in range(200)
    ]
    return {"apiVersion": "v1", "kind": "List", "items": items}


def _generator() -> Any:
    """benchmarks/gencluster.py's generate_cluster when it exists and takes our keywords, else ours."""
    try:
        sys.path.insert(0, str(Path(__file__).parent))
        from gencluster import generate_cluster as shared_generator
    except ImportError:
        return generate_cluster, "bench_status.generate_cluster"
    return shared_generator, "gencluster.generate_cluster"


def checkout(ref: str, folder: Path) -> tuple[list[str], dict[str, str]]:
    """The command and environment that run `gpuclass` from `ref`'s tree: exported into
    `folder`, importable as `gpuclass` (a namespace package whose subpackages link to the
    top-level folders, as pyproject.toml maps them)."""
    tree = folder / "tree"
    tree.mkdir(parents=True)
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
    pyproject = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{ref}:pyproject.toml"],
        capture_output=True,
        check=True,
    ).stdout
    module, _, function = tomllib.loads(pyproject.decode())["project"]["scripts"][
        "gpuclass"
    ].partition(":")
    run = f"import sys; from {module} import {function}; sys.exit({function}())"
    return [sys.executable, "-c", run], {**os.environ, "PYTHONPATH": str(folder / "path")}


def run_measured(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, int, bytes]:
    """Wall seconds, peak RSS in KiB (the child's own, from wait4) and stdout of one subprocess."""
    with tempfile.TemporaryFile() as out:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.PIPE, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        err = proc.stderr.read() if proc.stderr else b""
        if proc.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed ({proc.returncode}): {err.decode()[-500:]}")
        out.seek(0)
        return wall, usage.ru_maxrss, out.read()


def main() -> None:
    generator, source = _generator()
    with tempfile.TemporaryDirectory(prefix="gpuclass-bench-") as folder:
        path = Path(folder) / "cluster.json"
        start = time.perf_counter()
        cluster: Any = None
        if generator is not generate_cluster:
            try:
                cluster = generator(nodes=NODES, pods=PODS, classes=CLASSES)
            except TypeError:  # a shared generator with other parameters
                cluster = None
            if isinstance(cluster, list):
                cluster = {"apiVersion": "v1", "kind": "List", "items": cluster}
            if not isinstance(cluster, dict) or not isinstance(cluster.get("items"), list):
                cluster = None
        if cluster is None:
            generator, source = generate_cluster, "bench_status.generate_cluster"
            cluster = generate_cluster(nodes=NODES, pods=PODS, classes=CLASSES)
        path.write_bytes(orjson.dumps(cluster))
        del cluster
        size = path.stat().st_size
        print(
            f"cluster: {NODES} nodes, {PODS} pods, {CLASSES} classes in one kind: List JSON file of"
            f" {size / 2**20:.0f} MiB (generated by {source} in {time.perf_counter() - start:.1f} s)"
        )
        status_args = ["status", "--objects", str(path)]
        commands: dict[str, tuple[list[str], dict[str, str] | None]] = {
            "baseline": ([sys.executable, "-c", BASELINE, str(path)], None),
            "status": ([str(BIN / "gpuclass"), *status_args], None),
        }
        if BEFORE:
            command, env = checkout(BEFORE, Path(folder) / "before")
            commands["before"] = ([*command, *status_args], env)
        commands["baseline-no-gc"] = ([sys.executable, "-c", BASELINE_NO_GC, str(path)], None)
        runs: dict[str, list[tuple[float, int]]] = {name: [] for name in commands}
        outputs: dict[str, bytes] = {}
        for _ in range(ROUNDS):
            for name, (argv, env) in commands.items():
                wall, rss, outputs[name] = run_measured(argv, env)
                runs[name].append((wall, rss))
        items = orjson.loads(outputs["status"])["items"]
        assert len(items) == CLASSES, len(items)
        free = sum(i["status"]["free"] for i in items)
        print(f"gpuclass status printed {len(items)} classes, {free} free units in all")
        if BEFORE:
            before = orjson.loads(outputs["before"])["items"]
            same = [(i["name"], i["status"]["free"]) for i in before] == [
                (i["name"], i["status"]["free"]) for i in items
            ]
            print(f"{BEFORE} printed the same classes and free units: {same}")
        medians = {
            k: (statistics.median(w for w, _ in v), statistics.median(r for _, r in v))
            for k, v in runs.items()
        }
        base_wall, base_rss = medians["baseline"]
        labels = {
            "baseline": "(a) orjson.loads of the file:    ",
            "status": "(b) gpuclass status --objects:   ",
            "before": f"(c) the same, {BEFORE}:".ljust(34),
            "baseline-no-gc": "(a) with the cyclic GC off:      ",
        }
        print(f"load average {os.getloadavg()[0]:.1f}; medians of {ROUNDS} alternating rounds")
        for name in ("baseline", "status", "before"):
            if name not in medians:
                continue
            wall, rss = medians[name]
            ratios = (
                ""
                if name == "baseline"
                else f"; {wall / base_wall:.2f}x, {rss / base_rss:.2f}x (a)"
            )
            print(f"{labels[name]} {wall:.2f} s, peak RSS {rss / 1024:.0f} MiB{ratios}")
        status_wall, status_rss = medians["status"]
        time_ratio, memory_ratio = status_wall / base_wall, status_rss / base_rss
        print(
            f"time ratio {time_ratio:.2f}x (goal <= {GOAL_TIME}x: {'MET' if time_ratio <= GOAL_TIME else 'MISSED'})"
        )
        print(
            f"peak memory ratio {memory_ratio:.2f}x (goal <= {GOAL_MEMORY}x: {'MET' if memory_ratio <= GOAL_MEMORY else 'MISSED'})"
        )
        no_gc_wall, no_gc_rss = medians["baseline-no-gc"]
        print(
            f"for context, {labels['baseline-no-gc'].strip()} {no_gc_wall:.2f} s, peak RSS "
            f"{no_gc_rss / 1024:.0f} MiB; (b) is {status_wall / no_gc_wall:.2f}x that"
        )


if __name__ == "__main__":
    main()
