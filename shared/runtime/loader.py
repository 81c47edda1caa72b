"""Read Kubernetes objects from YAML/JSON files or folders into a compact snapshot.

JSON goes through orjson (snapshots can be 50 MB); YAML through PyYAML's C loader
when present. Multi-document YAML and `kind: List` are accepted. Each object is
folded into the snapshot as it is read, so only the compact records outlive the
parse.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson
import yaml

from gpuclass.shared.snapshot import Snapshot, SnapshotBuilder

_YamlLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present
# Kubernetes' YAML decoder keeps unquoted timestamps as strings; PyYAML would make them
# datetimes, whose str() sorts differently from RFC 3339 (creationTimestamp orders classes).
_YamlLoader = type("KubeYamlLoader", (_YamlLoader,), {})
_YamlLoader.add_constructor("tag:yaml.org,2002:timestamp", _YamlLoader.construct_yaml_str)

SUFFIXES = (".json", ".yaml", ".yml")


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


def iter_objects(path: Path) -> Iterator[Mapping[str, Any]]:
    """Every object in one file, `kind: List` unpacked; empty documents skipped."""
    for document in _documents(path):
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


def load_snapshot(paths: Iterable[str | Path]) -> Snapshot:
    builder = SnapshotBuilder()
    for path in files_under(paths):
        builder.add_all(iter_objects(path))
    return builder.snapshot
