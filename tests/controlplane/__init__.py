"""A real Kubernetes control plane for the tests (etcd + kube-apiserver, the envtest way).

`cluster.ControlPlane` runs the processes, `pki` makes the throwaway certificates,
`api.Api` is the small synchronous client set-up code uses, `webhooks` builds
webhook configurations, `components` and `kubevirt_parts` start what runs beside the
plane (kube-scheduler, controllers, kwok; KubeVirt's own webhooks and launcher renderer),
and `plugin` is the pytest plugin with the fixtures.
"""

from tests.controlplane.api import Api, ApiError, manifests, status_causes
from tests.controlplane.cluster import (
    AssetsUnavailable,
    ControlPlane,
    ControlPlaneError,
    User,
    eventually,
    find_assets,
    unique_name,
)

__all__ = [
    "Api",
    "ApiError",
    "AssetsUnavailable",
    "ControlPlane",
    "ControlPlaneError",
    "User",
    "eventually",
    "find_assets",
    "manifests",
    "status_causes",
    "unique_name",
]
