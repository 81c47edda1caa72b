"""vGPU entitlement (docs/contract.md section 4 rule 5): who may take vGPUs.

The platform setting `vgpu_entitled` is the root entitlement; `tenant-root` is
entitled by it alone; any other tenant namespace needs the entitlement label on
itself and on every ancestor below tenant-root. Entitlement is separate from GPU
quota, which stays a Kubernetes ResourceQuota.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuclass.shared.core.base import k8s, names


def tenant_chain(namespace: str) -> list[str] | None:
    """The namespace and its ancestors below tenant-root, nearest first; None outside tenant-*."""
    if namespace == names.ROOT_TENANT:
        return []
    if not namespace.startswith(names.TENANT_PREFIX) or len(namespace) <= len(names.TENANT_PREFIX):
        return None
    if len(namespace) > k8s.MAX_DNS_LABEL:  # no such namespace; and the walk below is quadratic
        return None
    chain = []
    current = namespace
    while current != names.ROOT_TENANT and current.count("-") >= 1:
        chain.append(current)
        parent = current.rsplit("-", 1)[0]
        if parent == "tenant":  # tenant-a's parent is tenant-root
            break
        current = parent
    return chain


def entitlement_problem(
    namespace: str, namespaces: Mapping[str, Mapping[str, str]], *, vgpu_entitled: bool
) -> str | None:
    """None when the namespace may take vGPUs, else why not (for the refusal message)."""
    if not vgpu_entitled:
        return "vGPU is not enabled on this platform (gpu.vgpu entitlement is off)"
    chain = tenant_chain(namespace)
    if chain is None:
        return f"namespace {namespace or '(none)'} is not a tenant namespace; only tenants can be entitled"
    for member in chain:
        labels = namespaces.get(member)
        if labels is None or labels.get(names.VGPU_ENTITLEMENT_LABEL) != "true":
            return (
                f"tenant namespace {member} lacks the vGPU entitlement label "
                f"{names.VGPU_ENTITLEMENT_LABEL}=true; ask the platform to entitle it"
            )
    return None
