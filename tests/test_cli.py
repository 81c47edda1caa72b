"""`gpuclass` (docs/contract.md section 7): validate, review and status, in-process and as the installed script."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuclass.shared.catalog import Policy
from gpuclass.shared.cli import main, offline_catalog
from gpuclass.shared.review import review

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
REVIEWS = sorted((EXAMPLES / "reviews").glob("*.json"))
SCRIPT = Path(sys.executable).parent / "gpuclass"


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def script(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [str(SCRIPT), *args], input=stdin, capture_output=True, timeout=60, check=False
    )


def gpuclass_doc(name: str, resource: str = "example.com/gpu", **spec: Any) -> dict[str, Any]:
    body = {
        "vendor": "v",
        "model": "m",
        "mode": "passthrough",
        "source": {"devicePlugin": {"resourceName": resource}},
    }
    body.update(spec)
    return {
        "apiVersion": "cozystack.io/v1alpha1",
        "kind": "GPUClass",
        "metadata": {"name": name},
        "spec": body,
    }


def write_yaml(path: Path, *docs: Any) -> Path:
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path


# validate


def test_validate_examples_exit_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["validate", str(EXAMPLES / "catalog")], capsys) == (0, "", "")


def test_validate_line_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_yaml(tmp_path / "bad.yaml", gpuclass_doc("Bad_Name", memory="0"))
    code, out, _ = run(["validate", str(path)], capsys)
    assert code == 1
    lines = out.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"{path}: Bad_Name: metadata.name: must be a DNS label")
    assert lines[1].startswith(f"{path}: Bad_Name: spec.memory: must be a positive quantity")


def test_validate_unnamed_class(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = gpuclass_doc("x")
    del doc["metadata"]
    path = write_yaml(tmp_path / "c.yaml", doc)
    code, out, _ = run(["validate", str(path)], capsys)
    assert code == 1
    assert out.splitlines() == [
        f"{path}: (no name): metadata.name: required: the tenant-facing class name, a DNS label"
    ]


def test_validate_refuses_a_status_stanza(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = gpuclass_doc("ok")
    doc["status"] = {"free": 1}
    path = write_yaml(tmp_path / "c.yaml", doc)
    code, out, _ = run(["validate", str(path)], capsys)
    assert code == 1
    assert [line.split(": ")[:3] for line in out.splitlines()] == [[str(path), "ok", "status"]]


def test_validate_refuses_a_shared_resource_name_across_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = write_yaml(tmp_path / "a.yaml", gpuclass_doc("a", "example.com/shared"))
    second = write_yaml(tmp_path / "b.yaml", gpuclass_doc("b", "example.com/shared"))
    code, out, _ = run(["validate", str(first), str(second)], capsys)
    assert code == 1
    assert out.splitlines() == [
        f"{second}: b: spec.source.devicePlugin.resourceName: example.com/shared is already used by class a; "
        "use a different advertised resource for each offer"
    ]


def test_validate_multi_document_and_list(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    multi = write_yaml(
        tmp_path / "multi.yaml",
        gpuclass_doc("one", "example.com/one"),
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "not-a-class"}},
        gpuclass_doc("two", "example.com/two", mode="mig"),
    )
    listed = write_yaml(
        tmp_path / "list.yaml",
        {
            "apiVersion": "v1",
            "kind": "List",
            "items": [
                gpuclass_doc("three", "example.com/three"),
                gpuclass_doc("Four", "example.com/four"),
            ],
        },
    )
    code, out, _ = run(["validate", str(tmp_path)], capsys)
    assert code == 1
    assert [line.split(": ")[:3] for line in out.splitlines()] == [
        [str(listed), "Four", "metadata.name"],
        [str(multi), "two", "spec.mode"],
    ]


def test_validate_no_classes_found(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_yaml(tmp_path / "cm.yaml", {"kind": "ConfigMap", "metadata": {"name": "x"}})
    code, out, err = run(["validate", str(path)], capsys)
    assert (code, out) == (0, "")
    assert "no GPUClass objects found" in err


def test_validate_unreadable_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("kind: GPUClass\nmetadata: {name: x\n")
    code, out, err = run(["validate", str(path)], capsys)
    assert (code, out) == (1, "")
    assert err.startswith(f"gpuclass validate: {path}: not valid YAML")


def test_validate_exit_codes_from_the_installed_script(tmp_path: Path) -> None:
    assert script("validate", str(EXAMPLES / "catalog")).returncode == 0
    bad = write_yaml(tmp_path / "bad.yaml", gpuclass_doc("x", mode="mig"))
    result = script("validate", str(bad))
    assert result.returncode == 1
    assert result.stdout.decode().startswith(f"{bad}: x: spec.mode: ")


# review

OBJECTS_ARGS = ["--objects", str(EXAMPLES)]


@pytest.mark.parametrize("path", REVIEWS, ids=[p.stem for p in REVIEWS])
@pytest.mark.parametrize("entitled", [False, True], ids=["platform-off", "vgpu-entitled"])
def test_review_prints_what_the_library_answers(
    path: Path, entitled: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["review", *OBJECTS_ARGS, *(["--vgpu-entitled"] if entitled else []), str(path)]
    code, out, err = run(args, capsys)
    assert (code, err) == (0, "")
    expected = review(
        json.loads(path.read_text()),
        offline_catalog([str(EXAMPLES)], Policy(vgpu_entitled=entitled)),
    )
    assert json.loads(out) == expected


def test_vgpu_entitled_flag_changes_the_answer(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(EXAMPLES / "reviews" / "vmi-licensed-vgpu.json")
    _, off, _ = run(["review", *OBJECTS_ARGS, path], capsys)
    _, on, _ = run(["review", *OBJECTS_ARGS, "--vgpu-entitled", path], capsys)
    assert json.loads(off)["response"]["allowed"] is False
    assert json.loads(on)["response"]["allowed"] is True


def _not_review_cases(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    cases: dict[str, tuple[bytes | None, str]] = {
        "not-json": (b"{not json", "not JSON"),
        "empty-file": (b"", "not JSON"),
        "json-list": (b"[1, 2]", "body must be a JSON object"),
        "not-an-admission-review": (
            b'{"apiVersion": "v1", "kind": "Pod"}',
            "apiVersion must be one of",
        ),
        "missing-request": (
            b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}',
            "request: required",
        ),
        "unknown-kind": (
            json.dumps(
                {
                    "apiVersion": "admission.k8s.io/v1",
                    "kind": "AdmissionReview",
                    "request": {
                        "uid": "u",
                        "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
                        "operation": "CREATE",
                    },
                }
            ).encode(),
            "does not admit apps/Deployment",
        ),
        "eight-mib": (b" " * (8 * 1024 * 1024), "larger than 7 MiB"),
        "missing-file": (None, "No such file or directory"),
    }
    out = {}
    for name, (data, message) in cases.items():
        path = tmp_path / f"{name}.json"
        if data is not None:
            path.write_bytes(data)
        out[name] = (path, message)
    return out


NOT_REVIEWS = [
    "not-json",
    "empty-file",
    "json-list",
    "not-an-admission-review",
    "missing-request",
    "unknown-kind",
    "eight-mib",
    "missing-file",
]


@pytest.mark.parametrize("case", NOT_REVIEWS)
def test_review_refuses_what_is_not_a_review(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, message = _not_review_cases(tmp_path)[case]
    code, out, err = run(["review", *OBJECTS_ARGS, str(path)], capsys)
    assert (code, out) == (2, "")
    assert err.startswith("gpuclass review: ") and err.count("\n") == 1
    assert message in err


@pytest.mark.parametrize("case", ["not-json", "missing-request", "eight-mib", "missing-file"])
def test_installed_script_exit_2_one_line_no_traceback(case: str, tmp_path: Path) -> None:
    path, message = _not_review_cases(tmp_path)[case]
    result = script("review", *OBJECTS_ARGS, str(path))
    err = result.stderr.decode()
    assert result.returncode == 2
    assert result.stdout == b""
    assert err.count("\n") == 1 and "Traceback" not in err and message in err


def test_review_reads_stdin() -> None:
    path = EXAMPLES / "reviews" / "vmi-whole-gpu.json"
    result = script("review", *OBJECTS_ARGS, "-", stdin=path.read_bytes())
    assert result.returncode == 0, result.stderr
    expected = review(json.loads(path.read_text()), offline_catalog([str(EXAMPLES)], Policy()))
    assert json.loads(result.stdout) == expected
    assert "patch" in expected["response"], "the example resolves to a patch"


@pytest.mark.parametrize(
    ("stdin", "message"),
    [
        pytest.param(b"not json", "not JSON", id="not-json"),
        pytest.param(b"", "not JSON", id="empty"),
        pytest.param(
            b'{"kind": "AdmissionReview"}', "apiVersion must be one of", id="no-api-version"
        ),
    ],
)
def test_review_stdin_errors_exit_2(stdin: bytes, message: str) -> None:
    result = script("review", "-", stdin=stdin)
    err = result.stderr.decode()
    assert result.returncode == 2 and result.stdout == b""
    assert err.startswith("gpuclass review: ") and message in err and "Traceback" not in err


def test_review_with_unreadable_objects_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(["review", "--objects", str(tmp_path / "absent"), str(REVIEWS[0])], capsys)
    assert (code, out) == (2, "")
    assert "no such file or folder" in err


# status


def _expected_figures() -> dict[str, tuple[int, int, int]]:
    """free, maxFreePerNode, maxUnitsPerNode of each example class, counted from the example files."""
    docs = [
        d
        for f in sorted((EXAMPLES / "cluster").glob("*.yaml"))
        for d in yaml.safe_load_all(f.read_text())
        if d
    ]
    objects = [i for d in docs for i in (d["items"] if d["kind"] == "List" else [d])]
    nodes = [o for o in objects if o["kind"] == "Node"]
    pods = [
        o for o in objects if o["kind"] == "Pod" and o["status"]["phase"] in ("Pending", "Running")
    ]
    classes = [yaml.safe_load(f.read_text()) for f in sorted((EXAMPLES / "catalog").glob("*.yaml"))]
    result = {}
    for cls in classes:
        resource = cls["spec"]["source"]["devicePlugin"]["resourceName"]
        tolerations = cls["spec"].get("tolerations", [])
        free, max_free, max_units = 0, 0, 0
        for node in nodes:
            taints = [
                t
                for t in node.get("spec", {}).get("taints", [])
                if t["effect"] != "PreferNoSchedule"
            ]
            if not all(
                any(t["key"] == tol["key"] and tol["operator"] == "Exists" for tol in tolerations)
                for t in taints
            ):
                continue
            units = int(node["status"]["allocatable"].get(resource, 0))
            if resource not in node["status"]["allocatable"]:
                continue
            max_units = max(max_units, units)
            ready = any(
                c["type"] == "Ready" and c["status"] == "True" for c in node["status"]["conditions"]
            )
            if not ready or node.get("spec", {}).get("unschedulable"):
                continue
            used = 0
            for pod in pods:
                if pod["spec"]["nodeName"] != node["metadata"]["name"]:
                    continue
                for container in pod["spec"]["containers"]:
                    res = container.get("resources", {})
                    amount = res.get("requests", {}).get(
                        resource, res.get("limits", {}).get(resource, 0)
                    )
                    used += int(amount)
            node_free = max(units - used, 0)
            free += node_free
            max_free = max(max_free, node_free)
        result[cls["metadata"]["name"]] = (free, max_free, max_units)
    return result


def _status(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, dict[str, Any]]:
    code, out, err = run(["status", *args], capsys)
    assert (code, err) == (0, "")
    document = json.loads(out)
    assert list(document) == ["items"]
    return {item["name"]: item["status"] for item in document["items"]}


def _figures(statuses: dict[str, dict[str, Any]]) -> dict[str, tuple[int, int, int]]:
    return {n: (s["free"], s["maxFreePerNode"], s["maxUnitsPerNode"]) for n, s in statuses.items()}


def test_status_of_the_examples(capsys: pytest.CaptureFixture[str]) -> None:
    statuses = _status(OBJECTS_ARGS, capsys)
    expected = _expected_figures()
    assert _figures(statuses) == expected
    assert any(free < units for free, _, units in expected.values()), (
        "the examples exercise pods and not-ready nodes"
    )
    for name, status in statuses.items():
        conditions = {c["type"]: c["status"] for c in status["conditions"]}
        # Every example class is ready; a VM can start (6.8) exactly where a node has a free unit.
        assert conditions == {
            "ResourceNameConflict": "False",
            "ResourceNameNotPermitted": "False",
            "LicenseSecretMissing": "False",
            "Ready": "True",
            "Schedulable": "True" if expected[name][1] > 0 else "False",
        }
    assert any(max_free == 0 for _, max_free, _ in expected.values()), (
        "the examples hold a class with 0 free, explained"
    )


def test_status_never_reads_status_from_the_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "examples"
    shutil.copytree(EXAMPLES, copy)
    target = copy / "catalog" / "example-whole-gpu.yaml"
    doc = yaml.safe_load(target.read_text())
    doc["status"] = {
        "free": 999,
        "maxFreePerNode": 999,
        "maxUnitsPerNode": 999,
        "observedGeneration": 42,
        "conditions": [
            {
                "type": t,
                "status": "True",
                "reason": "Bogus",
                "message": "bogus",
                "lastTransitionTime": "1999-01-01T00:00:00Z",
            }
            for t in (
                "ResourceNameConflict",
                "ResourceNameNotPermitted",
                "LicenseSecretMissing",
                "Ready",
            )
        ],
    }
    target.write_text(yaml.safe_dump(doc))
    statuses = _status(["--objects", str(copy)], capsys)
    assert _figures(statuses) == _expected_figures()
    whole = statuses["example-whole-gpu"]
    assert whole["observedGeneration"] == 0
    assert {c["reason"] for c in whole["conditions"]}.isdisjoint({"Bogus"})
    assert "1999" not in json.dumps(statuses), (
        "lastTransitionTime is not taken from a status in the files"
    )


def test_status_with_no_objects_prints_no_items(capsys: pytest.CaptureFixture[str]) -> None:
    assert _status([], capsys) == {}


def test_status_unreadable_objects(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["status", "--objects", str(tmp_path / "absent")], capsys)
    assert (code, out) == (2, "")
    assert err.startswith("gpuclass status: ") and "no such file or folder" in err


def test_status_from_the_installed_script() -> None:
    result = script("status", *OBJECTS_ARGS)
    assert result.returncode == 0
    figures = {
        i["name"]: (
            i["status"]["free"],
            i["status"]["maxFreePerNode"],
            i["status"]["maxUnitsPerNode"],
        )
        for i in json.loads(result.stdout)["items"]
    }
    assert figures == _expected_figures()


# --help


@pytest.mark.parametrize(
    ("args", "mentions"),
    [
        pytest.param([], ["validate", "review", "status"], id="top"),
        pytest.param(["validate"], ["FILE"], id="validate"),
        pytest.param(
            ["review"], ["--objects", "--vgpu-entitled", "REVIEW", "standard input"], id="review"
        ),
        pytest.param(["status"], ["--objects"], id="status"),
    ],
)
def test_help(args: list[str], mentions: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([*args, "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: gpuclass {' '.join(args)}".rstrip())
    for word in mentions:
        assert word in out


def test_unknown_subcommand_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["frobnicate"])
    assert info.value.code == 2
    assert "usage: gpuclass" in capsys.readouterr().err
