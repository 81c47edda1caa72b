"""The raw-object builders of tests/builders.py produce what the compaction functions read."""

from __future__ import annotations

from tests.builders import gpuclass, node, pod


def test_builders_compact_as_intended() -> None:
    from gpuclass.shared.core.model.podrequests import compact_pod
    from gpuclass.shared.core.model.snapshot import compact_class, compact_node

    record = compact_class(gpuclass("c", "example.com/gpu", license="src"))
    assert record is not None and record.spec is not None and record.spec.license is not None
    built = compact_node(node("n", {"example.com/gpu": 2}, ready=False))
    assert built is not None and not built.ready and built.handler == "ready"
    assert built.allocatable == {
        "example.com/gpu": 2,
        "devices.kubevirt.io/kvm": 1000,
        "devices.kubevirt.io/tun": 1000,
        "devices.kubevirt.io/vhost-net": 1000,
    }
    bare = compact_node(node("n", {"example.com/gpu": 2}, kubevirt=False))
    assert bare is not None and bare.handler == "absent"
    assert bare.allocatable == {"example.com/gpu": 2}
    assert (
        compact_pod(pod("p", "n", {"example.com/gpu": 1}, init={"example.com/gpu": 3})) is not None
    )
