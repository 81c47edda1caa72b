"""The functions of `shared/core/admission/licensing.py` called one by one. Each rule of
docs/contract.md section 4 is tested through the admitter in its own file beside this one:
`test_rules_selection.py` (4.1), `test_rules_raw_requests.py` (4.2),
`test_rules_class_usable.py` (4.3), `test_rules_limits.py` (4.4),
`test_rules_entitlement.py` (4.5), `test_rules_patch.py` (4.6), `test_rules_capacity.py` (4.7),
`test_rules_license_references.py` (4.8), and every cause at once in
`test_rules_every_cause.py` (section 3.3).
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuclass.shared.core.admission import licensing


@pytest.mark.parametrize(
    ("class_name", "volume"),
    [
        pytest.param(
            "lic",
            {
                "name": "gpulicense",
                "secret": {"secretName": "gpuclass-license-lic", "volumeLabel": "GPULICENSE"},
            },
            id="short-name",
        ),
        pytest.param(
            "a100-80gb",
            {
                "name": "gpulicense",
                "secret": {"secretName": "gpuclass-license-a100-80gb", "volumeLabel": "GPULICENSE"},
            },
            id="dashed-name",
        ),
    ],
)
def test_license_volume_is_the_one_of_section_1(class_name: str, volume: dict[str, Any]) -> None:
    """docs/contract.md section 1: volume `gpulicense`, its Secret the class's copy
    `gpuclass-license-<class>`, `volumeLabel: GPULICENSE`, never `optional`."""
    assert licensing.license_volume(class_name) == volume


def test_license_disk_is_the_one_of_section_1() -> None:
    """docs/contract.md section 1: disk `gpulicense`, `serial: GPULICENSE`, `disk.bus: virtio`."""
    assert licensing.license_disk() == {
        "name": "gpulicense",
        "serial": "GPULICENSE",
        "disk": {"bus": "virtio"},
    }


def test_rule_8_looks_at_each_volume_once_whatever_the_licensed_classes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """O(volumes + classes): the license volume a volume could be is the one its Secret names.
    A 1 MB VMI against 256 licensed classes once compared every volume with every class (the
    figure is in docs/performance.md); the comparisons are counted here, not timed."""
    built: list[str] = []
    real = licensing.license_volume

    def counted(name: str) -> dict[str, Any]:
        built.append(name)
        return real(name)

    monkeypatch.setattr(licensing, "license_volume", counted)
    licensed = [f"lic-{i}" for i in range(256)]
    volumes = [
        {"name": f"v{i}", "secret": {"secretName": f"gpuclass-license-lic-{i % 300}"}}
        for i in range(1000)
    ]
    volumes.append(real("lic-7"))  # the one exact license volume
    refs = licensing.own_license_volume_refs({"spec": {"volumes": volumes}}, licensed)
    assert refs == {("spec.volumes[1000].secret.secretName", "gpuclass-license-lic-7")}
    assert len(built) <= len(volumes), f"{len(built)} license volumes built for {len(volumes)}"
