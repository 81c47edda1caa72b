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

A YAML mapping that names one key twice is refused with both lines (PyYAML would keep the
last value silently; Kubernetes' strict decoder refuses it too): docs/decisions.md, CLI.
"""

from __future__ import annotations

import contextlib
import gc
import json
import threading
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson
import yaml

from gpuclass.shared.core.base import names
from gpuclass.shared.core.model.snapshot import Snapshot, SnapshotBuilder
from gpuclass.shared.files.docshape import (
    MAX_ALIASED_CHARS,
    MAX_ALIASED_VALUES,
    MAX_DEPTH,
    AliasLoop,
    json_too_deep,
    yaml_shape,
)

_SafeLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present


class _YamlLoader(_SafeLoader):  # type: ignore[misc]
    """PyYAML's safe loader, with timestamps kept as the strings Kubernetes keeps.

    Kubernetes' YAML decoder keeps unquoted timestamps as strings; PyYAML would make them
    datetimes, whose str() sorts differently from RFC 3339 (creationTimestamp orders classes).
    """


_YamlLoader.add_constructor("tag:yaml.org,2002:timestamp", _YamlLoader.construct_yaml_str)
_MERGE_TAG = "tag:yaml.org,2002:merge"
_STR_TAG = "tag:yaml.org,2002:str"


class DuplicateKey(yaml.YAMLError):
    """A mapping that names one key twice: PyYAML would silently keep the last value."""

    def __init__(self, key: object, line: int, *, first_line: int) -> None:
        super().__init__(f"duplicate key {key!r}")
        self.key, self.line, self.first_line = key, line, first_line


def _construct_mapping(loader: Any, node: yaml.Node, deep: bool = False) -> Any:  # noqa: PLR0917 - PyYAML's construct_mapping signature
    """PyYAML's mapping constructor, refusing a key written twice in one mapping.

    Kubernetes' strict decoder refuses them too; PyYAML would keep the last value silently.
    Keys brought in by a `<<` merge may be overridden, as YAML's merge key intends.
    """
    if isinstance(node, yaml.MappingNode):
        seen: dict[object, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            # String keys (nearly all) compare by their text; others as constructed.
            plain = isinstance(key_node, yaml.ScalarNode) and key_node.tag == _STR_TAG
            key = key_node.value if plain else loader.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                if key in seen:
                    raise DuplicateKey(key, line, first_line=seen[key])
                seen[key] = line
            except TypeError:  # an unhashable key: the base constructor reports it
                continue
    return _BASE_CONSTRUCT_MAPPING(loader, node, deep)


_BASE_CONSTRUCT_MAPPING = _YamlLoader.construct_mapping
_YamlLoader.construct_mapping = _construct_mapping


SUFFIXES = (".json", ".yaml", ".yml")


class LoadError(Exception):
    """A file that cannot be read as Kubernetes objects; the message names the file.

    `reason` is the message without the file, `code` a short word for machine-readable
    output (`gpuclass validate -o json`), `line` the 1-based line when one is known.
    """

    def __init__(
        self,
        message: str,
        *,
        path: Path | None = None,
        reason: str | None = None,
        code: str = "Unreadable",
        line: int | None = None,
    ) -> None:
        super().__init__(message)
        self.path, self.reason, self.code, self.line = path, reason or message, code, line


def _error(path: Path, reason: str, *, code: str, line: int | None = None) -> LoadError:
    return LoadError(f"{path}: {reason}", path=path, reason=reason, code=code, line=line)


def files_under(paths: Iterable[str | Path]) -> list[Path]:
    """The object files the paths name: a file as given, a folder's .yaml/.yml/.json files
    recursively in sorted order (a stable order, so the later of two equal objects is always the
    same one). A path that does not exist raises LoadError (NotFound)."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found += sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in SUFFIXES)
        elif path.is_file():
            found.append(path)
        else:
            raise _error(path, "no such file or folder", code="NotFound")
    return found


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    for key in keys:
        if keys.count(key) > 1:
            raise DuplicateKey(key, 0, first_line=0)
    return dict(pairs)


def _json_document(path: Path, data: bytes, *, strict_keys: bool) -> object:
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise _error(path, f"not valid JSON: {exc}", code="InvalidJSON") from exc
    if json_too_deep(data):
        raise _too_deep(path)
    if strict_keys:  # orjson keeps the last of duplicate keys; the stdlib can tell
        try:
            json.loads(data, object_pairs_hook=_unique_pairs)
        except DuplicateKey as exc:
            raise _error(
                path, f"duplicate key {exc.key!r} in one object: remove one", code="DuplicateKey"
            ) from exc
    return document


def _documents(path: Path, *, strict_keys: bool = False) -> Iterator[object]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise _error(path, str(exc.strerror or exc), code="Unreadable") from exc
    if path.suffix == ".json":
        yield _json_document(path, data, strict_keys=strict_keys)
        return
    yield from _yaml_documents(path, data)


def documents_from_bytes(data: bytes, source: str) -> list[object]:
    """The documents of one input that may be JSON or YAML (a file or standard input):
    JSON when it parses as JSON, YAML otherwise, with the file loader's checks (duplicate
    keys, nesting depth)."""
    path = Path(source)
    try:
        documents = [orjson.loads(data)]
    except orjson.JSONDecodeError:
        documents = list(_yaml_documents(path, data))
        for document in documents:
            _check_depth(path, document, size=len(data))
        return documents
    if json_too_deep(data):
        raise _too_deep(path)
    return documents


def _yaml_documents(path: Path, data: bytes) -> Iterator[object]:
    try:
        yield from yaml.load_all(data, Loader=_YamlLoader)
    except DuplicateKey as exc:
        raise _error(
            path,
            f"line {exc.line}: duplicate key {exc.key!r} (first at line {exc.first_line}): "
            "YAML would keep only the last value; remove one",
            code="DuplicateKey",
            line=exc.line,
        ) from exc
    except RecursionError:
        raise _error(path, "nests too deeply to be Kubernetes objects", code="TooDeep") from None
    except ValueError as exc:  # a value PyYAML's constructors cannot make
        problem = str(exc).split(":")[0][:200]
        if "digits" in problem:  # Python reads integers of at most 4,300 digits
            problem = "an integer longer than 4,300 digits"
        raise _error(path, f"not valid YAML: {problem}", code="InvalidYAML") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        where = f" (line {line})" if line else ""
        raise _error(
            path,
            f"not valid YAML: {str(exc).splitlines()[0]}{where}",
            code="InvalidYAML",
            line=line,
        ) from exc


def _too_deep(path: Path) -> LoadError:
    return _error(path, f"an object nests deeper than {MAX_DEPTH} levels", code="TooDeep")


def _check_depth(path: Path, document: object, *, size: int) -> None:
    """The depth of a parsed YAML document (JSON is checked on its bytes, :func:`json_too_deep`),
    and what its aliases expand to: at most MAX_ALIASED_VALUES more values than it writes and
    at most twice as many, and at most MAX_ALIASED_CHARS more characters of strings than the
    `size` bytes of the file and at most twice as many. Go's YAML decoder behind kubectl refuses
    excessive aliasing too. The document is parsed already, in memory of the file's size (an
    alias shares its node); the refusal comes before anything copies it."""
    try:
        depth, values, written, chars = yaml_shape(document)
    except AliasLoop:
        raise _error(
            path, "a YAML alias names a node it is inside: it never ends", code="TooDeep"
        ) from None
    if depth > MAX_DEPTH:
        raise _too_deep(path)
    if values > written + MAX_ALIASED_VALUES and values > 2 * written:
        raise _error(
            path,
            f"YAML aliases expand {written} written values to {values}: "
            "more than Kubernetes objects need",
            code="TooDeep",
        )
    if chars > size + MAX_ALIASED_CHARS and chars > 2 * size:
        raise _error(
            path,
            f"YAML aliases expand a file of {size} bytes to {chars} characters of text: "
            "more than Kubernetes objects need",
            code="TooDeep",
        )


def iter_objects(path: Path, *, strict_keys: bool = False) -> Iterator[Mapping[str, Any]]:
    """Every object in one file, `kind: List` unpacked; empty documents skipped.

    A YAML mapping with a duplicate key is always an error; `strict_keys` checks JSON
    objects too (slower: `--objects` snapshots can be 50 MB, catalog manifests are small).
    """
    size = 0
    for document in _documents(path, strict_keys=strict_keys):
        if path.suffix != ".json":  # JSON was checked on its bytes
            size = size or path.stat().st_size
            _check_depth(path, document, size=size)
        if document is None:
            continue
        if not isinstance(document, dict):
            raise _error(
                path, "each document must be a Kubernetes object (a mapping)", code="NotAnObject"
            )
        kind = document.get("kind")
        if isinstance(kind, str) and kind.endswith("List") and "items" in document:
            items = document.get("items") or []
            if not isinstance(items, list):
                raise _error(path, "items of a List must be a list", code="NotAnObject")
            for item in items:
                if isinstance(item, dict):
                    if kind != "List":
                        item.setdefault("kind", kind[: -len("List")])
                    yield item
        else:
            yield document


def iter_named_objects(paths: Iterable[str | Path]) -> Iterator[tuple[Path, Mapping[str, Any]]]:
    """Every object of every file under `paths`, with the file it came from."""
    for path in files_under(paths):
        for obj in iter_objects(path):
            yield path, obj


NAMESPACED_DEFAULT = frozenset({"Pod", "Secret", "VirtualMachineInstance"})


def as_stored(obj: Mapping[str, Any], index: int, *, kubevirt_namespace: str) -> dict[str, Any]:
    """The object as an API server would hold it.

    A KubeVirt CR written without a namespace counts as the one in the KubeVirt
    namespace; other namespaced objects without one land in `default` (as
    `kubectl apply` would put them); a nameless object gets a generated name
    (`unnamed-<index>`), so that it is still counted. An object with nothing to fill in is
    returned as it is, not copied.
    """
    raw_meta = obj.get("metadata")
    kind = obj.get("kind")
    if (
        isinstance(obj, dict)
        and isinstance(raw_meta, dict)
        and isinstance(raw_meta.get("name"), str)
        and raw_meta["name"]
        and (raw_meta.get("namespace") or (kind != "KubeVirt" and kind not in NAMESPACED_DEFAULT))
    ):
        return obj  # already as stored (nearly every object of a large file): nothing to copy
    stored = dict(obj)
    meta = dict(raw_meta) if isinstance(raw_meta, dict) else {}
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


_gc_pause_lock = threading.Lock()
_gc_pauses = 0
_gc_was_enabled = False


@contextlib.contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a large input is parsed and folded.

    Parsed JSON and YAML are trees and the snapshot's records hold no cycles either, so the
    collector finds nothing in them, yet every few hundred new dicts and lists it runs, and
    its full passes walk every object made so far, a large share of a big file's parse
    (docs/decisions.md, "Loading without the cyclic collector"; the figure in docs/performance.md).
    Reference counting still frees everything as usual. Nested and concurrent uses nest:
    the collector comes back, if it was on, when the last one ends.
    """
    global _gc_pauses, _gc_was_enabled
    with _gc_pause_lock:
        if _gc_pauses == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pauses += 1
    try:
        yield
    finally:
        with _gc_pause_lock:
            _gc_pauses -= 1
            if _gc_pauses == 0 and _gc_was_enabled:
                gc.enable()


def load_snapshot(
    paths: Iterable[str | Path],
    *,
    kubevirt_namespace: str = names.DEFAULT_KUBEVIRT_NAMESPACE,
    detail: bool = False,
) -> Snapshot:
    """The files as one snapshot, read as an API server would store them (:func:`as_stored`);
    KubeVirt CRs outside `kubevirt_namespace` are left out, as the binaries watch only that
    namespace. `detail` keeps what one VM's start needs (`gpuclass explain --manifest`)."""
    builder = SnapshotBuilder(detail=detail)
    with cyclic_gc_paused():
        for obj in iter_stored_objects(paths, kubevirt_namespace=kubevirt_namespace):
            if obj.get("kind") == "KubeVirt" and obj["metadata"]["namespace"] != kubevirt_namespace:
                continue  # the reconciler and the webhook read only the CR in the KubeVirt namespace
            builder.add(obj)
        return builder.snapshot
