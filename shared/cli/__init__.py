"""The `gpuclass` command: validate, review, status and explain.

`main` parses the command line; each subcommand calls the core with what the edge
loaded, so its answers are the webhook's and the reconciler's. Everything runs on files
but `explain --kubeconfig/--context`, which lists a cluster, read-only.
"""
