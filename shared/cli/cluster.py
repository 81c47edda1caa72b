"""The cluster as `gpuclass explain` and `gpuclass plan` read it live: one list of each
collection the answer needs, folded into a snapshot (the I/O edge of the CLI's cluster mode).

The HTTP client of `shared.kube.kubeclient` is imported only when a cluster is read, so the
offline commands never load it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpuclass.shared.core.base import names
from gpuclass.shared.core.model.secrets import Redacted, SecretRecord
from gpuclass.shared.core.model.snapshot import Snapshot, SnapshotBuilder
from gpuclass.shared.files.loader import LoadError
from gpuclass.shared.kube.apicollections import (
    BOUND_PODS,
    GPUCLASSES,
    KUBEVIRTS,
    NODES,
    RESOURCEQUOTAS,
    SECRETS,
    VMS,
    Collection,
)


async def read_cluster(
    kubeconfig: Path | None,
    context: str | None,
    *,
    license_namespace: str,
    kubevirt_namespace: str,
    classes: frozenset[str] | None = None,
    more: Sequence[Collection] = (),
    kept: list[Mapping[str, Any]] | None = None,
    quota_namespace: str | None = None,
) -> Snapshot:
    """One list of each collection the answer needs, folded into a snapshot.

    With `quota_namespace` (a manifest's namespace) the snapshot keeps node detail (labels, CPU,
    memory) and that namespace's ResourceQuotas; a caller who may not list them gets an answer
    without the quota check, and a note saying so.

    `more` adds collections (`gpuclass plan` reads VMIs, VirtualMachines and Namespaces);
    objects of a kind the snapshot does not hold (VirtualMachines) are appended to `kept`.

    Secrets are never listed: only the source Secret (`spec.license.secretName`) of each
    licensed class in `classes` (None: every class) is read, by name, so the caller needs
    no right on any other Secret and no other payload reaches this machine; its payload
    stays in the snapshot (wrapped, never printed). A 404 is a missing Secret. Where the
    caller may not read it (a tenant, 401/403), the class's stored LicenseSecretMissing
    condition, the reconciler's view, stands in for it.
    """
    from gpuclass.shared.kube.clusterconfig import ClusterConfigError
    from gpuclass.shared.kube.errors import ApiError
    from gpuclass.shared.kube.kubeclient import RawClient, api_client

    collections = _collections(kubevirt_namespace, more, quota_namespace=quota_namespace)
    try:  # --kubeconfig, else KUBECONFIG, else ~/.kube/config, as kubectl finds them
        api = await api_client(kubeconfig, binary="gpuclass", context=context)
    except ClusterConfigError as exc:
        raise LoadError(str(exc)) from exc
    raw = RawClient(api, collections, field_manager="gpuclass")
    builder = SnapshotBuilder(detail=quota_namespace is not None)
    unreadable: set[str] = set()
    quotas_unread = False
    try:
        for kind in collections:
            try:
                async for page in raw.list_pages(kind):
                    for item in page.items:
                        if kept is not None and kind == VMS.kind:
                            kept.append({**item, "kind": kind})
                        else:
                            builder.add({**item, "kind": kind})
            except ApiError as exc:
                if kind == "KubeVirt" and exc.not_found:
                    continue  # no KubeVirt CRD: the classes say NoKubeVirt
                if kind == "ResourceQuota" and (exc.unauthorized or exc.forbidden):
                    quotas_unread = True  # answered without the quota check, and said so
                    continue
                raise LoadError(f"listing {kind}: {exc}") from exc
        for secret_name in license_secret_names(builder.snapshot, classes):
            path = SECRETS.item(secret_name, license_namespace)
            try:
                builder.add({**await raw.get(path), "kind": "Secret"})
            except ApiError as exc:
                if exc.not_found:
                    continue  # absent: LicenseSecretMissing, as the reconciler would say
                if exc.unauthorized or exc.forbidden:
                    unreadable.add(secret_name)
                    continue
                raise LoadError(f"reading Secret {license_namespace}/{secret_name}: {exc}") from exc
    finally:
        await raw.close()
    snapshot = builder.snapshot
    if unreadable:
        _stored_license_view(snapshot, license_namespace, unreadable=unreadable)
    if quotas_unread and snapshot.detail is not None:
        snapshot.detail.quotas_unread = True
    return snapshot


def _collections(
    kubevirt_namespace: str, more: Sequence[Collection], *, quota_namespace: str | None
) -> dict[str, tuple[str, dict[str, str]]]:
    """Kind -> (path, query) of every collection one answer lists, in the order it lists them."""
    collections = {
        "Node": (NODES.at(), NODES.params()),
        "Pod": (BOUND_PODS.at(), BOUND_PODS.params()),
        names.KIND: (GPUCLASSES.at(), GPUCLASSES.params()),
        "KubeVirt": (KUBEVIRTS.at(kubevirt_namespace), KUBEVIRTS.params()),
        **{c.kind: (c.at(), c.params()) for c in more},
    }
    if quota_namespace is not None:
        collections["ResourceQuota"] = (RESOURCEQUOTAS.at(quota_namespace), RESOURCEQUOTAS.params())
    return collections


def license_secret_names(snapshot: Snapshot, classes: frozenset[str] | None) -> list[str]:
    """The source Secrets of the licensed classes in `classes` (None: all), each once, sorted."""
    return sorted(
        {
            r.spec.license.secret_name
            for n, r in snapshot.classes.items()
            if r.spec is not None and r.spec.license is not None
            if classes is None or n in classes
        }
    )


def _stored_license_view(
    snapshot: Snapshot, license_namespace: str, *, unreadable: set[str]
) -> None:
    """Where the caller cannot read a source Secret: a licensed class whose stored status says
    the Secret is usable gets a stand-in record, so the pure rules see what the reconciler saw."""
    for record in snapshot.classes.values():
        spec, status = record.spec, record.status
        if spec is None or spec.license is None or status is None:
            continue
        if spec.license.secret_name not in unreadable:
            continue
        stored = {c.type: c.status for c in status.conditions}
        if stored.get("LicenseSecretMissing") == "False":
            key = (license_namespace, spec.license.secret_name)
            snapshot.secrets[key] = SecretRecord(
                key[0], key[1], {}, {names.TOKEN_KEY: Redacted("seen by the reconciler")}
            )
