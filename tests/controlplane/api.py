"""A small synchronous Kubernetes API client for tests: plain httpx and a client cert.

It does what test set-up needs and no more: raw requests, resource paths found
through discovery, server-side apply of manifests (dicts or a YAML file), get,
create and delete. Every write through `call` (so `create` and `apply`) is sent
with `fieldValidation=Strict`; `request` sends exactly what it is given. Tests that exercise the product's own adapters use
kubernetes_asyncio with the kubeconfig the control plane writes instead.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import yaml

RawObject = dict[str, Any]
FIELD_MANAGER = "gpuclass-tests"
STRICT = {"fieldValidation": "Strict"}
WRITES = frozenset({"POST", "PUT", "PATCH"})


class ApiError(RuntimeError):
    """The API server answered a request with an error status."""

    def __init__(self, method: str, path: str, response: httpx.Response) -> None:
        self.status_code = response.status_code
        try:
            body = response.json()
        except ValueError:
            body = {"message": response.text[:2000]}
        self.body: RawObject = body if isinstance(body, dict) else {"message": str(body)}
        message = self.body.get("message", "")
        super().__init__(f"{method} {path}: HTTP {self.status_code}: {message}")


def manifests(source: Path | Iterable[Mapping[str, Any]]) -> list[RawObject]:
    """Objects from a YAML/JSON file (multi-document, `kind: List`) or a list of dicts."""
    if isinstance(source, Path):
        # The C loader when present: KubeVirt's CRDs are about 600 KB of YAML.
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        documents: Iterable[Any] = list(yaml.load_all(source.read_text(), Loader=loader))
    else:
        documents = source
    return list(_flatten(documents))


def _flatten(documents: Iterable[Any]) -> Iterator[RawObject]:
    for document in documents:
        if not document:
            continue
        if not isinstance(document, Mapping):
            raise ValueError(f"a manifest must be an object, got {type(document).__name__}")
        if str(document.get("kind", "")).endswith("List") and "items" in document:
            yield from _flatten(document["items"])
        else:
            yield dict(document)


class Api:
    """Talks to one API server as one user (a client certificate signed by its CA)."""

    def __init__(
        self,
        server: str,
        *,
        ca_file: Path,
        cert_file: Path,
        key_file: Path,
        timeout: float = 30.0,
    ) -> None:
        context = ssl.create_default_context(cafile=str(ca_file))
        context.load_cert_chain(str(cert_file), str(key_file))
        self.server = server
        self._http = httpx.Client(base_url=server, verify=context, timeout=timeout)
        self._resources: dict[str, dict[str, tuple[str, bool]]] = {}

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Api:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- raw requests -------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
        accept: str = "application/json",
    ) -> httpx.Response:
        """Send one request; never raises on an HTTP error status (see `call`)."""
        headers = {"Accept": accept}
        content = None
        if body is not None:
            headers["Content-Type"] = content_type
            content = body if isinstance(body, bytes) else json.dumps(body).encode()
        return self._http.request(method, path, content=content, params=params, headers=headers)

    def call(self, method: str, path: str, **kwargs: Any) -> RawObject:
        """Like `request`, but returns the JSON body and raises ApiError on a 4xx/5xx.

        Writes use `fieldValidation=Strict` unless the caller says otherwise: a field
        the schema does not know is an error, never silently pruned, so a test object
        (or a webhook patch) that KubeVirt's real schema would not keep fails loudly.
        """
        if method in WRITES:
            kwargs["params"] = {**STRICT, **(kwargs.get("params") or {})}
        response = self.request(method, path, **kwargs)
        if response.status_code >= 400:
            raise ApiError(method, path, response)
        decoded = response.json()
        return decoded if isinstance(decoded, dict) else {"items": decoded}

    # -- paths --------------------------------------------------------------------------------

    def resource_path(
        self,
        api_version: str,
        kind: str,
        *,
        name: str | None = None,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> str:
        """The URL path of a kind (collection) or of one object, found through discovery."""
        plural, namespaced = self._resource(api_version, kind)
        path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        if namespaced:
            if not namespace:
                raise ValueError(f"{kind} is namespaced: give a namespace")
            path += f"/namespaces/{namespace}"
        path += f"/{plural}"
        if name:
            path += f"/{name}"
            if subresource:
                path += f"/{subresource}"
        return path

    def object_path(self, obj: Mapping[str, Any], *, collection: bool = False) -> str:
        meta = obj.get("metadata") or {}
        return self.resource_path(
            obj["apiVersion"],
            obj["kind"],
            name=None if collection else meta.get("name"),
            namespace=meta.get("namespace"),
        )

    def _resource(self, api_version: str, kind: str) -> tuple[str, bool]:
        for refresh in (False, True):
            if refresh or api_version not in self._resources:
                self._resources[api_version] = self._discover(api_version)
            found = self._resources[api_version].get(kind)
            if found:
                return found
        raise LookupError(f"the API server does not serve {kind} in {api_version}")

    def _discover(self, api_version: str) -> dict[str, tuple[str, bool]]:
        path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        response = self.request("GET", path)
        if response.status_code == 404:
            return {}
        if response.status_code >= 400:
            raise ApiError("GET", path, response)
        return {
            resource["kind"]: (resource["name"], bool(resource["namespaced"]))
            for resource in response.json().get("resources", [])
            if "/" not in resource["name"]  # skip subresources such as gpuclasses/status
        }

    # -- objects ------------------------------------------------------------------------------

    def apply(self, source: Path | Iterable[Mapping[str, Any]]) -> list[RawObject]:
        """Server-side apply every object (created or updated; our field manager wins)."""
        applied = []
        for obj in manifests(source):
            path = self.object_path(obj)
            applied.append(
                self.call(
                    "PATCH",
                    path,
                    body=obj,
                    params={"fieldManager": FIELD_MANAGER, "force": "true"},
                    content_type="application/apply-patch+yaml",  # JSON is YAML
                )
            )
        return applied

    def create(self, obj: Mapping[str, Any], **params: str) -> RawObject:
        return self.call("POST", self.object_path(obj, collection=True), body=obj, params=params)

    def get(
        self, api_version: str, kind: str, name: str, *, namespace: str | None = None
    ) -> RawObject | None:
        path = self.resource_path(api_version, kind, name=name, namespace=namespace)
        response = self.request("GET", path)
        if response.status_code == 404:
            return None
        if response.status_code >= 400:
            raise ApiError("GET", path, response)
        decoded: RawObject = response.json()
        return decoded

    def delete(self, obj: Mapping[str, Any]) -> bool:
        """Delete an object; False when it was already gone."""
        path = self.object_path(obj)
        response = self.request("DELETE", path)
        if response.status_code == 404:
            return False
        if response.status_code >= 400:
            raise ApiError("DELETE", path, response)
        return True


def status_causes(error: ApiError) -> list[RawObject]:
    """The `details.causes` of a refused request (empty when the server gave none)."""
    details = error.body.get("details") or {}
    return [cause for cause in details.get("causes") or [] if isinstance(cause, dict)]
