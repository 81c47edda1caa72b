"""Which cluster configuration the servers (and `gpuclass explain --kubeconfig/--context`) use:
the order of `--kubeconfig`, `KUBECONFIG`, the Pod's service account and `~/.kube/config`
(docs/operations.md, "Which cluster").

No Kubernetes client here: `shared/kube/kubeclient.py` loads what this chooses, and a
binary can name the error without importing the client.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml


class ClusterConfigError(Exception):
    """No usable cluster configuration; the message says where it looked."""


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """Where the API client's configuration comes from: a kubeconfig (one file, or a
    colon-separated list as in `KUBECONFIG`, merged as kubectl does) or the Pod's service
    account (`kubeconfig` None)."""

    kubeconfig: str | None
    source: str

    def describe(self) -> str:
        """The chosen configuration and why it was chosen, for the error when it cannot be loaded."""
        return self.source if self.kubeconfig is None else f"{self.kubeconfig} ({self.source})"


def choose_cluster_config(
    kubeconfig: Path | None,
    *,
    context: str | None = None,
    environ: Mapping[str, str],
    home: Path,
) -> ClusterConfig:
    """kubectl's order with the Pod in between: `--kubeconfig`, then `KUBECONFIG`, then the
    in-cluster service account when running in a Pod (`KUBERNETES_SERVICE_HOST` set), then
    `~/.kube/config`. A `--context` names a kubeconfig entry, so it skips the in-cluster
    step."""
    if kubeconfig is not None:
        return ClusterConfig(str(kubeconfig), "--kubeconfig")
    listed = environ.get("KUBECONFIG", "")
    if any(part.strip() for part in listed.split(os.pathsep)):
        return ClusterConfig(listed, "KUBECONFIG")
    in_pod = bool(environ.get("KUBERNETES_SERVICE_HOST"))
    if in_pod and context is None:
        return ClusterConfig(None, "the in-cluster service account")
    default = home / ".kube" / "config"
    if default.is_file():
        return ClusterConfig(str(default), "~/.kube/config")
    if in_pod:
        raise ClusterConfigError(
            f"--context {context} needs a kubeconfig: give --kubeconfig or set KUBECONFIG"
        )
    raise ClusterConfigError(
        "no cluster configuration: give --kubeconfig, set KUBECONFIG, run in a Pod, "
        f"or create {default}"
    )


def first_current_context(paths: str) -> str | None:
    """kubectl's rule for a list of kubeconfigs: the first file that sets `current-context`
    wins (kubernetes_asyncio's merger lets the last one win; names it merges as kubectl does)."""
    for part in paths.split(os.pathsep):
        path = Path(part).expanduser()
        if not part.strip() or not path.is_file():
            continue
        try:
            doc = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError):
            continue  # the loader reports an unreadable file
        current = doc.get("current-context") if isinstance(doc, dict) else None
        if isinstance(current, str) and current:
            return current
    return None
