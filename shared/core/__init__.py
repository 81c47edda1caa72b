"""The pure core: catalog, cluster snapshot and `now` in, decisions out; no I/O.

Four layers, importing downwards only: :mod:`~gpuclass.shared.core.base` (names, value
formats, accessors, causes), :mod:`~gpuclass.shared.core.model` (the GPUClass model,
validation, selection, the VMI and cluster views), :mod:`~gpuclass.shared.core.status`
(capacity, availability, catalog, entitlement) and :mod:`~gpuclass.shared.core.admission`
(envelope, admitters, patches, decisions). import-linter checks both the order and that
nothing here imports an I/O module, the edge or a shell.
"""
