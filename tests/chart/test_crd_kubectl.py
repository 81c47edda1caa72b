"""What a hoster sees with kubectl: `get gpuc` columns and `explain gpuclass.spec...`.

kubectl is the one built from the same k8s.io/kubernetes module as the API server
(the `kubectl` fixture); nothing is skipped for want of a system kubectl. The
expected columns, fields, types and descriptions are read from the chart's CRD
file, not from the server, so a CRD that the server publishes differently fails.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.builders import with_status
from tests.controlplane import ControlPlane, unique_name

pytestmark = pytest.mark.controlplane

CRD = (
    Path(__file__).resolve().parents[2] / "charts" / "gpuclass" / "templates" / "crd-gpuclass.yaml"
)
FIELD = re.compile(r"^  (\w+)\t<([^>]+)>( -required-)?$")


def crd_version() -> dict[str, Any]:
    version: dict[str, Any] = yaml.safe_load(CRD.read_text())["spec"]["versions"][0]
    return version


def schema_at(path: str) -> dict[str, Any]:
    """The CRD's schema node for a dotted path below the object (e.g. "spec.source")."""
    node: dict[str, Any] = crd_version()["schema"]["openAPIV3Schema"]
    for part in path.split("."):
        node = node["properties"][part]
    return node


def run(kubectl: Path, plane: ControlPlane, *args: str) -> str:
    done = subprocess.run(
        [str(kubectl), "--kubeconfig", str(plane.admin_kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def explained_fields(text: str) -> dict[str, tuple[str, bool]]:
    """Field name -> (type as kubectl shows it, required) from `kubectl explain` output."""
    fields = {}
    for line in text.split("FIELDS:", 1)[1].splitlines():
        match = FIELD.match(line)
        if match:
            fields[match.group(1)] = (match.group(2), bool(match.group(3)))
    return fields


def shown_type(schema: dict[str, Any]) -> str:
    kind = str(schema["type"])
    if kind == "array":
        return f"[]{shown_type(schema['items'])}"
    return {"object": "Object"}.get(kind, kind)


def test_kubectl_get_gpuc_shows_the_printer_columns(
    control_plane: ControlPlane, kubectl: Path
) -> None:
    name = unique_name("kubectl")
    with_status(control_plane, name)  # free 3, maxFreePerNode 2, Ready True
    header, line = run(kubectl, control_plane, "get", "gpuc", name).splitlines()
    printer = crd_version()["additionalPrinterColumns"]
    # priority-1 columns appear only with `-o wide`
    columns = ["NAME"] + [c["name"].upper() for c in printer if c.get("priority", 0) == 0]
    assert header.split() == columns
    assert line.split()[:6] == [name, "passthrough", f"example.com/{name}", "3", "2", "True"]
    listed = run(kubectl, control_plane, "get", "gpuclasses", name, "-o", "name")
    assert listed.strip() == f"gpuclass.cozystack.io/{name}"


@pytest.mark.parametrize(
    "path", ["spec", "spec.source", "spec.source.devicePlugin", "spec.license"]
)
def test_kubectl_explain_lists_the_crd_fields(
    control_plane: ControlPlane, kubectl: Path, path: str
) -> None:
    schema = schema_at(path)
    shown = explained_fields(run(kubectl, control_plane, "explain", f"gpuclass.{path}"))
    required = set(schema.get("required", []))
    assert shown == {
        name: (shown_type(prop), name in required) for name, prop in schema["properties"].items()
    }


@pytest.mark.parametrize("path", ["spec.memory", "spec.maxCount", "spec.displayName"])
def test_kubectl_explain_shows_the_crd_descriptions(
    control_plane: ControlPlane, kubectl: Path, path: str
) -> None:
    text = run(kubectl, control_plane, "explain", f"gpuc.{path}")
    description = text.split("DESCRIPTION:", 1)[1]
    assert " ".join(schema_at(path)["description"].split()) in " ".join(description.split())
    assert f"FIELD: {path.rsplit('.', 1)[-1]} <{shown_type(schema_at(path))}>" in text


def test_kubectl_explain_names_the_kind_and_group(
    control_plane: ControlPlane, kubectl: Path
) -> None:
    text = run(kubectl, control_plane, "explain", "gpuclasses")
    assert re.search(r"^GROUP:\s+cozystack\.io$", text, re.M)
    assert re.search(r"^KIND:\s+GPUClass$", text, re.M)
    assert re.search(r"^VERSION:\s+v1alpha1$", text, re.M)
    top = crd_version()["schema"]["openAPIV3Schema"]["description"]
    assert top in " ".join(text.split())
