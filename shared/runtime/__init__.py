"""I/O both binaries and the CLI share: reading object files, settings, logging, TLS.

This is the edge around the pure core: it may touch files, the clock and the
environment. The core (`shared/*.py`) never imports it.
"""
