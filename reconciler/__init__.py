"""gpuclass-reconciler: writes GPUClass status, licence copies and the in-use finalizer.

Layers (docs/reconciler.md): `kube.py` is the only kubernetes_asyncio adapter
behind the `ports.KubeAPI` Protocol; `streams` list and watch into
`reconciler.cache`; `worker` recomputes with the pure core and writes only
what changed; `leader` holds the Lease; `offline` runs the same loop on files.
"""
