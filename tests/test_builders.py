"""tests/builders.py: its raw-object builders produce what the compaction functions read, and
its builders are defined there only."""

from __future__ import annotations

import ast
from pathlib import Path

import tests.builders
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


def test_each_builder_is_defined_once() -> None:
    """The helper modules beside tests/builders.py (the e2e and soak plumbing, the chart and
    webhook helpers) import its builders and define none of them again (issue #35)."""

    def defined(path: Path) -> set[str]:
        tree = ast.parse(path.read_text())
        kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
        return {node.name for node in tree.body if isinstance(node, kinds)}

    home = Path(tests.builders.__file__)
    builders = defined(home)
    again = {
        path.name: sorted(defined(path) & builders)
        for path in home.parent.glob("*.py")
        if path != home and not path.name.startswith("test_") and path.name != "conftest.py"
    }
    assert {name: found for name, found in again.items() if found} == {}
