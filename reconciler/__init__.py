"""gpuclass-reconciler: writes GPUClass status, license copies and the in-use finalizer.

Layers (docs/reconciler.md): `api/client.py` is the only kubernetes_asyncio adapter
behind the `api.port.KubeAPI` Protocol; `manager` wires and stops everything; one
informer per resource of `state.resources.SPECS` lists and watches into `state.store`;
`worker` recomputes with the pure core and writes only what changed; `leader` holds the
Lease; `offline` runs the same manager on files.
"""
