"""The offline twin: `gpuclass-reconciler --objects PATH --once` and the file-backed server.

It runs the ordinary loop against the files (never a cluster) and prints what it
would write: every class's status (the same as `gpuclass status`), the license
copies without token payloads, finalizer changes and Events.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gpuclass.reconciler.main import main
from gpuclass.reconciler.offline import file_reconciler
from gpuclass.reconciler.settings import ReconcilerSettings
from gpuclass.shared.core.base import names
from gpuclass.shared.core.status.availability import compute_all
from gpuclass.shared.files.loader import load_snapshot
from tests.builders import launcher, vmi
from tests.conftest import ROOT

pytestmark = pytest.mark.usefixtures("keep_logging")  # main() reconfigures the root logger
EXAMPLES = str(ROOT / "examples")
TOKEN_B64 = "ZXhhbXBsZS1ub3QtYS1yZWFsLXRva2Vu"
LICENSED = "example-licensed-vgpu"


def once(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["--objects", EXAMPLES, *args, "--once", "--log-level", "warning"]) == 0
    out = capsys.readouterr().out
    assert TOKEN_B64 not in out and base64.b64decode(TOKEN_B64).decode() not in out
    result: dict[str, Any] = json.loads(out)
    return result


def without_times(status: dict[str, Any]) -> dict[str, Any]:
    return {
        **status,
        "conditions": [
            {k: v for k, v in c.items() if k != "lastTransitionTime"} for c in status["conditions"]
        ],
    }


def test_once_on_examples_prints_the_statuses_of_gpuclass_status(
    capsys: pytest.CaptureFixture[str],
) -> None:
    report = once(capsys)
    expected = compute_all(load_snapshot([EXAMPLES]), license_namespace="cozy-system", now="T")
    assert [i["name"] for i in report["items"]] == sorted(expected)
    for item in report["items"]:
        assert without_times(item["status"]) == without_times(expected[item["name"]])
    assert [
        (
            i["name"],
            i["status"]["free"],
            i["status"]["maxFreePerNode"],
            i["status"]["maxUnitsPerNode"],
        )
        for i in report["items"]
    ] == [
        ("example-byol-vgpu", 8, 8, 8),
        ("example-licensed-vgpu", 7, 7, 8),
        ("example-reserved-gpu", 0, 0, 0),  # its nodes: one untolerated taint, one cordoned
        ("example-whole-gpu", 2, 2, 8),
    ]
    assert report["statusWrites"] == sorted(expected)
    assert report["licenseCopies"] == [] and report["finalizers"] == []
    assert [e["reason"] for e in report["events"]] == ["Ready"] * 4  # one per example class


@pytest.fixture
def vmis(tmp_path: Path) -> Path:
    objects = [
        vmi(
            "licensed",
            "tenant-a",
            classes=[LICENSED],
            devices=["example.com/licensed-vgpu"],
            license_class=LICENSED,
        ),
        vmi(
            "unentitled",
            "tenant-c",
            classes=[LICENSED],
            devices=["example.com/licensed-vgpu"],
            license_class=LICENSED,
        ),
        vmi(
            "whole", "tenant-root", classes=["example-whole-gpu"], devices=["example.com/whole-gpu"]
        ),
        vmi("annotation-only", "tenant-root", classes=["example-byol-vgpu"]),
        # the licensed VMIs are starting: their launcher Pods are bound to a node
        launcher("licensed", "tenant-a", "gpu-node-1", license_class=LICENSED),
        launcher("unentitled", "tenant-c", "gpu-node-1", license_class=LICENSED),
        # this one waits for a node that does not exist: no copy for it
        vmi(
            "pinned",
            "tenant-root",
            classes=[LICENSED],
            devices=["example.com/licensed-vgpu"],
            license_class=LICENSED,
        ),
        launcher("pinned", "tenant-root", None, license_class=LICENSED),
    ]
    path = tmp_path / "vmis.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    return path


def test_once_with_vmis_prints_copies_and_finalizers(
    capsys: pytest.CaptureFixture[str], vmis: Path
) -> None:
    report = once(capsys, "--objects", str(vmis), "--vgpu-entitled")
    assert report["licenseCopies"] == [
        {
            "action": "create",
            "namespace": "tenant-a",
            "name": names.license_copy_name(LICENSED),
            "labels": {names.MANAGED_BY_LABEL: names.MANAGED_BY_VALUE},
            "data": {
                names.GRIDD_KEY: "FeatureType=1\n",
                names.TOKEN_KEY: report["licenseCopies"][0]["data"][names.TOKEN_KEY],
            },
        }
    ]
    assert report["licenseCopies"][0]["data"][names.TOKEN_KEY].startswith("<redacted sha256:")
    assert report["finalizers"] == [
        {"name": LICENSED, "finalizers": [names.IN_USE_FINALIZER]},
        {"name": "example-whole-gpu", "finalizers": [names.IN_USE_FINALIZER]},
    ]


def test_once_without_platform_entitlement_makes_no_copy(
    capsys: pytest.CaptureFixture[str], vmis: Path
) -> None:
    assert once(capsys, "--objects", str(vmis))["licenseCopies"] == []


def test_dry_run_prints_the_same(capsys: pytest.CaptureFixture[str], vmis: Path) -> None:
    plain = once(capsys, "--objects", str(vmis), "--vgpu-entitled")
    dry = once(capsys, "--objects", str(vmis), "--vgpu-entitled", "--dry-run")
    assert [without_times(i["status"]) for i in plain["items"]] == [
        without_times(i["status"]) for i in dry["items"]
    ]
    assert (
        plain["licenseCopies"] == dry["licenseCopies"] and plain["finalizers"] == dry["finalizers"]
    )


def test_missing_objects_path_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--objects", "/nonexistent/objects", "--once"]) == 2
    assert "/nonexistent/objects" in capsys.readouterr().err


def test_help_lists_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    for flag in (
        "--objects",
        "--once",
        "--dry-run",
        "--vgpu-entitled",
        "--port",
        "--bind-address",
        "--kubeconfig",
        "--leader-election-namespace",
        "--coalesce-seconds",
        "--pod-name",
        "--license-namespace",
    ):
        assert flag in out


def test_serves_metrics_from_files_and_follows_changes(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLES, tmp_path / "examples")
    settings = ReconcilerSettings(
        objects=[tmp_path / "examples"],
        port=0,
        bind_address="127.0.0.1",
        objects_poll_seconds=0.05,
        coalesce_seconds=0.0,
    )

    async def scenario() -> None:
        reconciler, reload = file_reconciler(settings)
        running = asyncio.create_task(reconciler.run())
        reloading = asyncio.create_task(reload())
        try:
            while not reconciler.ready or reconciler.bound_port() is None:
                await asyncio.sleep(0.02)
            base = f"http://127.0.0.1:{reconciler.bound_port()}"
            async with httpx.AsyncClient(base_url=base) as http:
                assert (await http.get("/healthz")).status_code == 200
                assert (await http.get("/readyz")).status_code == 200
                metrics = (await http.get("/metrics")).text
                assert 'gpuclass_free_units{class="example-whole-gpu"} 2.0' in metrics
                assert (
                    'gpuclass_condition{class="example-whole-gpu",status="True",type="Ready"} 1.0'
                    in metrics
                )
                assert "gpuclass_leader 1.0" in metrics
                (tmp_path / "examples" / "cluster" / "pods.yaml").write_text("")
                for _ in range(200):
                    metrics = (await http.get("/metrics")).text
                    if 'gpuclass_free_units{class="example-whole-gpu"} 4.0' in metrics:
                        break
                    await asyncio.sleep(0.02)
                assert 'gpuclass_free_units{class="example-whole-gpu"} 4.0' in metrics
        finally:
            reconciler.stop()
            await asyncio.wait_for(running, 10)
            reloading.cancel()

    asyncio.run(asyncio.wait_for(scenario(), 30))


BAD_FILES = {
    "node-with-taints-5.yaml": (
        "apiVersion: v1\nkind: Node\nmetadata: {name: bad}\nspec: {taints: 5}\n"
        "status: {allocatable: {example.com/gpu: '1'}, conditions: 7}\n"
    ),
    "pod-with-containers-5.yaml": (
        "apiVersion: v1\nkind: Pod\nmetadata: {name: bad, namespace: x}\n"
        "spec: {nodeName: n, containers: 5, initContainers: true}\nstatus: {phase: [Running]}\n"
    ),
}
DEEP_VMI = (
    '{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",'
    ' "metadata": {"name": "deep", "namespace": "tenant-a"}, "spec": {"volumes": '
    + "[" * 900
    + "]" * 900
    + "}}"
)


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_malformed_fields_are_ignored_not_a_crash(
    tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copytree(EXAMPLES, tmp_path / "examples")
    (tmp_path / "examples" / name).write_text(BAD_FILES[name])
    assert main(["--objects", str(tmp_path / "examples"), "--once"]) == 0
    report = json.loads(capsys.readouterr().out)
    free = {i["name"]: i["status"]["free"] for i in report["items"]}
    assert free["example-whole-gpu"] == 2  # the bad object adds nothing


def test_once_on_a_900_deep_vmi_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "deep.json").write_text(DEEP_VMI)
    assert main(["--objects", str(tmp_path / "deep.json"), "--once"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "deep.json" in err and "Traceback" not in err


def test_reload_survives_bad_files_keeps_the_last_good_state_and_recovers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    shutil.copytree(EXAMPLES, tmp_path / "examples")
    pods = tmp_path / "examples" / "cluster" / "pods.yaml"
    extra = tmp_path / "extra.yaml"  # named on the command line, removed while running
    extra.write_text("")
    settings = ReconcilerSettings(
        objects=[tmp_path / "examples", extra],
        port=0,
        bind_address="127.0.0.1",
        objects_poll_seconds=0.02,
        coalesce_seconds=0.0,
    )

    async def wait(condition: Any) -> None:
        for _ in range(500):
            if condition():
                return
            await asyncio.sleep(0.01)
        raise AssertionError("condition not reached")

    async def scenario() -> None:
        reconciler, reload = file_reconciler(settings)
        running = asyncio.create_task(reconciler.run())
        reloading = asyncio.create_task(reload())
        free = reconciler.metrics.free.labels("example-whole-gpu")
        try:
            await wait(lambda: reconciler.ready and reconciler.bound_port() is not None)
            base = f"http://127.0.0.1:{reconciler.bound_port()}"
            async with httpx.AsyncClient(base_url=base) as http:
                for bad in (DEEP_VMI, "{not json", None):
                    caplog.clear()
                    target = tmp_path / "examples" / "deep.json"
                    if bad is None:
                        extra.unlink()
                    else:
                        target.write_text(bad)
                    await wait(lambda: reconciler.stale_reason is not None)
                    await asyncio.sleep(0.3)  # several polls: still one log line
                    assert not reloading.done()
                    warnings = [r for r in caplog.records if "not reloaded" in r.getMessage()]
                    assert len(warnings) == 1
                    readyz = await http.get("/readyz")
                    assert readyz.status_code == 503 and "last good state" in readyz.text
                    healthz = await http.get("/healthz")
                    assert healthz.status_code == 200 and "stale" in healthz.text
                    assert free._value.get() == 2  # the last good figures
                    if bad is None:
                        extra.write_text("")
                    else:
                        target.unlink()
                    await wait(lambda: reconciler.stale_reason is None)
                pods.write_text("")
                await wait(lambda: free._value.get() == 4)  # recovered, and following changes
                assert (await http.get("/readyz")).status_code == 200
        finally:
            reconciler.stop()
            await asyncio.wait_for(running, 10)
            reloading.cancel()

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_bad_lease_timings_exit_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--renew-deadline-seconds", "20", "--once"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "--lease-duration-seconds (15) must be greater than --renew-deadline-seconds (20)" in err
