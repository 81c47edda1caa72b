"""Admission overhead through a real kube-apiserver: VMI creates with and without the webhook.

Starts etcd + kube-apiserver (the test control plane), a `gpuclass-webhook` in
cluster mode, and creates 200 VMIs selecting a class with the webhook
registered, then 200 without (alternating blocks of 50), timing each create
from the client. Prints p50/p99 of each and the difference at p99
(goal: the webhook adds <= 10 ms p99).
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.controlplane.cluster import ControlPlane, eventually, find_assets  # noqa: E402
from tests.controlplane.plugin import GPUCLASS_CRD, KUBEVIRT_CRDS, WebhookRegistry  # noqa: E402
from tests.controlplane.webhooks import gpuclass_webhooks  # noqa: E402
from tests.webhook_process import WebhookProcess  # noqa: E402

COUNT = 200
BLOCK = 50


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


def main() -> int:
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
        hooks = gpuclass_webhooks(server.url, Path(server.ca).read_bytes(), prefix="bench")
        selection = json.dumps([{"className": "bench-gpu", "count": 4}])
        timings: dict[bool, list[float]] = {True: [], False: []}
        index = 0
        try:
            for block in range(2 * COUNT // BLOCK):
                registered = block % 2 == 0
                if registered:
                    WebhookRegistry(api).register(hooks)
                else:
                    WebhookRegistry(api).remove(hooks)
                probe = vmi(10**6 + block, selection)
                eventually(
                    lambda probe=probe, want=registered: (
                        patched(api.create(probe, dryRun="All")) == want
                    ),
                    timeout=30,
                    what="webhook registration in effect",
                )
                for _ in range(BLOCK):
                    index += 1
                    started = time.perf_counter()
                    api.create(vmi(index, selection))
                    timings[registered].append((time.perf_counter() - started) * 1000)
        finally:
            server.stop()
    with_hook, without = timings[True], timings[False]
    print(
        f"VMI creates through kube-apiserver, {len(with_hook)} with and {len(without)} without the webhook "
        f"(alternating blocks of {BLOCK})"
    )
    print(
        f"without webhook: p50 {statistics.median(without):.2f} ms, p99 {percentile(without, 0.99):.2f} ms"
    )
    print(
        f"with webhook:    p50 {statistics.median(with_hook):.2f} ms, p99 {percentile(with_hook, 0.99):.2f} ms"
    )
    print(
        f"added by the webhook: p50 {statistics.median(with_hook) - statistics.median(without):.2f} ms, "
        f"p99 {percentile(with_hook, 0.99) - percentile(without, 0.99):.2f} ms (goal <= 10 ms p99)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
