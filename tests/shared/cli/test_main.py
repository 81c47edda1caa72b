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

from gpuclass.shared.cli.main import main
from gpuclass.shared.cli.reviewcmd import offline_catalog
from gpuclass.shared.core.admission.review import review
from gpuclass.shared.core.status.catalog import Policy

ROOT = Path(__file__).resolve().parents[3]
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
        # 600,000 empty lists in 1.8 MB: the webhook's 413 before parsing (envelope.too_many_values)
        "a-million-values": (b"[" + b"[]," * 600_000 + b"[]]", "more than 524288 JSON values"),
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
    "a-million-values",
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


# validate for GitOps CI (issue: machine-readable output, warnings, kind/apiVersion/duplicate checks)

KEYLESS_EXISTS = [{"operator": "Exists"}]  # docs/contract.md section 5: allowed with a warning


def test_validate_prints_warnings_and_exits_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_yaml(tmp_path / "c.yaml", gpuclass_doc("open", tolerations=KEYLESS_EXISTS))
    code, out, err = run(["validate", str(path)], capsys)
    assert (code, out) == (0, "")
    assert f"{path}: open: warning: " in err
    assert "tolerates every taint" in err


def test_fail_on_warn_turns_a_warning_into_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_yaml(tmp_path / "c.yaml", gpuclass_doc("open", tolerations=KEYLESS_EXISTS))
    assert run(["validate", "--fail-on-warn", str(path)], capsys)[0] == 1
    clean = write_yaml(tmp_path / "d.yaml", gpuclass_doc("closed", "example.com/other"))
    assert run(["validate", "--fail-on-warn", str(clean)], capsys)[0] == 0


@pytest.mark.parametrize(
    "kind",
    [
        pytest.param("GpuClass", id="camel-case"),
        pytest.param("gpuclass", id="lower-case"),
        pytest.param("GPUclass", id="one-letter-case"),
        pytest.param("GPUClas", id="letter-missing"),
        pytest.param("GPUClasses", id="plural"),
    ],
)
def test_a_mistyped_kind_is_an_error(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = gpuclass_doc("typo")
    doc["kind"] = kind
    path = write_yaml(tmp_path / "c.yaml", doc)
    code, out, _ = run(["validate", str(path)], capsys)
    assert code == 1
    assert out.startswith(f"{path}: typo: kind: ")
    assert kind in out and "GPUClass" in out


@pytest.mark.parametrize(
    "api_version",
    [
        pytest.param("cozystack.io/v1", id="other-version"),
        pytest.param("example.com/v1alpha1", id="other-group"),
        pytest.param(None, id="missing"),
    ],
)
def test_gpuclass_with_a_wrong_api_version_is_an_error(
    api_version: str | None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = gpuclass_doc("x")
    if api_version is None:
        del doc["apiVersion"]
    else:
        doc["apiVersion"] = api_version
    path = write_yaml(tmp_path / "c.yaml", doc)
    code, out, _ = run(["validate", str(path)], capsys)
    assert code == 1
    assert out.startswith(f"{path}: x: apiVersion: ")
    assert "cozystack.io/v1alpha1" in out


def test_unrelated_kinds_are_skipped_silently(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_yaml(
        tmp_path / "c.yaml",
        gpuclass_doc("ok"),
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}},
    )
    assert run(["validate", str(path)], capsys) == (0, "", "")


def test_a_duplicate_yaml_key_is_an_error_with_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "apiVersion: cozystack.io/v1alpha1\n"
        "kind: GPUClass\n"
        "metadata: {name: x}\n"
        "spec:\n"
        "  vendor: v\n"
        "  model: m\n"
        "  mode: passthrough\n"
        "  mode: vgpu\n"
        "  source: {devicePlugin: {resourceName: example.com/gpu}}\n"
    )
    code, _, err = run(["validate", str(path)], capsys)
    assert code == 1
    assert f"{path}: " in err and "duplicate key 'mode'" in err and "line 8" in err


def test_a_duplicate_json_key_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.json"
    path.write_text(
        '{"apiVersion": "cozystack.io/v1alpha1", "kind": "GPUClass", "metadata": {"name": "a",'
        ' "name": "b"}, "spec": {}}'
    )
    code, _, err = run(["validate", str(path)], capsys)
    assert code == 1
    assert "duplicate key 'name'" in err


def test_two_manifests_with_one_name_name_both_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = write_yaml(tmp_path / "a.yaml", gpuclass_doc("same", "example.com/a"))
    second = write_yaml(tmp_path / "b.yaml", gpuclass_doc("same", "example.com/b"))
    code, out, _ = run(["validate", str(first), str(second)], capsys)
    assert code == 1
    [line] = out.splitlines()
    assert line.startswith(f"{second}: same: metadata.name: ")
    assert str(first) in line


def test_a_file_given_twice_is_not_a_duplicate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_yaml(tmp_path / "a.yaml", gpuclass_doc("once"))
    assert run(["validate", str(path), str(tmp_path)], capsys) == (0, "", "")


def test_every_file_is_reported_when_one_is_unreadable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "a-broken.yaml"
    broken.write_text("kind: GPUClass\nmetadata: {name: x\n")
    bad = write_yaml(tmp_path / "b-bad.yaml", gpuclass_doc("y", mode="mig"))
    missing = tmp_path / "absent.yaml"
    code, out, err = run(["validate", str(tmp_path), str(missing)], capsys)
    assert code == 1
    assert out.startswith(f"{bad}: y: spec.mode: ")
    assert f"gpuclass validate: {broken}: not valid YAML" in err
    assert f"gpuclass validate: {missing}: no such file or folder" in err


def test_only_unreadable_files_still_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("a: [\n")
    code, out, err = run(["validate", str(broken)], capsys)
    assert (code, out) == (1, "")
    assert "no GPUClass objects found" not in err


def _mixed_catalog(tmp_path: Path) -> dict[str, Path]:
    """One valid class, one with two causes, one with a warning, and one unreadable file."""
    return {
        "good": write_yaml(tmp_path / "good.yaml", gpuclass_doc("good", "example.com/good")),
        "bad": write_yaml(
            tmp_path / "bad.yaml", gpuclass_doc("bad", "example.com/bad", mode="mig", memory="0")
        ),
        "warn": write_yaml(
            tmp_path / "warn.yaml",
            gpuclass_doc("warn", "example.com/warn", tolerations=KEYLESS_EXISTS),
        ),
        "broken": _write(tmp_path / "broken.yaml", "kind: GPUClass\nmetadata: {name: x\n"),
    }


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_validate_json_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = _mixed_catalog(tmp_path)
    code, out, _ = run(["validate", "-o", "json", str(tmp_path)], capsys)
    assert code == 1
    document = json.loads(out)
    assert document["version"] == 1 and document["valid"] is False
    assert document["summary"] == {"files": 4, "objects": 3, "errors": 3, "warnings": 1}
    by_path = {f["path"]: f for f in document["files"]}
    assert set(by_path) == {str(p) for p in files.values()}
    assert by_path[str(files["broken"])]["error"]["code"] == "InvalidYAML"
    assert by_path[str(files["broken"])]["objects"] == []
    [bad] = by_path[str(files["bad"])]["objects"]
    assert (bad["kind"], bad["name"], bad["valid"]) == ("GPUClass", "bad", False)
    assert [c["field"] for c in bad["causes"]] == ["spec.mode", "spec.memory"]
    assert all(set(c) == {"field", "message", "code"} for c in bad["causes"])
    [warn] = by_path[str(files["warn"])]["objects"]
    assert warn["valid"] is True and len(warn["warnings"]) == 1
    [good] = by_path[str(files["good"])]["objects"]
    assert (good["valid"], good["causes"], good["warnings"]) == (True, [], [])


def test_validate_junit_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import xml.etree.ElementTree as ET

    files = _mixed_catalog(tmp_path)
    code, out, _ = run(["validate", "-o", "junit", str(tmp_path)], capsys)
    assert code == 1
    root = ET.fromstring(out)
    assert root.tag == "testsuites"
    cases = root.findall("./testsuite/testcase")
    # a test case per object, and one for the file that could not be read
    assert len(cases) == 4
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("4", "1", "1")
    failing = [c for c in cases if c.find("failure") is not None]
    [bad] = failing
    assert bad.get("name") == "GPUClass/bad"
    assert [f.get("message", "").split(":")[0] for f in bad.findall("failure")] == [
        "spec.mode",
        "spec.memory",
    ]
    errored = [c for c in cases if c.find("error") is not None]
    assert [c.get("classname") for c in errored] == [str(files["broken"])]
    for suite in root.findall("testsuite"):
        assert int(suite.get("tests") or 0) == len(suite.findall("testcase"))


def test_validate_github_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = _mixed_catalog(tmp_path)
    code, out, _ = run(["validate", "-o", "github", str(tmp_path)], capsys)
    assert code == 1
    lines = out.splitlines()
    errors = [line for line in lines if line.startswith("::error ")]
    warnings = [line for line in lines if line.startswith("::warning ")]
    assert len(errors) == 3 and len(warnings) == 1 and len(lines) == 4
    assert any(line.startswith(f"::error file={files['broken']},") for line in errors)
    mode = next(line for line in errors if "spec.mode" in line)
    # properties escape ':' (title "bad: spec.mode"), the message keeps it
    assert mode.startswith(f"::error file={files['bad']},title=bad%3A spec.mode::")
    assert warnings[0].startswith(f"::warning file={files['warn']},")


def test_validate_output_text_is_the_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_yaml(tmp_path / "bad.yaml", gpuclass_doc("Bad_Name", memory="0"))
    assert run(["validate", str(path)], capsys) == run(
        ["validate", "-o", "text", str(path)], capsys
    )


def test_duplicate_keys_in_objects_are_a_load_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "nodes.yaml"
    path.write_text("kind: Node\nmetadata:\n  name: a\n  name: b\n")
    code, out, err = run(["status", "--objects", str(path)], capsys)
    assert (code, out) == (2, "")
    assert "duplicate key 'name'" in err
    code, out, err = run(["review", "--objects", str(path), str(REVIEWS[0])], capsys)
    assert (code, out) == (2, "")
    assert "duplicate key 'name'" in err


# review --fail-on-deny and -o text

DENIED = EXAMPLES / "reviews" / "vmi-bad-count.json"
ALLOWED = EXAMPLES / "reviews" / "vmi-whole-gpu.json"


def test_fail_on_deny(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["review", *OBJECTS_ARGS, str(DENIED)], capsys)[0] == 0  # the contract's default
    assert run(["review", *OBJECTS_ARGS, "--fail-on-deny", str(DENIED)], capsys)[0] == 1
    assert run(["review", *OBJECTS_ARGS, "--fail-on-deny", str(ALLOWED)], capsys)[0] == 0


def test_fail_on_deny_from_the_installed_script() -> None:
    result = script("review", *OBJECTS_ARGS, "--fail-on-deny", str(DENIED))
    assert result.returncode == 1
    assert json.loads(result.stdout)["response"]["allowed"] is False


def test_review_text_of_a_denial(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["review", *OBJECTS_ARGS, "-o", "text", str(DENIED)], capsys)
    assert (code, err) == (0, "")
    answer = review(json.loads(DENIED.read_text()), offline_catalog([str(EXAMPLES)], Policy()))
    status = answer["response"]["status"]
    lines = out.splitlines()
    assert lines[0].startswith("denied") and str(status["code"]) in lines[0]
    causes = status["details"]["causes"]
    assert causes
    for cause in causes:
        assert any(cause["field"] in line and cause["message"] in line for line in lines[1:])


def test_review_text_of_an_allowed_patch(capsys: pytest.CaptureFixture[str]) -> None:
    import base64

    code, out, _ = run(["review", *OBJECTS_ARGS, "-o", "text", str(ALLOWED)], capsys)
    assert code == 0
    answer = review(json.loads(ALLOWED.read_text()), offline_catalog([str(EXAMPLES)], Policy()))
    operations = json.loads(base64.b64decode(answer["response"]["patch"]))
    lines = out.splitlines()
    assert lines[0] == "allowed"
    op_lines = [line.strip() for line in lines if line.startswith("  ")]
    assert len(op_lines) == len(operations)
    for line, op in zip(op_lines, operations, strict=True):
        assert line.startswith(f"{op['op']} {op['path']} ")
        assert json.loads(line.split(" ", 2)[2]) == op["value"]


def test_review_text_shows_warnings(capsys: pytest.CaptureFixture[str]) -> None:
    path = EXAMPLES / "reviews" / "launcher-pod.json"
    answer = review(json.loads(path.read_text()), offline_catalog([str(EXAMPLES)], Policy()))
    warnings = answer["response"]["warnings"]
    _, out, _ = run(["review", *OBJECTS_ARGS, "-o", "text", str(path)], capsys)
    for warning in warnings:
        assert f"warning: {warning}" in out.splitlines()


# --version

VERSION = __import__("importlib.metadata").metadata.version("gpuclass")


@pytest.mark.parametrize("binary", ["gpuclass", "gpuclass-webhook", "gpuclass-reconciler"])
def test_version(binary: str) -> None:
    result = subprocess.run(
        [str(SCRIPT.parent / binary), "--version"], capture_output=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode() == f"{binary} {VERSION}\n"


# GPUCLASS_* variables, as the servers read them; flags win


def test_objects_from_the_variable(capsys: pytest.CaptureFixture[str]) -> None:
    flags = main(
        ["status", "--objects", str(EXAMPLES / "catalog"), "--objects", str(EXAMPLES / "cluster")]
    )
    by_flags = capsys.readouterr().out
    env = {"GPUCLASS_OBJECTS": f"{EXAMPLES / 'catalog'},{EXAMPLES / 'cluster'}"}
    assert main(["status"], env) == flags == 0
    assert _figures_of(capsys.readouterr().out) == _figures_of(by_flags) == _expected_figures()


def _figures_of(out: str) -> dict[str, tuple[int, int, int]]:
    return _figures({i["name"]: i["status"] for i in json.loads(out)["items"]})


def test_the_objects_flag_replaces_the_variable(capsys: pytest.CaptureFixture[str]) -> None:
    env = {"GPUCLASS_OBJECTS": str(EXAMPLES / "does-not-exist")}
    assert main(["status", *OBJECTS_ARGS], env) == 0
    assert _figures_of(capsys.readouterr().out) == _expected_figures()


def test_vgpu_entitled_from_the_variable(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(EXAMPLES / "reviews" / "vmi-licensed-vgpu.json")
    allowed = {}
    for value in ("true", "1", "false"):
        main(["review", *OBJECTS_ARGS, path], {"GPUCLASS_VGPU_ENTITLED": value})
        allowed[value] = json.loads(capsys.readouterr().out)["response"]["allowed"]
    assert allowed == {"true": True, "1": True, "false": False}
    main(["review", *OBJECTS_ARGS, "--no-vgpu-entitled", path], {"GPUCLASS_VGPU_ENTITLED": "true"})
    assert json.loads(capsys.readouterr().out)["response"]["allowed"] is False


def _conditions(out: str) -> dict[str, dict[str, str]]:
    return {
        i["name"]: {c["type"]: c["status"] for c in i["status"]["conditions"]}
        for i in json.loads(out)["items"]
    }


def test_namespaces_from_the_variables(capsys: pytest.CaptureFixture[str]) -> None:
    main(["status", *OBJECTS_ARGS], {"GPUCLASS_KUBEVIRT_NAMESPACE": "elsewhere"})
    # the example KubeVirt CR lives in cozy-kubevirt, so nothing is permitted elsewhere
    assert {
        c["ResourceNameNotPermitted"] for c in _conditions(capsys.readouterr().out).values()
    } == {"True"}
    main(
        ["status", *OBJECTS_ARGS, "--kubevirt-namespace", "cozy-kubevirt"],
        {"GPUCLASS_KUBEVIRT_NAMESPACE": "elsewhere"},
    )
    assert {
        c["ResourceNameNotPermitted"] for c in _conditions(capsys.readouterr().out).values()
    } == {"False"}
    main(["status", *OBJECTS_ARGS], {"GPUCLASS_LICENSE_NAMESPACE": "elsewhere"})
    licensed = _conditions(capsys.readouterr().out)["example-licensed-vgpu"]
    assert licensed["LicenseSecretMissing"] == "True"


def test_controller_user_from_the_variable(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(EXAMPLES / "reviews" / "launcher-pod.json")
    main(["review", *OBJECTS_ARGS, path], {})
    assert "patch" in json.loads(capsys.readouterr().out)["response"]
    main(["review", *OBJECTS_ARGS, path], {"GPUCLASS_KUBEVIRT_CONTROLLER_USER": "someone-else"})
    assert "patch" not in json.loads(capsys.readouterr().out)["response"]


def test_a_bad_boolean_variable_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """A usage error of `review` (exit 2, one line); `validate`, which does not read it, still
    answers on its own terms (exit 0 for a valid catalog, never the 1 of "invalid")."""
    env = {"GPUCLASS_VGPU_ENTITLED": "maybe"}
    assert main(["review", *OBJECTS_ARGS, str(ALLOWED)], env) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "GPUCLASS_VGPU_ENTITLED" in err and "not a boolean" in err
    assert main(["validate", str(EXAMPLES / "catalog")], env) == 0


@pytest.mark.parametrize("command", ["review", "status"])
def test_help_lists_the_variables(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"], {})
    out = " ".join(capsys.readouterr().out.split())
    wanted = ["GPUCLASS_OBJECTS", "GPUCLASS_LICENSE_NAMESPACE", "GPUCLASS_KUBEVIRT_NAMESPACE"]
    if command == "review":
        wanted += ["GPUCLASS_VGPU_ENTITLED", "GPUCLASS_KUBEVIRT_CONTROLLER_USER"]
    for name in wanted:
        assert f"[env: {name}]" in out
