"""The model of classes and clusters: the GPUClass model and its validation, the selection
annotation, and the compact VMI and cluster views the status and admission layers read.
"""
