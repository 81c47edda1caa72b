"""Which cluster the servers reach (shared/kube/clusterconfig.py, shared/kube/kubeclient.py).

The order the issue asks for: `--kubeconfig`, then `KUBECONFIG` (a colon-separated list), then
the in-cluster service account when running in a Pod, then `~/.kube/config`; `--context`
everywhere a cluster is reached. The last tests run the reconciler against a real
kube-apiserver with a kubeconfig of two contexts, one of them wrong.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuclass.shared.kube.clusterconfig import ClusterConfigError, choose_cluster_config
from gpuclass.shared.kube.kubeclient import api_client
from tests.builders import example_class
from tests.controlplane.cluster import unique_name

IN_POD = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}


def kubeconfig(path: Path, contexts: dict[str, str], current: str) -> Path:
    """A kubeconfig with one cluster per context, each at the given server."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": n, "cluster": {"server": s}} for n, s in contexts.items()],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": n, "context": {"cluster": n, "user": "u"}} for n in contexts],
        "current-context": current,
    }
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "home").mkdir()
    return tmp_path / "home"


def with_home_config(home: Path) -> Path:
    (home / ".kube").mkdir()
    return kubeconfig(home / ".kube" / "config", {"home": "https://home.example:6443"}, "home")


@pytest.mark.parametrize(
    ("flag", "environ", "home_config", "expected"),
    [
        pytest.param("/f", {"KUBECONFIG": "/e"}, True, ("/f", "--kubeconfig"), id="flag-first"),
        pytest.param(
            None,
            {"KUBECONFIG": "/a:/b", **IN_POD},
            True,
            ("/a:/b", "KUBECONFIG"),
            id="env-before-pod",
        ),
        pytest.param(
            None, IN_POD, True, (None, "the in-cluster service account"), id="pod-before-home"
        ),
        pytest.param(None, {}, True, ("HOME", "~/.kube/config"), id="home-last"),
        pytest.param(
            None, {"KUBECONFIG": ""}, True, ("HOME", "~/.kube/config"), id="empty-env-ignored"
        ),
    ],
)
def test_order(
    flag: str | None,
    environ: dict[str, str],
    home_config: bool,
    expected: tuple[str | None, str],
    home: Path,
) -> None:
    if home_config:
        path = with_home_config(home)
    chosen = choose_cluster_config(Path(flag) if flag else None, environ=environ, home=home)
    want_path = str(path) if expected[0] == "HOME" else expected[0]
    assert (chosen.kubeconfig, chosen.source) == (want_path, expected[1])


def test_nothing_found_says_where_it_looked(home: Path) -> None:
    with pytest.raises(ClusterConfigError) as info:
        choose_cluster_config(None, environ={}, home=home)
    message = str(info.value)
    for word in ("--kubeconfig", "KUBECONFIG", "Pod", ".kube/config"):
        assert word in message


def test_context_in_a_pod_uses_a_kubeconfig(home: Path) -> None:
    path = with_home_config(home)
    chosen = choose_cluster_config(None, context="home", environ=IN_POD, home=home)
    assert chosen.kubeconfig == str(path)
    with pytest.raises(ClusterConfigError, match="--context"):
        choose_cluster_config(None, context="x", environ=IN_POD, home=home / "nothing")


async def _host(kubeconfig_path: Path | None, **kwargs: Any) -> str:
    api = await api_client(kubeconfig_path, binary="gpuclass-test", **kwargs)
    try:
        return str(api.configuration.host)
    finally:
        await api.close()


def test_context_picks_the_cluster(tmp_path: Path, home: Path) -> None:
    path = kubeconfig(
        tmp_path / "kc", {"a": "https://a.example:6443", "b": "https://b.example:6443"}, "a"
    )
    assert asyncio.run(_host(path, environ={}, home=home)) == "https://a.example:6443"
    assert asyncio.run(_host(path, context="b", environ={}, home=home)) == "https://b.example:6443"
    with pytest.raises(ClusterConfigError, match="nope"):
        asyncio.run(_host(path, context="nope", environ={}, home=home))


def test_kubeconfig_list_is_merged(tmp_path: Path, home: Path) -> None:
    first = kubeconfig(tmp_path / "one", {"a": "https://a.example:6443"}, "a")
    second = kubeconfig(tmp_path / "two", {"b": "https://b.example:6443"}, "b")
    environ = {"KUBECONFIG": f"{first}:{second}"}
    # kubectl's merge: the first file's current-context wins, contexts of both are known
    assert asyncio.run(_host(None, environ=environ, home=home)) == "https://a.example:6443"
    assert (
        asyncio.run(_host(None, context="b", environ=environ, home=home))
        == "https://b.example:6443"
    )


def test_home_config_is_the_fallback(home: Path) -> None:
    with_home_config(home)
    assert asyncio.run(_host(None, environ={}, home=home)) == "https://home.example:6443"


# against a real API server


def two_contexts(admin_kubeconfig: Path, path: Path) -> Path:
    """The admin kubeconfig, plus a context `wrong` (current) at a port nothing listens on."""
    doc = yaml.safe_load(admin_kubeconfig.read_text())
    right = doc["contexts"][0]
    right["name"] = "right"
    broken = json.loads(json.dumps(doc["clusters"][0]))
    broken["name"] = "nowhere"
    broken["cluster"]["server"] = "https://127.0.0.1:9"
    doc["clusters"].append(broken)
    doc["contexts"].append(
        {"name": "wrong", "context": {"cluster": "nowhere", "user": right["context"]["user"]}}
    )
    doc["current-context"] = "wrong"
    path.write_text(yaml.safe_dump(doc))
    return path


def reconciler_once(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    binary = Path(sys.executable).parent / "gpuclass-reconciler"
    return subprocess.run(
        [str(binary), "--once", "--dry-run", "--log-level", "error", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


def test_context_chooses_the_right_cluster(control_plane: Any, tmp_path: Path) -> None:
    name = unique_name("context")
    control_plane.admin.apply([example_class(name)])
    path = two_contexts(control_plane.admin_kubeconfig, tmp_path / "kubeconfig")
    clean = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}  # no KUBECONFIG, no ~/.kube/config

    chosen = reconciler_once("--kubeconfig", str(path), "--context", "right", env=clean)
    assert chosen.returncode == 0, chosen.stderr
    assert name in [item["name"] for item in json.loads(chosen.stdout)["items"]]

    current = reconciler_once("--kubeconfig", str(path), env=clean)  # `wrong` is current
    assert current.returncode == 1 and current.stdout == ""

    from_env = reconciler_once("--context", "right", env={**clean, "KUBECONFIG": str(path)})
    assert from_env.returncode == 0, from_env.stderr
    assert name in [item["name"] for item in json.loads(from_env.stdout)["items"]]

    (tmp_path / ".kube").mkdir()
    (tmp_path / ".kube" / "config").write_text(path.read_text())
    from_home = reconciler_once("--context", "right", env=clean)
    assert from_home.returncode == 0, from_home.stderr
