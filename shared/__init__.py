"""gpuclass's shared code: the pure core, the one I/O edge and the `gpuclass` command.

- :mod:`gpuclass.shared.core`: every rule of the GPU class catalog, written once, with no I/O.
- the I/O all three shells share: :mod:`gpuclass.shared.kube` (the HTTP client and the
  reflector), :mod:`gpuclass.shared.process` (settings, logs, the clock, probes) and
  :mod:`gpuclass.shared.files` (objects from files).
- :mod:`gpuclass.shared.cli`: the `gpuclass` command (offline, but for `explain` against a cluster).

The import contracts in pyproject.toml (docs/architecture.md) keep the arrows one way.
"""
