"""The one I/O edge the webhook, the reconciler and the CLI share.

Object files and the loader's input guards, settings, logging, the clock, the cluster
configuration, the HTTP client (`kubeclient`, one of the three kubernetes_asyncio
adapters), the reflector (`listwatch`), and the probes and uvicorn wrapper both servers use
(`http`). It imports the core and never a shell.
"""
