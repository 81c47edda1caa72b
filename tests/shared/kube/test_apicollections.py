"""The one table of API collections (shared/kube/apicollections.py), as Kubernetes spells them."""

from __future__ import annotations

from gpuclass.reconciler.state.resources import Scope, collections
from gpuclass.shared.kube.apicollections import (
    BOUND_PODS,
    GPUCLASSES,
    KUBEVIRTS,
    LEASES,
    NODES,
    SECRETS,
)


def test_paths_are_the_api_servers() -> None:
    assert GPUCLASSES.at() == "/apis/cozystack.io/v1alpha1/gpuclasses"
    assert NODES.at() == "/api/v1/nodes"
    assert SECRETS.item("lic", "gpu-licenses") == "/api/v1/namespaces/gpu-licenses/secrets/lic"
    assert LEASES.at("ns") == "/apis/coordination.k8s.io/v1/namespaces/ns/leases"
    assert KUBEVIRTS.at("kubevirt") == "/apis/kubevirt.io/v1/namespaces/kubevirt/kubevirts"


def test_namespaces_and_names_are_quoted_so_they_cannot_change_the_path() -> None:
    assert SECRETS.item("../../nodes", "a/b") == (
        "/api/v1/namespaces/a%2Fb/secrets/..%2F..%2Fnodes"
    )
    assert KUBEVIRTS.at("kv?watch=1") == "/apis/kubevirt.io/v1/namespaces/kv%3Fwatch%3D1/kubevirts"


def test_only_bound_unfinished_pods_are_read() -> None:
    selector = BOUND_PODS.params()["fieldSelector"].split(",")
    assert sorted(selector) == [
        "spec.nodeName!=",
        "status.phase!=Failed",
        "status.phase!=Succeeded",
    ]
    assert NODES.params() == {}


def test_the_reconciler_reads_its_sources_from_the_table() -> None:
    table = collections(Scope(kubevirt_namespace="kv/x"))
    assert table["pods"] == (BOUND_PODS.at(), BOUND_PODS.params())
    assert table["kubevirts"][0] == KUBEVIRTS.at("kv/x")
    assert "%2F" in table["kubevirts"][0]
