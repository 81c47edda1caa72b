"""`gpuclass explain` against a real kube-apiserver (`--kubeconfig`, `--context`).

The same objects are created in the cluster and written to files; the live answer must be the
offline one word for word (one function, two sources), and both what the contract gives by hand.
The license source Secret is read by name only: a caller allowed to `get` that one Secret, and
to list no Secret at all, gets the full answer, and no payload is printed.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuclass.shared.cli.main import main
from tests.builders import api_gpuclass, api_licensed_class, api_namespace, api_pod, api_secret
from tests.controlplane.cluster import ControlPlane
from tests.e2e_reconciler_helpers import (
    GPUCLASSES,
    KUBEVIRT_NAMESPACE,
    MERGE,
    PermittedDevices,
    create_node,
    delete_created,
)

TAINT = {"key": "gpu.example.com/reserved", "value": "batch", "effect": "NoSchedule"}


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane) -> Iterator[dict[str, Any]]:
    admin = control_plane.admin
    suffix = secrets.token_hex(3)
    res = f"explain-{suffix}.example.com/gpu"
    ns = f"e2e-explain-{suffix}"
    permitted = PermittedDevices()
    created: list[dict[str, Any]] = []
    nodes = {
        f"explain-{suffix}-free": {},
        f"explain-{suffix}-busy": {},
        f"explain-{suffix}-tainted": {},
    }
    try:
        admin.apply([api_namespace(KUBEVIRT_NAMESPACE), api_namespace(ns)])
        permitted.permit(admin, [res])
        created.append(admin.create(api_gpuclass(f"explain-{suffix}", res)))
        free, busy, tainted = nodes
        for name, units, taints in ((free, 2, []), (busy, 4, []), (tainted, 8, [TAINT])):
            nodes[name] = create_node(admin, name, {res: units}, taints=taints)
            created.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
        launcher = admin.create(api_pod(f"launcher-{suffix}", ns, busy, {res: 3}))
        created.append(launcher)
        yield {
            "class": f"explain-{suffix}",
            "resource": res,
            "nodes": (free, busy, tainted),
            "objects": [
                created[0],
                *nodes.values(),
                launcher | {"status": {"phase": "Pending"}},  # bound, not started: holds units
                {
                    "apiVersion": "kubevirt.io/v1",
                    "kind": "KubeVirt",
                    "metadata": {"name": "kubevirt", "namespace": KUBEVIRT_NAMESPACE},
                    "spec": {
                        "configuration": {
                            "permittedHostDevices": {"pciHostDevices": [{"resourceName": res}]}
                        }
                    },
                    "status": {"phase": "Deployed"},
                },
            ],
        }
    finally:
        delete_created(admin, created)
        permitted.restore(admin)


def explain(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["explain", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_live_answer_equals_the_offline_one(
    cluster: dict[str, Any],
    control_plane: ControlPlane,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    files = tmp_path / "cluster.yaml"
    files.write_text(yaml.safe_dump_all(cluster["objects"]))
    name = cluster["class"]
    live = explain(
        [name, "--count", "2", "--kubeconfig", str(control_plane.admin_kubeconfig)], capsys
    )
    offline = explain([name, "--count", "2", "--objects", str(files)], capsys)
    assert live == offline
    code, out, err = live
    free, busy, tainted = cluster["nodes"]
    # By hand: free node 2 of 2 free (fits), busy node 1 of 4 free (too few), tainted not a host.
    assert (code, err) == (0, "")
    assert out.splitlines()[-1] == "answer: a VM needing 2 units can start on 1 node now"
    rows = {line.split()[0]: line.split()[3] for line in out.splitlines()[2:5]}
    assert rows == {free: "fits", busy: "tooFewFree", tainted: "untolerated"}


def test_context_selects_the_cluster(
    cluster: dict[str, Any],
    control_plane: ControlPlane,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(control_plane.admin_kubeconfig))
    code, out, _ = explain([cluster["class"], "--count", "3", "--context", "gpuclass-test"], capsys)
    assert code == 1
    assert out.splitlines()[-1] == (
        "answer: 3 units free but at most 2 on one node: a VM needing 3 units waits"
    )
    code, out, err = explain([cluster["class"], "--context", "no-such-context"], capsys)
    assert (code, out) == (2, "")
    assert "cannot use" in err


def reader_rbac(user: str, license_ns: str, source: str) -> list[dict[str, Any]]:
    """What a hoster's read-only operator may do: list the cluster objects, and `get` exactly
    one Secret of the license namespace (no list, no other Secret)."""
    name = f"{user}-reader"
    subject = [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}]
    role_ref = {"apiGroup": "rbac.authorization.k8s.io", "name": name}
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": [
                {"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["get", "list"]},
                {"apiGroups": ["cozystack.io"], "resources": ["gpuclasses"], "verbs": ["list"]},
                {"apiGroups": ["kubevirt.io"], "resources": ["kubevirts"], "verbs": ["list"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "subjects": subject,
            "roleRef": {**role_ref, "kind": "ClusterRole"},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": name, "namespace": license_ns},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["secrets"],
                    "resourceNames": [source],
                    "verbs": ["get"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": license_ns},
            "subjects": subject,
            "roleRef": {**role_ref, "kind": "Role"},
        },
    ]


def test_license_secret_is_read_by_name_only(
    control_plane: ControlPlane, capsys: pytest.CaptureFixture[str]
) -> None:
    admin = control_plane.admin
    suffix = secrets.token_hex(3)
    res = f"explain-lic-{suffix}.example.com/vgpu"
    license_ns = f"e2e-explain-lic-{suffix}"
    source, token = f"source-{suffix}", f"token-{suffix}-never-printed"
    present, absent = f"explain-lic-{suffix}", f"explain-nolic-{suffix}"
    user = control_plane.user(f"explain-reader-{suffix}")
    permitted = PermittedDevices()
    created: list[dict[str, Any]] = []
    try:
        admin.apply([api_namespace(KUBEVIRT_NAMESPACE)])
        created += admin.apply([api_namespace(license_ns)])
        permitted.permit(admin, [res, res + "-2"])
        created.append(admin.create(api_licensed_class(present, res, source)))
        created.append(admin.create(api_licensed_class(absent, res + "-2", f"absent-{suffix}")))
        created.append(
            admin.create(api_secret(source, license_ns, {"client_configuration_token.tok": token}))
        )
        created.append(admin.create(api_secret(f"other-{suffix}", license_ns, {"k": "platform"})))
        created += admin.apply(reader_rbac(user.name, license_ns, source))
        create_node(admin, f"explain-lic-{suffix}", {res: 1, res + "-2": 1})
        created.append(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"explain-lic-{suffix}"}}
        )
        ns_args = ["--license-namespace", license_ns]

        # May get only the one Secret, list none: the license is seen (before, a Secret list
        # was refused and the class looked unlicensed), and neither payload is printed.
        for output in ("text", "json"):
            code, out, err = explain(
                [present, "--kubeconfig", str(user.kubeconfig), *ns_args, "-o", output], capsys
            )
            assert (code, err) == (0, ""), out
            assert token not in out and "platform" not in out
        code, out, _ = explain([present, "--kubeconfig", str(user.kubeconfig), *ns_args], capsys)
        assert out.splitlines()[-1] == "answer: a VM needing 1 unit can start on 1 node now"

        # One who may read no Secret (403) gets the reconciler's view, the stored condition:
        # none stored yet is a missing license; a stored LicenseSecretMissing=False stands in.
        outsider = control_plane.user(f"explain-outsider-{suffix}")
        created += admin.apply(reader_rbac(outsider.name, license_ns, f"not-{source}"))
        as_outsider = [present, "--kubeconfig", str(outsider.kubeconfig), *ns_args]
        code, out, err = explain(as_outsider, capsys)
        assert (code, err) == (1, "")
        assert out.splitlines()[-1].endswith("not available: LicenseSecretMissing")
        stored = {
            "type": "LicenseSecretMissing",
            "status": "False",
            "reason": "SecretPresent",
            "message": "seen",
            "lastTransitionTime": "2030-01-01T00:00:00Z",
        }
        admin.call(
            "PATCH",
            f"{GPUCLASSES}/{present}/status",
            body={"status": {"conditions": [stored]}},
            content_type=MERGE,
        )
        code, out, err = explain(as_outsider, capsys)
        assert (code, err) == (0, ""), out
        assert token not in out

        # An absent source Secret (404 for one who may read it) is a missing license (6.4).
        code, out, _ = explain(
            [absent, "--kubeconfig", str(control_plane.admin_kubeconfig), *ns_args], capsys
        )
        assert code == 1
        assert out.splitlines()[-1] == (
            f"answer: no VM of class {absent} can start: not available: LicenseSecretMissing"
        )
    finally:
        delete_created(admin, created)
        permitted.restore(admin)
