"""The core's words: names and labels, Kubernetes value formats, object keys, raw accessors, causes.

Imports nothing of the project; every other layer may import it.
"""
