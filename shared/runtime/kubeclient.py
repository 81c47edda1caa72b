"""The Kubernetes API client factory both binaries use: kubeconfig or in-cluster config.

Only this module and the two adapters (`webhook/kube.py`, `reconciler/kube.py`)
import kubernetes_asyncio.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

from kubernetes_asyncio import client, config


def user_agent(binary: str) -> str:
    """`gpuclass-reconciler/<version>`: what the API server's audit log and metrics show."""
    try:
        version = metadata.version("gpuclass")
    except metadata.PackageNotFoundError:
        version = "unknown"
    return f"{binary}/{version}"


async def api_client(kubeconfig: Path | None, *, binary: str) -> client.ApiClient:
    """An ApiClient from `kubeconfig`, else from the in-cluster service account, whose every
    request names `binary` and the installed version in its User-Agent."""
    configuration = client.Configuration()
    if kubeconfig is not None:
        await config.load_kube_config(
            config_file=str(kubeconfig), client_configuration=configuration
        )
    else:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    api = client.ApiClient(configuration)
    api.user_agent = user_agent(binary)
    return api
