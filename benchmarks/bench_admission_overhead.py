"""Admission overhead through a real kube-apiserver: VMI creates with gpuclass-webhook,
with the Go floor, and with no webhook, in one run.

Starts etcd + kube-apiserver (the test control plane), a `gpuclass-webhook` in
cluster mode and the Go floor (`benchmarks/gofloor/`, a minimal controller-runtime
webhook, given the patch gpuclass-webhook answers for the same VMI and the same
certificate), and creates BENCH_VMIS (default 1,000) VMIs selecting a class with each
webhook registered and twice as many with none, in blocks of 50 cycling gpuclass, none,
Go floor, none (each switch is seen in effect before its block: a dry-run create comes
back patched or not). Each create is timed from the client. Prints p50/p99 of each and
what each webhook adds (its percentile minus the no-webhook one), and the ratios to the
goals: gpuclass adds <= 5 ms at p99 and <= 1.5x what the Go floor adds.
"""

from __future__ import annotations

import base64
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import go_floor  # noqa: E402
from tests.controlplane.api import ApiError  # noqa: E402
from tests.controlplane.cluster import ControlPlane, eventually, find_assets, free_port  # noqa: E402
from tests.controlplane.plugin import GPUCLASS_CRD, KUBEVIRT_CRDS, WebhookRegistry  # noqa: E402
from tests.controlplane.webhooks import gpuclass_webhooks  # noqa: E402
from tests.webhook_process import WebhookProcess  # noqa: E402

COUNT = int(os.environ.get("BENCH_VMIS", "1000"))
BLOCK = min(50, COUNT)
GOAL_ADDED_P99_MS, GOAL_VS_GO = 5.0, 1.5
CYCLE = ("gpuclass", "none", "gofloor", "none")


def vmi(index: int, selection: str) -> dict[str, object]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {
            "name": f"bench-{index}",
            "namespace": "tenant-bench",
            "annotations": {"gpu.cozystack.io/classes": selection},
        },
        "spec": {"domain": {"devices": {}, "memory": {"guest": "1Gi"}}},
    }


def patched(stored: dict[str, Any]) -> bool:
    return bool(stored["spec"]["domain"]["devices"].get("gpus"))


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


def reference_patch(url: str, ca: str, obj: dict[str, object]) -> bytes | None:
    """The JSON patch gpuclass-webhook answers for a CREATE of `obj`; None until it allows
    the VMI with a patch that adds GPUs (its catalog may not have the class yet)."""
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "00000000-0000-4000-8000-000000000001",
            "kind": {"group": "kubevirt.io", "version": "v1", "kind": "VirtualMachineInstance"},
            "resource": {
                "group": "kubevirt.io",
                "version": "v1",
                "resource": "virtualmachineinstances",
            },
            "requestKind": {
                "group": "kubevirt.io",
                "version": "v1",
                "kind": "VirtualMachineInstance",
            },
            "requestResource": {
                "group": "kubevirt.io",
                "version": "v1",
                "resource": "virtualmachineinstances",
            },
            "name": obj["metadata"]["name"],  # type: ignore[index]
            "namespace": obj["metadata"]["namespace"],  # type: ignore[index]
            "operation": "CREATE",
            "userInfo": {"username": "bench"},
            "object": obj,
            "dryRun": False,
        },
    }
    answer = httpx.post(
        url + "/mutate/virtualmachineinstances", json=review, verify=ca, timeout=10
    ).json()["response"]
    if answer.get("allowed") is not True or "patch" not in answer:
        return None
    patch = base64.b64decode(answer["patch"])
    return patch if b"gpus" in patch else None


def percentiles(values: list[float]) -> tuple[float, float]:
    return statistics.median(values), percentile(values, 0.99)


def in_effect(api: Any, probe: dict[str, Any], patched_wanted: bool) -> bool:
    """Whether a dry-run create is patched as the block wants. The API server drops a removed
    configuration a little later (its informer), each on its own: for a moment the previous
    block's final check can still be called while its mutating hook is gone, and it refuses the
    unpatched VMI (422); that is a registration not yet in effect, too."""
    try:
        return patched(api.create(probe, dryRun="All")) == patched_wanted
    except ApiError as exc:
        if exc.status_code == 422 and "final-virtualmachineinstances" in str(exc):
            return False
        raise


def main() -> int:
    gofloor, build_seconds = go_floor.build()
    print(f"Go floor: {gofloor} (build step {build_seconds:.1f} s; cached after the first build)")
    with ControlPlane(find_assets()) as plane:
        plane.install_crds([GPUCLASS_CRD, *KUBEVIRT_CRDS])
        api = plane.admin
        api.apply(
            [
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}}
                for n in ("tenant-bench", "cozy-kubevirt")
            ]
        )
        api.apply(
            [
                {
                    "apiVersion": "kubevirt.io/v1",
                    "kind": "KubeVirt",
                    "metadata": {"name": "kubevirt", "namespace": "cozy-kubevirt"},
                    "spec": {
                        "configuration": {
                            "permittedHostDevices": {
                                "pciHostDevices": [
                                    {
                                        "pciVendorSelector": "1:1",
                                        "resourceName": "bench.example.com/gpu",
                                    }
                                ]
                            }
                        }
                    },
                }
            ]
        )
        api.create(
            {
                "apiVersion": "cozystack.io/v1alpha1",
                "kind": "GPUClass",
                "metadata": {"name": "bench-gpu"},
                "spec": {
                    "vendor": "v",
                    "model": "m",
                    "mode": "passthrough",
                    "maxCount": 8,
                    "source": {"devicePlugin": {"resourceName": "bench.example.com/gpu"}},
                },
            }
        )
        server = WebhookProcess(
            ["--kubeconfig", str(plane.admin_kubeconfig)],
            tls_dir=Path(tempfile.mkdtemp(prefix="bench-tls-")),
        )
        selection = json.dumps([{"className": "bench-gpu", "count": 4}])
        floor = go_floor.GoFloor(
            gofloor,
            port=free_port(),
            cert_dir=server.tls_dir,
            patch=eventually(
                lambda: reference_patch(server.url, server.ca, vmi(0, selection)),
                timeout=30,
                what="gpuclass-webhook's patch for the VMI",
            ),
        )
        ca_bundle = Path(server.ca).read_bytes()
        hooks = {
            "gpuclass": gpuclass_webhooks(server.url, ca_bundle, prefix="bench"),
            "gofloor": gpuclass_webhooks(floor.url, ca_bundle, prefix="bench-gofloor"),
        }
        timings: dict[str, list[float]] = {"none": [], "gpuclass": [], "gofloor": []}
        wrong = index = 0
        registry = WebhookRegistry(api)
        try:
            for block in range(2 * len(CYCLE) * COUNT // (2 * BLOCK)):
                which = CYCLE[block % len(CYCLE)]
                registry.remove()
                if which != "none":
                    registry.register(hooks[which])
                probe = vmi(10**6 + block, selection)
                eventually(
                    lambda probe=probe, want=which != "none": in_effect(api, probe, want),
                    timeout=30,
                    what=f"webhook registration in effect ({which})",
                )
                for _ in range(BLOCK):
                    index += 1
                    started = time.perf_counter()
                    stored = api.create(vmi(index, selection))
                    timings[which].append((time.perf_counter() - started) * 1000)
                    wrong += patched(stored) != (which != "none")
        finally:
            registry.remove()
            floor.stop()
            server.stop()
    without = percentiles(timings["none"])
    print(
        f"VMI creates through kube-apiserver ({len(timings['gpuclass'])} with gpuclass-webhook, "
        f"{len(timings['gofloor'])} with the Go floor, {len(timings['none'])} with no webhook; "
        f"blocks of {BLOCK} cycling {', '.join(CYCLE)}; wrongly patched {wrong}; load average "
        f"{os.getloadavg()[0]:.1f})"
    )
    print(f"no webhook:       p50 {without[0]:.2f} ms, p99 {without[1]:.2f} ms")
    added: dict[str, tuple[float, float]] = {}
    for name, label in (("gofloor", "Go floor"), ("gpuclass", "gpuclass-webhook")):
        with_hook = percentiles(timings[name])
        added[name] = (with_hook[0] - without[0], with_hook[1] - without[1])
        print(
            f"{label + ':':17} p50 {with_hook[0]:.2f} ms, p99 {with_hook[1]:.2f} ms; "
            f"added p50 {added[name][0]:.2f} ms, p99 {added[name][1]:.2f} ms"
        )
    ours, go = added["gpuclass"][1], added["gofloor"][1]
    print(
        f"gpuclass added p99 {ours:.2f} ms (goal <= {GOAL_ADDED_P99_MS:g} ms: "
        f"{'MET' if ours <= GOAL_ADDED_P99_MS else 'MISSED'})"
    )
    # On a shared machine the Go floor's added p99 can come out at 0 or below (its tail lost in
    # the API server's own); the ratio then divides by 0.1 ms, the least these timings resolve.
    ratio = ours / max(go, 0.1)
    print(
        f"gpuclass added p99 / Go floor added p99: {ratio:.2f}x (goal <= {GOAL_VS_GO}x: "
        f"{'MET' if ours <= GOAL_VS_GO * max(go, 0.1) else 'MISSED'}); at p50, steadier: "
        f"{added['gpuclass'][0] / max(added['gofloor'][0], 0.1):.2f}x"
    )
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
