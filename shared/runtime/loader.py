"""Read Kubernetes objects from YAML/JSON files or folders into a compact snapshot.

JSON goes through orjson (snapshots can be 50 MB); YAML through PyYAML's C loader
when present. Multi-document YAML and `kind: List` are accepted. Each object is
folded into the snapshot as it is read, so only the compact records outlive the
parse.

The files are read as the cluster an API server would hold (:func:`as_stored`), the
same way for `gpuclass review`/`status`, `gpuclass-webhook --objects` and the
reconciler's offline twin, so their figures agree: namespaced objects without a
namespace land in `default`, a KubeVirt CR without one in the KubeVirt namespace,
and only the KubeVirt CRs in that namespace count (the reconciler watches no
other); the same object given twice counts once (the snapshot keys objects by
kind, namespace and name, the later one winning).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson
import yaml

from gpuclass.shared import names
from gpuclass.shared.snapshot import Snapshot, SnapshotBuilder

_YamlLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present
# Kubernetes' YAML decoder keeps unquoted timestamps as strings; PyYAML would make them
# datetimes, whose str() sorts differently from RFC 3339 (creationTimestamp orders classes).
_YamlLoader = type("KubeYamlLoader", (_YamlLoader,), {})
_YamlLoader.add_constructor("tag:yaml.org,2002:timestamp", _YamlLoader.construct_yaml_str)

SUFFIXES = (".json", ".yaml", ".yml")
MAX_DEPTH = 100
"""Deepest nesting accepted in one object; real manifests stay far below (a CRD schema ~40)."""


class LoadError(Exception):
    """A file that cannot be read as Kubernetes objects; the message names the file."""


def files_under(paths: Iterable[str | Path]) -> list[Path]:
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found += sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in SUFFIXES)
        elif path.is_file():
            found.append(path)
        else:
            raise LoadError(f"{path}: no such file or folder")
    return found


def _documents(path: Path) -> Iterator[object]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise LoadError(f"{path}: {exc.strerror or exc}") from exc
    if path.suffix == ".json":
        try:
            yield orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise LoadError(f"{path}: not valid JSON: {exc}") from exc
        return
    try:
        yield from yaml.load_all(data, Loader=_YamlLoader)
    except yaml.YAMLError as exc:
        raise LoadError(f"{path}: not valid YAML: {str(exc).splitlines()[0]}") from exc


def nesting_depth(value: object, limit: int = MAX_DEPTH) -> int:
    """How deep `value` nests (stops counting past `limit`); iterative, so any depth is safe."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list) and depth <= limit:
            deepest = max(deepest, depth)
            children = node.values() if isinstance(node, dict) else node
            stack.extend((child, depth + 1) for child in children)
        elif isinstance(node, dict | list):
            return depth
    return deepest


def iter_objects(path: Path) -> Iterator[Mapping[str, Any]]:
    """Every object in one file, `kind: List` unpacked; empty documents skipped."""
    for document in _documents(path):
        if nesting_depth(document) > MAX_DEPTH:
            raise LoadError(f"{path}: an object nests deeper than {MAX_DEPTH} levels")
        if document is None:
            continue
        if not isinstance(document, dict):
            raise LoadError(f"{path}: each document must be a Kubernetes object (a mapping)")
        kind = document.get("kind")
        if isinstance(kind, str) and kind.endswith("List") and "items" in document:
            items = document.get("items") or []
            if not isinstance(items, list):
                raise LoadError(f"{path}: items of a List must be a list")
            for item in items:
                if isinstance(item, dict):
                    if kind != "List":
                        item.setdefault("kind", kind[: -len("List")])
                    yield item
        else:
            yield document


def iter_named_objects(paths: Iterable[str | Path]) -> Iterator[tuple[Path, Mapping[str, Any]]]:
    for path in files_under(paths):
        for obj in iter_objects(path):
            yield path, obj


NAMESPACED_DEFAULT = frozenset({"Pod", "Secret", "VirtualMachineInstance"})


def as_stored(obj: Mapping[str, Any], index: int, *, kubevirt_namespace: str) -> dict[str, Any]:
    """The object as an API server would hold it.

    A KubeVirt CR written without a namespace counts as the one in the KubeVirt
    namespace; other namespaced objects without one land in `default` (as
    `kubectl apply` would put them); a nameless object gets a generated name
    (`unnamed-<index>`), so that it is still counted.
    """
    stored = dict(obj)
    raw_meta = obj.get("metadata")
    meta = dict(raw_meta) if isinstance(raw_meta, dict) else {}
    kind = obj.get("kind")
    if not meta.get("namespace"):
        if kind == "KubeVirt":
            meta["namespace"] = kubevirt_namespace
        elif kind in NAMESPACED_DEFAULT:
            meta["namespace"] = "default"
    if not isinstance(meta.get("name"), str) or not meta["name"]:
        meta["name"] = f"unnamed-{index}"
    stored["metadata"] = meta
    return stored


def iter_stored_objects(
    paths: Iterable[str | Path], *, kubevirt_namespace: str = names.DEFAULT_KUBEVIRT_NAMESPACE
) -> Iterator[dict[str, Any]]:
    """Every object in the files, as stored (:func:`as_stored`)."""
    for index, (_, raw) in enumerate(iter_named_objects(paths)):
        yield as_stored(raw, index, kubevirt_namespace=kubevirt_namespace)


def load_snapshot(
    paths: Iterable[str | Path], *, kubevirt_namespace: str = names.DEFAULT_KUBEVIRT_NAMESPACE
) -> Snapshot:
    builder = SnapshotBuilder()
    for obj in iter_stored_objects(paths, kubevirt_namespace=kubevirt_namespace):
        if obj.get("kind") == "KubeVirt" and obj["metadata"]["namespace"] != kubevirt_namespace:
            continue  # the reconciler and the webhook read only the CR in the KubeVirt namespace
        builder.add(obj)
    return builder.snapshot
