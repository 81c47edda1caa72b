"""One verdict on a stored GPUClass: `gpuclass validate`, admission and status agree.

A class the GPUClass webhook would refuse can still be stored (offline files, a
bypassed webhook). Each row is such a class; all three tools run on the same
files through the `gpuclass` command line, and each must name the same field:
validate exits 1 with it, a VMI selecting the class is refused (403,
`ClassInvalid`) naming it, and its status reports zero units with `Ready=False`,
reason `InvalidSpec`, naming it. A metadata-only update of such a class passes
(ratcheting), so finalizers can always be added and removed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuclass.shared.cli.main import main
from tests.builders import KUBEVIRT_DEVICES, KUBEVIRT_NODE_LABELS, review_file, vmi_request

RESOURCE = "example.com/stored-gpu"


def stored_class(**spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "vendor": "example",
        "model": "m",
        "mode": "passthrough",
        "source": {"devicePlugin": {"resourceName": RESOURCE}},
    }
    body.update(spec)
    return {
        "apiVersion": "cozystack.io/v1alpha1",
        "kind": "GPUClass",
        "metadata": {"name": "stored"},
        "spec": body,
    }


INVALID = [
    pytest.param(
        {"source": {"devicePlugin": {"resourceName": "kubernetes.io/gpu"}}},
        "spec.source.devicePlugin.resourceName",
        id="kubernetes-io-resource",
    ),
    pytest.param({"memory": "-16Gi"}, "spec.memory", id="negative-memory"),
    pytest.param({"profile": "p"}, "spec.profile", id="passthrough-with-profile"),
    pytest.param({"license": {"secretName": "src"}}, "spec.license", id="passthrough-with-license"),
    pytest.param(
        {"tolerations": [{"operator": "Equal", "value": "x"}]},
        "spec.tolerations[0].key",
        id="keyless-equal-toleration",
    ),
    pytest.param({"mode": "vgpu"}, "spec.profile", id="vgpu-without-profile"),
]


def cluster(tmp_path: Path, gpuclass: dict[str, Any]) -> Path:
    folder = tmp_path / "cluster"
    folder.mkdir()
    resource = gpuclass["spec"]["source"]["devicePlugin"]["resourceName"]
    objects = [
        gpuclass,
        {
            "kind": "Node",
            "metadata": {"name": "n1", "labels": dict(KUBEVIRT_NODE_LABELS)},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "allocatable": {**KUBEVIRT_DEVICES, resource: "4", RESOURCE: "4"},
            },
        },
        {
            "kind": "KubeVirt",
            "status": {"phase": "Deployed"},
            "metadata": {"name": "kubevirt", "namespace": "cozy-kubevirt"},
            "spec": {
                "configuration": {
                    "permittedHostDevices": {"pciHostDevices": [{"resourceName": resource}]}
                }
            },
        },
        {"kind": "Namespace", "metadata": {"name": "tenant-root"}},
    ]
    (folder / "objects.yaml").write_text(yaml.safe_dump_all(objects))
    return folder


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(list(args))
    return code, capsys.readouterr().out


@pytest.mark.parametrize(("spec", "field"), INVALID)
def test_validate_admission_and_status_name_the_same_cause(
    spec: dict[str, Any], field: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = cluster(tmp_path, stored_class(**spec))

    code, out = run(capsys, "validate", str(folder))
    assert code == 1 and f": stored: {field}: " in out

    code, out = run(
        capsys,
        "review",
        "--objects",
        str(folder),
        "--vgpu-entitled",
        str(review_file(tmp_path, vmi_request())),
    )
    response = json.loads(out)["response"]
    assert code == 0 and response["allowed"] is False
    assert response["status"]["code"] == 403
    [cause] = response["status"]["details"]["causes"]
    assert cause["reason"] == "ClassInvalid" and f"({field}: " in cause["message"]
    assert "patch" not in response  # no GPU entries, no license volume

    code, out = run(capsys, "status", "--objects", str(folder))
    [item] = json.loads(out)["items"]
    status = item["status"]
    assert (status["free"], status["maxFreePerNode"], status["maxUnitsPerNode"]) == (0, 0, 0)
    ready = {c["type"]: c for c in status["conditions"]}["Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert f"{field}: " in ready["message"]
    assert sorted(c["type"] for c in status["conditions"]) == sorted(
        [
            "ResourceNameConflict",
            "ResourceNameNotPermitted",
            "LicenseSecretMissing",
            "Ready",
            "Schedulable",
        ]
    )
    schedulable = {c["type"]: c for c in status["conditions"]}["Schedulable"]
    assert (schedulable["status"], schedulable["reason"]) == ("False", "ClassNotReady")  # 6.8


def test_a_valid_class_is_selectable_and_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The control row: the same files with a valid class give units and an allowed review."""
    folder = cluster(tmp_path, stored_class())
    assert run(capsys, "validate", str(folder))[0] == 0
    code, out = run(
        capsys, "review", "--objects", str(folder), str(review_file(tmp_path, vmi_request()))
    )
    assert code == 0 and json.loads(out)["response"]["allowed"] is True
    [item] = json.loads(run(capsys, "status", "--objects", str(folder))[1])["items"]
    assert item["status"]["free"] == 4
    ready = {c["type"]: c for c in item["status"]["conditions"]}["Ready"]
    assert (ready["status"], ready["reason"]) == ("True", "Ready")


def gpuclass_update(new: dict[str, Any], old: dict[str, Any]) -> dict[str, Any]:
    return {
        "uid": "u",
        "kind": {"group": "cozystack.io", "version": "v1alpha1", "kind": "GPUClass"},
        "operation": "UPDATE",
        "object": new,
        "oldObject": old,
    }


def _with_finalizer(obj: dict[str, Any]) -> dict[str, Any]:
    return {**obj, "metadata": {**obj["metadata"], "finalizers": ["gpu.cozystack.io/in-use"]}}


def _with_display_name(obj: dict[str, Any]) -> dict[str, Any]:
    return {**obj, "spec": {**obj["spec"], "displayName": "renamed"}}


@pytest.mark.parametrize(
    ("change", "allowed"),
    [
        pytest.param(_with_finalizer, True, id="finalizer-added-to-invalid-class"),
        pytest.param(
            lambda o: {**o, "metadata": {"name": "stored", "labels": {"a": "b"}}},
            True,
            id="label-added",
        ),
        pytest.param(_with_display_name, False, id="spec-edit-must-fix-it"),
    ],
)
def test_metadata_only_update_of_an_invalid_stored_class_is_ratcheted(
    change: Any, allowed: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stored = stored_class(memory="-16Gi")
    path = review_file(tmp_path, gpuclass_update(change(stored), stored))
    code, out = run(capsys, "review", str(path))
    response = json.loads(out)["response"]
    assert code == 0 and response["allowed"] is allowed
    if not allowed:
        assert response["status"]["code"] == 422
        assert [c["field"] for c in response["status"]["details"]["causes"]] == ["spec.memory"]


def test_an_invalid_older_class_keeps_its_resource_claim(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A broken edit neither offers units nor hands the pool to a younger class."""
    older = stored_class(memory="-16Gi")
    older["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    younger = stored_class()
    younger["metadata"] = {"name": "younger", "creationTimestamp": "2026-02-01T00:00:00Z"}
    folder = cluster(tmp_path, older)
    (folder / "younger.yaml").write_text(yaml.safe_dump(younger))
    items = {
        i["name"]: i["status"]
        for i in json.loads(run(capsys, "status", "--objects", str(folder))[1])["items"]
    }
    conflict = {c["type"]: c for c in items["younger"]["conditions"]}["ResourceNameConflict"]
    assert conflict["status"] == "True" and "stored" in conflict["message"]
    assert items["younger"]["free"] == 0 and items["stored"]["free"] == 0
