"""The Kubernetes API client factory both binaries use: kubeconfig or in-cluster config.

Only this module and the two adapters (`webhook/kube.py`, `reconciler/kube.py`)
import kubernetes_asyncio.
"""

from __future__ import annotations

from pathlib import Path

from kubernetes_asyncio import client, config


async def api_client(kubeconfig: Path | None) -> client.ApiClient:
    """An ApiClient from `kubeconfig`, else from the in-cluster service account."""
    configuration = client.Configuration()
    if kubeconfig is not None:
        await config.load_kube_config(
            config_file=str(kubeconfig), client_configuration=configuration
        )
    else:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    return client.ApiClient(configuration)
