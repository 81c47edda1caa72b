"""Reading `--objects` files (shared/files/loader.py): formats, folders, lists, errors, redaction."""

from __future__ import annotations

import gc
import json
from pathlib import Path
from typing import Any

import pytest

from gpuclass.shared.core.model.secrets import Redacted
from gpuclass.shared.core.status.availability import conflict_winners
from gpuclass.shared.files.loader import (
    LoadError,
    as_stored,
    cyclic_gc_paused,
    files_under,
    iter_named_objects,
    iter_objects,
    load_snapshot,
)

TOKEN = "c2VjcmV0LXRva2VuLXZhbHVl"  # base64 of a made-up token


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def kinds_and_names(path: Path) -> list[tuple[Any, Any]]:
    return [(o.get("kind"), o.get("metadata", {}).get("name")) for o in iter_objects(path)]


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        pytest.param(
            "multi.yaml",
            "kind: Node\nmetadata: {name: a}\n---\nkind: Node\nmetadata: {name: b}\n",
            [("Node", "a"), ("Node", "b")],
            id="multi-document-yaml",
        ),
        pytest.param(
            "empty-docs.yaml",
            "---\n---\nkind: Node\nmetadata: {name: a}\n---\n# only a comment\n---\n",
            [("Node", "a")],
            id="empty-documents-skipped",
        ),
        pytest.param("empty.yaml", "", [], id="empty-file"),
        pytest.param(
            "list.yaml",
            "apiVersion: v1\nkind: List\nitems:\n- {kind: Node, metadata: {name: a}}\n- {kind: Pod, metadata: {name: p}}\n",
            [("Node", "a"), ("Pod", "p")],
            id="kind-list",
        ),
        pytest.param(
            "nodelist.yaml",
            "apiVersion: v1\nkind: NodeList\nitems:\n- {metadata: {name: a}}\n- {metadata: {name: b}}\n",
            [("Node", "a"), ("Node", "b")],
            id="nodelist-items-get-their-kind",
        ),
        pytest.param(
            "empty-list.yaml",
            "apiVersion: v1\nkind: List\nitems: null\n",
            [],
            id="list-with-null-items",
        ),
        pytest.param(
            "list.json",
            json.dumps(
                {"kind": "List", "items": [{"kind": "Namespace", "metadata": {"name": "tenant-a"}}]}
            ),
            [("Namespace", "tenant-a")],
            id="json-list",
        ),
        pytest.param(
            "one.json",
            json.dumps({"kind": "Node", "metadata": {"name": "a"}}),
            [("Node", "a")],
            id="json-object",
        ),
        pytest.param(
            "mixed.yaml",
            "kind: List\nitems: [{kind: Node, metadata: {name: a}}]\n---\nkind: Pod\nmetadata: {name: p}\n",
            [("Node", "a"), ("Pod", "p")],
            id="list-and-object-documents",
        ),
    ],
)
def test_formats(tmp_path: Path, name: str, text: str, expected: list[tuple[str, str]]) -> None:
    assert kinds_and_names(write(tmp_path / name, text)) == expected


# 500 bytes that a walk of every path reads as 10^8 values (the "billion laughs")
LAUGHS = (
    "kind: Node\nmetadata: {name: a}\ndata:\n  a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
    + "".join(f"  a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]\n" for i in range(1, 8))
)


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        pytest.param(
            "bad.yaml", "kind: Node\nmetadata: {name: a\n", "not valid YAML", id="invalid-yaml"
        ),
        pytest.param("bad.json", '{"kind": "Node",', "not valid JSON", id="invalid-json"),
        pytest.param(
            "scalar.yaml", "just a string\n", "must be a Kubernetes object", id="scalar-document"
        ),
        pytest.param(
            "list-doc.yaml", "- kind: Node\n", "must be a Kubernetes object", id="list-document"
        ),
        pytest.param(
            "items.yaml",
            "kind: List\nitems: {a: 1}\n",
            "items of a List must be a list",
            id="items-not-list",
        ),
        pytest.param(
            "laughs.yaml",
            LAUGHS,
            "YAML aliases expand",
            id="billion-laughs",
        ),
        pytest.param(
            "loop.yaml", "kind: Node\nmetadata: &m {x: [*m]}\n", "never ends", id="alias-loop"
        ),
        pytest.param(
            "bigint.yaml",
            "kind: Node\nmetadata: {x: " + "9" * 5000 + "}\n",
            "not valid YAML: an integer longer than 4,300 digits",
            id="integer-past-pythons-limit",
        ),
    ],
)
def test_errors_name_the_file(tmp_path: Path, name: str, text: str, message: str) -> None:
    path = write(tmp_path / name, text)
    with pytest.raises(LoadError) as info:
        load_snapshot([path])
    assert str(info.value).startswith(f"{path}: ")
    assert message in str(info.value)


def test_missing_path_is_a_load_error(tmp_path: Path) -> None:
    with pytest.raises(LoadError, match="no such file or folder"):
        load_snapshot([tmp_path / "absent.yaml"])


def test_folders_are_read_recursively_in_order_by_suffix(tmp_path: Path) -> None:
    write(tmp_path / "b" / "nodes.yaml", "kind: Node\nmetadata: {name: n2}\n")
    write(tmp_path / "a.json", json.dumps({"kind": "Node", "metadata": {"name": "n1"}}))
    write(tmp_path / "c.yml", "kind: Node\nmetadata: {name: n3}\n")
    write(tmp_path / "README.md", "kind: Node\nmetadata: {name: ignored}\n")
    write(tmp_path / "notes.txt", "not yaml: [")
    assert [p.name for p in files_under([tmp_path])] == ["a.json", "nodes.yaml", "c.yml"]
    assert [n.name for n in load_snapshot([tmp_path]).nodes] == ["n1", "n2", "n3"]


def test_explicit_file_with_any_suffix_is_read_as_yaml(tmp_path: Path) -> None:
    path = write(tmp_path / "cluster.txt", "kind: Node\nmetadata: {name: n1}\n")
    assert [n.name for n in load_snapshot([path]).nodes] == ["n1"]


def test_paths_named_with_their_objects(tmp_path: Path) -> None:
    one = write(tmp_path / "one.yaml", "kind: Node\nmetadata: {name: a}\n")
    two = write(tmp_path / "two.yaml", "kind: Node\nmetadata: {name: b}\n")
    assert [(p, o["metadata"]["name"]) for p, o in iter_named_objects([one, two])] == [
        (one, "a"),
        (two, "b"),
    ]


def test_every_supported_kind_lands_in_the_snapshot(tmp_path: Path) -> None:
    write(
        tmp_path / "all.yaml",
        """\
kind: GPUClass
metadata: {name: c}
spec: {vendor: v, model: m, mode: passthrough, source: {devicePlugin: {resourceName: example.com/gpu}}}
---
kind: Node
metadata: {name: n}
status: {allocatable: {example.com/gpu: "2"}}
---
kind: Pod
metadata: {name: p, namespace: t}
spec: {nodeName: n, containers: [{name: c, resources: {limits: {example.com/gpu: "1"}}}]}
status: {phase: Running}
---
kind: KubeVirt
metadata: {name: kv, namespace: cozy-kubevirt}
spec: {configuration: {permittedHostDevices: {pciHostDevices: [{resourceName: example.com/gpu}]}}}
status: {phase: Deployed}
---
kind: Namespace
metadata: {name: tenant-a, labels: {gpu.cozystack.io/vgpu: "true"}}
---
kind: Secret
metadata: {name: s, namespace: cozy-system}
data: {client_configuration_token.tok: eA==}
---
kind: VirtualMachineInstance
metadata: {name: vm, namespace: tenant-a}
---
kind: ConfigMap
metadata: {name: ignored}
""",
    )
    snapshot = load_snapshot([tmp_path])
    assert list(snapshot.classes) == ["c"]
    assert [n.allocatable for n in snapshot.nodes] == [{"example.com/gpu": 2}]
    assert [(p.node, dict(p.requests)) for p in snapshot.pods] == [("n", {"example.com/gpu": 1})]
    assert snapshot.permitted == frozenset({"example.com/gpu"})
    assert snapshot.namespaces == {"tenant-a": {"gpu.cozystack.io/vgpu": "true"}}
    assert list(snapshot.secrets) == [("cozy-system", "s")]
    assert [(v.namespace, v.name) for v in snapshot.vmis] == [("tenant-a", "vm")]


def test_unquoted_timestamps_stay_strings_as_in_kubernetes(tmp_path: Path) -> None:
    # The API server's YAML decoder keeps them as strings; a datetime's str() would sort
    # '2026-01-01 05:00:00+00:00' before '2026-01-01T01:00:00Z' and pick the wrong conflict winner.
    write(
        tmp_path / "classes.yaml",
        """\
kind: GPUClass
metadata: {name: later, creationTimestamp: 2026-01-01T05:00:00Z}
spec: {vendor: v, model: m, mode: passthrough, source: {devicePlugin: {resourceName: example.com/gpu}}}
---
kind: GPUClass
metadata: {name: earlier, creationTimestamp: "2026-01-01T01:00:00Z"}
spec: {vendor: v, model: m, mode: passthrough, source: {devicePlugin: {resourceName: example.com/gpu}}}
""",
    )
    objects = list(iter_objects(tmp_path / "classes.yaml"))
    assert objects[0]["metadata"]["creationTimestamp"] == "2026-01-01T05:00:00Z"
    assert conflict_winners(load_snapshot([tmp_path]).classes) == {"example.com/gpu": "earlier"}


def test_secret_values_are_redacted(tmp_path: Path) -> None:
    write(
        tmp_path / "secret.yaml",
        f"kind: Secret\nmetadata: {{name: lic, namespace: cozy-system}}\ndata:\n  client_configuration_token.tok: {TOKEN}\n",
    )
    snapshot = load_snapshot([tmp_path])
    record = snapshot.secrets[("cozy-system", "lic")]
    value = record.data["client_configuration_token.tok"]
    assert isinstance(value, Redacted)
    assert value.reveal() == TOKEN
    for shown in (
        repr(value),
        str(value),
        repr(record),
        str(record),
        repr(snapshot),
        f"{value}",
        f"{record!r}",
    ):
        assert TOKEN not in shown
    assert "<redacted>" in repr(record)
    assert value == Redacted(TOKEN) and value != Redacted("other") and value != TOKEN


@pytest.mark.parametrize(
    ("text", "line"),
    [
        pytest.param("kind: Node\nmetadata:\n  name: a\n  name: b\n", 4, id="block-mapping"),
        pytest.param("kind: Node\nmetadata: {name: a, name: b}\n", 2, id="flow-mapping"),
        pytest.param("kind: Node\nkind: Pod\n", 2, id="top-level"),
        pytest.param(
            "kind: Node\n---\nkind: Pod\nmetadata: {}\nmetadata: {}\n", 5, id="second-document"
        ),
    ],
)
def test_a_duplicate_yaml_key_is_a_load_error(tmp_path: Path, text: str, line: int) -> None:
    """PyYAML would keep the last value; the API server's strict decoder refuses the file."""
    path = write(tmp_path / "dup.yaml", text)
    with pytest.raises(LoadError) as info:
        list(iter_objects(path))
    assert info.value.code == "DuplicateKey" and info.value.line == line
    assert str(info.value).startswith(f"{path}: line {line}: duplicate key")


def test_aliases_that_repeat_a_little_still_load(tmp_path: Path) -> None:
    """Anchors are YAML: a hoster may share tolerations between classes. Only aliases that make
    a document far larger than it is written are refused."""
    shared = "[" + ", ".join(["{key: gpu, operator: Exists}"] * 100) + "]"
    text = f"kind: Node\nmetadata: {{name: a}}\nspec: {{a: &t {shared}, b: *t, c: *t}}\n"
    [obj] = iter_objects(write(tmp_path / "a.yaml", text))
    assert obj["spec"]["c"] == obj["spec"]["a"] and len(obj["spec"]["b"]) == 100


def test_aliased_long_strings_are_refused_in_bounded_memory(tmp_path: Path) -> None:
    """One 1 MB string named by 300 aliases is 300 MB to whoever copies the document (explain
    --manifest reached 2.1 GB); the file is refused after parsing, which shares the string."""
    import tracemalloc

    big = "x" * (1 << 20)
    aliases = ", ".join(["*s"] * 300)
    text = f"kind: VirtualMachine\nmetadata: {{name: a}}\nspec: {{a: &s {big}, b: [{aliases}]}}\n"
    path = write(tmp_path / "bomb.yaml", text)
    tracemalloc.start()
    try:
        with pytest.raises(LoadError) as info:
            list(iter_objects(path))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.value.code == "TooDeep" and "characters of text" in str(info.value)
    assert peak < 100 << 20, f"peak {peak >> 20} MiB"


def test_a_long_string_named_a_few_times_still_loads(tmp_path: Path) -> None:
    big = "x" * (1 << 20)
    text = f"kind: Node\nmetadata: {{name: a}}\nspec: {{a: &s {big}, b: *s}}\n"
    [obj] = iter_objects(write(tmp_path / "twice.yaml", text))
    assert obj["spec"]["b"] == big


def test_merge_keys_may_be_overridden(tmp_path: Path) -> None:
    path = write(tmp_path / "m.yaml", "base: &b {x: 1}\nkind: Node\nmetadata:\n  <<: *b\n  x: 2\n")
    [obj] = iter_objects(path)
    assert obj["metadata"] == {"x": 2}


def test_duplicate_json_keys_only_when_strict(tmp_path: Path) -> None:
    path = write(tmp_path / "d.json", '{"kind": "Node", "kind": "Pod"}')
    assert [o["kind"] for o in iter_objects(path)] == ["Pod"]  # --objects: orjson, fast
    with pytest.raises(LoadError) as info:
        list(iter_objects(path, strict_keys=True))
    assert info.value.code == "DuplicateKey"


def test_loading_leaves_the_garbage_collector_as_it_found_it(tmp_path: Path) -> None:
    """The loader parses with the cyclic collector off (trees hold no cycles) and gives it
    back as it was: on when it was on, off when the caller had turned it off."""
    path = write(tmp_path / "objects.json", json.dumps({"kind": "List", "items": []}))
    enabled = gc.isenabled()
    try:
        gc.enable()
        load_snapshot([path])
        assert gc.isenabled()
        with cyclic_gc_paused():
            assert not gc.isenabled()
            with cyclic_gc_paused():
                load_snapshot([path])
            assert not gc.isenabled()  # the outer pause still holds
        assert gc.isenabled()
        gc.disable()
        load_snapshot([path])
        assert not gc.isenabled()
    finally:
        (gc.enable if enabled else gc.disable)()


@pytest.mark.parametrize(
    ("obj", "copied", "metadata"),
    [
        pytest.param(
            {"kind": "Pod", "metadata": {"name": "p", "namespace": "t"}},
            False,
            {"name": "p", "namespace": "t"},
            id="complete-pod-as-is",
        ),
        pytest.param(
            {"kind": "Node", "metadata": {"name": "n"}}, False, {"name": "n"}, id="node-as-is"
        ),
        pytest.param(
            {"kind": "Pod", "metadata": {"name": "p"}},
            True,
            {"name": "p", "namespace": "default"},
            id="pod-without-namespace",
        ),
        pytest.param(
            {"kind": "KubeVirt", "metadata": {"name": "kv"}},
            True,
            {"name": "kv", "namespace": "cozy-kubevirt"},
            id="kubevirt-without-namespace",
        ),
        pytest.param(
            {"kind": "Node", "metadata": {"name": ""}},
            True,
            {"name": "unnamed-7"},
            id="empty-name",
        ),
        pytest.param({"kind": "Node"}, True, {"name": "unnamed-7"}, id="no-metadata"),
    ],
)
def test_as_stored_fills_in_on_a_copy_and_passes_complete_objects_through(
    obj: dict[str, Any], copied: bool, metadata: dict[str, Any]
) -> None:
    before = json.loads(json.dumps(obj))
    stored = as_stored(obj, 7, kubevirt_namespace="cozy-kubevirt")
    assert stored["metadata"] == metadata
    assert (stored is not obj) == copied
    assert obj == before  # the input is never changed


def test_a_resource_map_with_a_key_that_is_not_a_string_still_counts(tmp_path: Path) -> None:
    """YAML may key a map by a number; the extended resources beside it still count."""
    path = write(
        tmp_path / "pod.yaml",
        "kind: Pod\nmetadata: {name: p, namespace: t}\n"
        "spec:\n  nodeName: n\n  containers:\n"
        "  - name: c\n    resources:\n      limits: {1: 5, example.com/gpu: 2}\n"
        "      requests: {7: x, cpu: 1}\n"
        "status: {phase: Running}\n",
    )
    [pod] = load_snapshot([path]).pods
    assert (pod.node, dict(pod.requests)) == ("n", {"example.com/gpu": 2})
