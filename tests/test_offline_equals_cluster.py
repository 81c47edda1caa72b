"""Offline equals the cluster: `gpuclass status`, `gpuclass review` and `gpuclass-reconciler --once`.

The three commands run on the same files, for every fixture cluster, and must tell
the same story. `--once` runs the reconciler's ordinary loop against an in-memory
API server (objects keyed as an API server keys them, only the KubeVirt CR in the
KubeVirt namespace watched), so it is the reference for what a cluster would say:

- `gpuclass status` prints the same status for every class (all but the times);
- `gpuclass review` of a VMI selecting each class refuses it for the reason the
  conditions give (invalid spec, conflict, not permitted), warns of a shortage
  exactly when `maxFreePerNode` is 0, and enforces the passthrough default limit
  at `maxUnitsPerNode`.

The clusters include the traps: the same objects given twice, a KubeVirt CR in
another namespace, a namespace-less one, and classes that fail validation.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuclass.reconciler.main import main as reconciler_main
from gpuclass.shared.cli.main import main as gpuclass_main
from gpuclass.shared.files.loader import load_snapshot
from tests.builders import review_file, vmi_request
from tests.conftest import OBJECTS, ROOT

pytestmark = pytest.mark.usefixtures("keep_logging")  # main() reconfigures the root logger
EXAMPLES = ROOT / "examples"


def _kubevirt(namespace: str | None, resource: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "kubevirt"}
    if namespace is not None:
        meta["namespace"] = namespace
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "KubeVirt",
        "status": {"phase": "Deployed"},
        "metadata": meta,
        "spec": {
            "configuration": {
                "permittedHostDevices": {"pciHostDevices": [{"resourceName": resource}]}
            }
        },
    }


def _without_kubevirt(tmp_path: Path, extra: list[dict[str, Any]]) -> list[str]:
    folder = tmp_path / "cluster"
    shutil.copytree(EXAMPLES, folder)
    (folder / "cluster" / "kubevirt.yaml").unlink()
    (folder / "extra.yaml").write_text(yaml.safe_dump_all(extra))
    return [str(folder)]


def _invalid_classes(tmp_path: Path) -> list[str]:
    folder = tmp_path / "cluster"
    shutil.copytree(EXAMPLES, folder)
    broken = yaml.safe_load((EXAMPLES / "catalog" / "example-whole-gpu.yaml").read_text())
    broken["metadata"] = {"name": "broken-whole-gpu", "creationTimestamp": "2020-01-01T00:00:00Z"}
    broken["spec"]["license"] = {"secretName": "example-vgpu-license"}
    negative = yaml.safe_load((EXAMPLES / "catalog" / "example-byol-vgpu.yaml").read_text())
    negative["metadata"] = {"name": "negative-memory"}
    negative["spec"]["memory"] = "-16Gi"
    negative["spec"]["source"]["devicePlugin"]["resourceName"] = "example.com/negative"
    (folder / "broken.yaml").write_text(yaml.safe_dump_all([broken, negative]))
    return [str(folder)]


CLUSTERS: dict[str, Any] = {
    "examples": lambda tmp: [str(EXAMPLES)],
    "golden-objects": lambda tmp: list(OBJECTS),
    "same-folder-twice": lambda tmp: [str(EXAMPLES), str(EXAMPLES)],
    "same-nodes-in-two-files": lambda tmp: [
        str(EXAMPLES),
        str(shutil.copy(EXAMPLES / "cluster" / "nodes.yaml", tmp / "nodes-again.yaml")),
        str(shutil.copy(EXAMPLES / "cluster" / "pods.yaml", tmp / "pods-again.yaml")),
    ],
    "kubevirt-in-another-namespace": lambda tmp: _without_kubevirt(
        tmp, [_kubevirt("other", "example.com/whole-gpu")]
    ),
    "kubevirt-without-namespace": lambda tmp: _without_kubevirt(
        tmp, [_kubevirt(None, "example.com/whole-gpu")]
    ),
    "invalid-classes": _invalid_classes,
}


def objects_args(paths: list[str]) -> list[str]:
    return [a for p in paths for a in ("--objects", p)]


def reconciler_once(
    paths: list[str], capsys: pytest.CaptureFixture[str], *flags: str
) -> dict[str, Any]:
    args = [*objects_args(paths), *flags, "--once", "--log-level", "warning"]
    assert reconciler_main(args) == 0
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    return {item["name"]: item["status"] for item in report["items"]}


def gpuclass(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert gpuclass_main(args) == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


def without_times(status: dict[str, Any]) -> dict[str, Any]:
    conditions = [
        {k: v for k, v in c.items() if k != "lastTransitionTime"} for c in status["conditions"]
    ]
    return {**status, "conditions": conditions}


def review(
    paths: list[str],
    tmp_path: Path,
    class_name: str,
    count: int,
    capsys: pytest.CaptureFixture[str],
) -> dict[str, Any]:
    path = review_file(tmp_path, vmi_request(class_name, count))
    args = ["review", *objects_args(paths), "--vgpu-entitled", str(path)]
    response: dict[str, Any] = gpuclass(args, capsys)["response"]
    return response


def reasons(response: dict[str, Any]) -> list[str]:
    return [c["reason"] for c in response.get("status", {}).get("details", {}).get("causes", [])]


def expected_refusal(status: dict[str, Any]) -> str | None:
    """What the conditions say admission must refuse a class for (contract 4.3, our precedence)."""
    conditions = {c["type"]: c for c in status["conditions"]}
    if conditions["Ready"]["reason"] == "InvalidSpec":
        return "ClassInvalid"
    for kind in ("ResourceNameConflict", "ResourceNameNotPermitted"):
        if conditions[kind]["status"] == "True":
            return kind
    return None


@pytest.mark.parametrize("cluster", list(CLUSTERS))
def test_status_review_and_reconciler_agree(
    cluster: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = CLUSTERS[cluster](tmp_path)
    reference = reconciler_once(paths, capsys)
    assert reference, "every fixture cluster has classes"

    printed = gpuclass(["status", *objects_args(paths)], capsys)
    assert {i["name"]: without_times(i["status"]) for i in printed["items"]} == {
        name: without_times(status) for name, status in reference.items()
    }

    for name, status in reference.items():
        response = review(paths, tmp_path, name, 1, capsys)
        if reasons(response) == ["ClassDeleting"]:
            continue  # deletion is in the metadata, not the status
        refusal = expected_refusal(status)
        if refusal is not None:
            assert reasons(response) == [refusal], (name, response)
            continue
        assert response["allowed"] is True, (name, response)
        shortage = any("free units now" in w for w in response.get("warnings", []))
        assert shortage is (status["maxFreePerNode"] == 0), (name, status, response)
        units = status["maxUnitsPerNode"]
        if units and _is_uncapped_passthrough(paths, name):
            assert reasons(review(paths, tmp_path, name, units + 1, capsys)) == ["MaxCountExceeded"]
            assert "MaxCountExceeded" not in reasons(review(paths, tmp_path, name, units, capsys))


def _is_uncapped_passthrough(paths: list[str], name: str) -> bool:
    record = load_snapshot(paths).classes[name]
    return (
        record.spec is not None
        and record.spec.mode == "passthrough"
        and record.spec.max_count is None
    )


def test_duplicates_count_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The regression itself: the same files twice must not double `free`."""
    once = gpuclass(["status", "--objects", str(EXAMPLES)], capsys)["items"]
    twice = gpuclass(["status", "--objects", str(EXAMPLES), "--objects", str(EXAMPLES)], capsys)[
        "items"
    ]
    # byol 8, licensed 7, reserved 0 (its only nodes are tainted or cordoned), whole 2
    assert (
        [i["status"]["free"] for i in twice]
        == [i["status"]["free"] for i in once]
        == [
            8,
            7,
            0,
            2,
        ]
    )


@pytest.mark.parametrize(
    ("namespace", "flag", "permitted"),
    [
        pytest.param("cozy-kubevirt", [], True, id="default-namespace"),
        pytest.param("other", [], False, id="cr-elsewhere-ignored"),
        pytest.param("other", ["--kubevirt-namespace", "other"], True, id="flag-names-it"),
        pytest.param(
            None, ["--kubevirt-namespace", "other"], True, id="namespace-less-cr-is-the-one"
        ),
    ],
)
def test_kubevirt_namespace_is_honoured(
    namespace: str | None,
    flag: list[str],
    permitted: bool,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    paths = _without_kubevirt(tmp_path, [_kubevirt(namespace, "example.com/whole-gpu")])
    items = gpuclass(["status", *objects_args(paths), *flag], capsys)["items"]
    whole = {i["name"]: i["status"] for i in items}["example-whole-gpu"]
    condition = {c["type"]: c for c in whole["conditions"]}["ResourceNameNotPermitted"]
    assert condition["status"] == ("False" if permitted else "True")
    once = reconciler_once(paths, capsys, *flag)
    assert without_times(once["example-whole-gpu"]) == without_times(whole)
