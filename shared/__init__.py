"""gpuclass core: every rule of the GPU class catalog, written once, with no I/O.

The modules directly in this package are pure: they take the catalog, a cluster
snapshot and `now` as arguments and return decisions as values. They import
neither the webhook nor the reconciler, nor any network, logging-setup or
Kubernetes client library (tests/test_layers.py enforces it).

I/O that both binaries share lives in :mod:`shared.runtime`; the offline
command line in :mod:`shared.cli`. The core never imports either.
"""
