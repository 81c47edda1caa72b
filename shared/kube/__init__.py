"""Talking to Kubernetes, for the webhook, the reconciler and the CLI alike.

The cluster configuration, the HTTP client (`kubeclient`, one of the three kubernetes_asyncio
adapters), its errors, rate limit and retry delays, the reflector (`listwatch`) with the table of
API collections it lists and watches (`apicollections`) and the per-resource sync state its
consumers read (`syncview`; both pure). It imports the core and never a shell.
"""
