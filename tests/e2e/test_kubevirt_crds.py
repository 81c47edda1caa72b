"""KubeVirt's real CRDs in tests/controlplane/crds/: where they come from, and that they bite.

The files are written by tests/controlplane/kubevirt-crds/ (a small Go program calling
virt-operator's own CRD constructors from the kubevirt.io/kubevirt module pinned in its
go.mod). Two checks keep them honest:

- when that module's source is in the local Go module cache, every schema in the
  committed files must equal KubeVirt's `validations_generated.go` with descriptions
  stripped (read here in Python, independently of the Go program), and when the
  generator has been built here, its output must equal the committed files;
- on the real API server the schema is structural: under `fieldValidation=Strict` a
  field KubeVirt does not know is refused, and without it the field is pruned, so a
  webhook patch KubeVirt would not keep cannot pass unnoticed.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from tests.builders import changed_fields
from tests.conftest import NOT_KUBEVIRT, golden_cases
from tests.controlplane import ControlPlane, unique_name
from tests.controlplane.api import ApiError

ROOT = Path(__file__).resolve().parents[2]
GENERATOR = ROOT / "tests" / "controlplane" / "kubevirt-crds"
CRDS = ROOT / "tests" / "controlplane" / "crds"
FILES = {
    "virtualmachineinstance": "kubevirt.io_virtualmachineinstances.yaml",
    "virtualmachine": "kubevirt.io_virtualmachines.yaml",
    "kubevirt": "kubevirt.io_kubevirts.yaml",
}
SCHEMA_LISTS = ("allOf", "anyOf", "oneOf")
# Every VMI webhook configuration skips kube-system (docs/contract.md section 3), so objects sent
# there meet KubeVirt's schema alone, whatever webhooks another test left registered.
SCHEMA_ONLY_NAMESPACE = "kube-system"
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the files are large


def pinned_version() -> str:
    for line in (GENERATOR / "go.mod").read_text().splitlines():
        parts = line.split()
        if parts[:1] == ["kubevirt.io/kubevirt"] and parts[1].startswith("v"):
            return parts[1]
        if parts[:2] == ["require", "kubevirt.io/kubevirt"]:
            return parts[2]
    raise AssertionError("go.mod pins no kubevirt.io/kubevirt version")


def committed(key: str) -> dict[str, Any]:
    crd: dict[str, Any] = yaml.load((CRDS / FILES[key]).read_text(), Loader=LOADER)
    return crd


def strip_descriptions(schema: Any) -> Any:
    """A schema without descriptions; property *names* such as `description` stay."""
    if not isinstance(schema, dict):
        return schema
    out = {k: v for k, v in schema.items() if k != "description"}
    for key in ("properties", "patternProperties"):
        if isinstance(out.get(key), dict):
            out[key] = {name: strip_descriptions(p) for name, p in out[key].items()}
    for key in ("items", "additionalProperties", "not"):
        if isinstance(out.get(key), dict):
            out[key] = strip_descriptions(out[key])
    for key in SCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [strip_descriptions(s) for s in out[key]]
    return out


def module_source() -> Path | None:
    """validations_generated.go of the pinned module: from the Go module cache, or (in CI,
    GPUCLASS_REQUIRE_CONTROL_PLANE=1, which fetches the control-plane modules anyway) from
    the module proxy, checked against the go.sum beside the generator (about 10 MB)."""
    if not shutil.which("go"):
        return None
    online = os.environ.get("GPUCLASS_REQUIRE_CONTROL_PLANE") == "1"
    env = {**os.environ, "GOFLAGS": "-mod=readonly", "GOTOOLCHAIN": "local"}
    if not online:
        env["GOPROXY"] = "off"  # the local cache only: no network from a unit test
    done = subprocess.run(
        ["go", "mod", "download", "-json", "kubevirt.io/kubevirt"],
        cwd=GENERATOR,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    try:
        folder = json.loads(done.stdout).get("Dir")
    except ValueError:
        return None
    if not folder:
        return None
    path = Path(folder) / "pkg/virt-operator/resource/generate/components/validations_generated.go"
    return path if path.is_file() else None


def upstream_schemas(source: Path) -> dict[str, Any]:
    """Name -> openAPIV3Schema of the Go map literal `CRDsValidation` (raw-string YAML)."""
    found = {}
    for name, text in re.findall(r'^\t"(\w+)": `(.*?)`,$', source.read_text(), re.M | re.S):
        found[name] = yaml.load(text, Loader=LOADER)["openAPIV3Schema"]
    return found


def test_files_name_the_kubevirt_version_and_license() -> None:
    version = pinned_version()
    for name in FILES.values():
        header = (CRDS / name).read_text().split("\napiVersion:", 1)[0]
        assert f"kubevirt.io/kubevirt {version}" in header, name
        assert "Apache License, Version 2.0" in header, name


def test_schemas_are_structural_not_stand_ins() -> None:
    for key in FILES:
        for version in committed(key)["spec"]["versions"]:
            schema = version["schema"]["openAPIV3Schema"]
            assert not schema.get("x-kubernetes-preserve-unknown-fields"), key
            assert "spec" in schema["properties"], key


def test_committed_schemas_equal_kubevirts_own() -> None:
    source = module_source()
    if source is None:
        pytest.skip(f"kubevirt.io/kubevirt {pinned_version()} is not in the Go module cache")
    upstream = upstream_schemas(source)
    for key in FILES:
        expected = strip_descriptions(upstream[key])
        for version in committed(key)["spec"]["versions"]:
            assert version["schema"]["openAPIV3Schema"] == expected, (key, version["name"])


def cached_generator() -> Path | None:
    """The generator binary generate.sh keeps in the assets cache, if it was built here."""
    if not shutil.which("go"):
        return None
    go_version = subprocess.run(
        ["go", "env", "GOVERSION"], capture_output=True, text=True, check=False
    ).stdout.strip()
    root = os.environ.get("GPUCLASS_ASSETS_CACHE") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpuclass" / "assets"
    )
    binary = Path(root) / f"kubevirt-crds-{pinned_version()}-{go_version}" / "kubevirt-crds"
    return binary if binary.is_file() else None


def test_committed_files_are_what_the_generator_writes(tmp_path: Path) -> None:
    binary = cached_generator()
    if binary is None:
        pytest.skip("generator not built here (tests/controlplane/kubevirt-crds/generate.sh)")
    subprocess.run([str(binary), str(tmp_path)], check=True, timeout=120)
    for name in FILES.values():
        assert (tmp_path / name).read_text() == (CRDS / name).read_text(), name


def _vmi(extra_device_field: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": unique_name("schema"), "namespace": "default"},
        "spec": {
            "domain": {
                "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]}
                | extra_device_field,
                "memory": {"guest": "1Gi"},
            },
            "volumes": [{"name": "root", "containerDisk": {"image": "example.org/guest:1"}}],
        },
    }


def test_unknown_vmi_fields_are_refused_strictly_and_pruned_otherwise(
    control_plane: ControlPlane,
) -> None:
    api = control_plane.admin
    obj = _vmi({"notAKubeVirtField": {"x": 1}})
    with pytest.raises(ApiError) as info:
        api.create(obj, dryRun="All")  # Api.create asks for fieldValidation=Strict
    assert 'unknown field "spec.domain.devices.notAKubeVirtField"' in str(info.value)
    lax = api.request(
        "POST", api.object_path(obj, collection=True), body=obj, params={"dryRun": "All"}
    )
    assert lax.status_code == 201, lax.text
    assert "notAKubeVirtField" not in json.dumps(lax.json()["spec"])


def test_vmi_field_types_are_validated(control_plane: ControlPlane) -> None:
    obj = _vmi({"gpus": [{"name": "gpu1", "deviceName": 7}]})
    with pytest.raises(ApiError) as info:
        control_plane.admin.create(obj, dryRun="All")
    assert info.value.status_code == 422
    assert "spec.domain.devices.gpus[0].deviceName" in str(info.value)


def _pointer(obj: Any, pointer: str) -> Any:
    for part in pointer.lstrip("/").split("/"):
        obj = obj[part.replace("~1", "/").replace("~0", "~")]
    return obj


def test_every_golden_vmi_patch_survives_kubevirts_schema(control_plane: ControlPlane) -> None:
    """Each golden VMI patch, applied to its request object and sent (dry run, default field
    validation) to the API server: every field the patch changed comes back unpruned. Fields
    the fixtures make up on purpose (unknown to KubeVirt) are pruned; ours never are."""
    api = control_plane.admin
    ns = SCHEMA_ONLY_NAMESPACE
    checked = 0
    for case in golden_cases():
        response = case.expected()["response"]
        request = case.request["request"]
        if request["kind"]["kind"] != "VirtualMachineInstance" or "patch" not in response:
            continue
        original = copy.deepcopy(request["object"])
        original["metadata"] = {**original["metadata"], "namespace": ns}
        operations = json.loads(base64.b64decode(response["patch"]))
        patched = jsonpatch.apply_patch(original, operations)
        answer = api.request(
            "POST",
            api.object_path(patched, collection=True),
            body=patched,
            params={"dryRun": "All"},
        )
        assert answer.status_code == 201, (case.name, answer.text)
        stored = answer.json()
        for field in changed_fields(original, patched):
            assert _pointer(stored, field) == _pointer(patched, field), (case.name, field)
        checked += 1
    assert checked >= 10  # the fixtures hold that many VMI mutations


def test_golden_vmi_requests_are_real_kubevirt_objects(control_plane: ControlPlane) -> None:
    """The fixtures users' CI posts must look like what KubeVirt sends: each VMI request
    object passes KubeVirt's schema under strict field validation, but for the listed ones."""
    api = control_plane.admin
    ns = SCHEMA_ONLY_NAMESPACE
    refused = {}
    for case in golden_cases():
        request = case.request["request"]
        if request["kind"]["kind"] != "VirtualMachineInstance" or not request["object"]:
            continue
        obj = copy.deepcopy(request["object"])
        obj["metadata"] = {**obj["metadata"], "namespace": ns}
        try:
            api.create(obj, dryRun="All")
        except ApiError as exc:
            refused[case.name] = str(exc)
    assert set(refused) == set(NOT_KUBEVIRT), refused
