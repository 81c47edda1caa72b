"""Object keys and resourceVersions (shared/core/base/meta.py) as a store reads them.

Expected values follow Kubernetes' object metadata: cluster-scoped objects have no namespace,
and a name is required. `version_reached` is tested with the sync view, in
tests/reconciler/test_worker.py (test_version_comparison).
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuclass.shared.core.base.meta import object_key, resource_version


@pytest.mark.parametrize(
    ("obj", "key"),
    [
        pytest.param({"metadata": {"name": "a", "namespace": "ns"}}, ("ns", "a"), id="namespaced"),
        pytest.param({"metadata": {"name": "node-1"}}, ("", "node-1"), id="cluster-scoped"),
        pytest.param(
            {"metadata": {"name": "a", "namespace": None}}, ("", "a"), id="null-namespace"
        ),
        pytest.param({"metadata": {"namespace": "ns"}}, None, id="no-name"),
        pytest.param({"metadata": {"name": 7}}, None, id="name-not-a-string"),
        pytest.param({"metadata": "x"}, None, id="metadata-not-a-map"),
        pytest.param({}, None, id="no-metadata"),
    ],
)
def test_object_key(obj: dict[str, Any], key: tuple[str, str] | None) -> None:
    assert object_key(obj) == key


@pytest.mark.parametrize(
    ("obj", "version"),
    [
        pytest.param({"metadata": {"resourceVersion": "42"}}, "42", id="set"),
        pytest.param({"metadata": {}}, "", id="absent"),
        pytest.param({"metadata": {"resourceVersion": 42}}, "", id="not-a-string"),
        pytest.param({"metadata": None}, "", id="metadata-null"),
        pytest.param({}, "", id="no-metadata"),
    ],
)
def test_resource_version(obj: dict[str, Any], version: str) -> None:
    assert resource_version(obj) == version
