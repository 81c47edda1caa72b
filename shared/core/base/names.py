"""Names fixed by the contract (docs/contract.md section 1): one place, imported everywhere.

Changing a value here is a breaking change for users' manifests and CI fixtures.
"""

from typing import Final

GROUP: Final = "cozystack.io"
VERSION: Final = "v1alpha1"
KIND: Final = "GPUClass"
PLURAL: Final = "gpuclasses"
API_VERSION: Final = f"{GROUP}/{VERSION}"

SELECTION_ANNOTATION: Final = "gpu.cozystack.io/classes"
IN_USE_FINALIZER: Final = "gpu.cozystack.io/in-use"
VGPU_ENTITLEMENT_LABEL: Final = "gpu.cozystack.io/vgpu"
WORKER_POOL_LABEL: Final = "cluster.x-k8s.io/cluster-name"
"""Cluster API's cluster label: cluster-api-provider-kubevirt v0.11.2 writes it on the VirtualMachine
and on its template (pkg/kubevirt/utils.go, `buildVirtualMachineInstanceTemplate`)."""
KUBEVIRT_MACHINE_NAME_LABEL: Final = "capk.cluster.x-k8s.io/kubevirt-machine-name"
KUBEVIRT_MACHINE_NAMESPACE_LABEL: Final = "capk.cluster.x-k8s.io/kubevirt-machine-namespace"
WORKER_POOL_LABELS: Final = (
    KUBEVIRT_MACHINE_NAME_LABEL,
    KUBEVIRT_MACHINE_NAMESPACE_LABEL,
    WORKER_POOL_LABEL,
)
"""Any of them marks a worker-pool VM or VMI (cluster-api-provider-kubevirt v0.11.2,
pkg/kubevirt/machine.go `Create`: the two `capk.` labels on the VM and its template, hence on
the VMI; the cluster label on both too, from pkg/kubevirt/utils.go)."""
LAUNCHER_LABEL: Final = "kubevirt.io"
LAUNCHER_LABEL_VALUE: Final = "virt-launcher"

DEFAULT_LICENSE_NAMESPACE: Final = "cozy-system"
TOKEN_KEY: Final = "client_configuration_token.tok"
GRIDD_KEY: Final = "gridd.conf"
LICENSE_COPY_PREFIX: Final = "gpuclass-license-"
MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE: Final = "gpuclass"
LICENSE_VOLUME: Final = "gpulicense"
LICENSE_SERIAL: Final = "GPULICENSE"
COPY_RECORD_NAME: Final = "gpuclass-license-copies"
"""The ConfigMap, in the reconciler's namespace, that records every license copy it may have written."""
COPY_RECORD_KEY: Final = "copies.json"

DEFAULT_KUBEVIRT_NAMESPACE: Final = "cozy-kubevirt"
DEFAULT_KUBEVIRT_CONTROLLER_USER: Final = "system:serviceaccount:cozy-kubevirt:kubevirt-controller"

WEBHOOK_EXCLUDED_NAMESPACE: Final = "kube-system"
"""The chart's VMI webhook skips this namespace: nothing there passed admission."""

ROOT_TENANT: Final = "tenant-root"
TENANT_PREFIX: Final = "tenant-"

MAX_UNITS_PER_VMI: Final = 1024

CONDITION_TYPES: Final = (
    "ResourceNameConflict",
    "ResourceNameNotPermitted",
    "LicenseSecretMissing",
    "Ready",
)
"""The contract's four condition types (docs/contract.md 6.4): fixed."""

SCHEDULABLE: Final = "Schedulable"
"""The fifth condition (docs/contract.md 6.8): whether a VM of the class can start now."""

STATUS_CONDITION_TYPES: Final = (*CONDITION_TYPES, SCHEDULABLE)
"""Every condition type a status carries, in the order it lists them."""


def license_copy_name(class_name: str) -> str:
    """The tenant-namespace Secret that carries a licensed class's token."""
    return LICENSE_COPY_PREFIX + class_name
