"""The `gpuclass` command: validate, review, status, explain and plan.

`main` parses the command line; each subcommand calls the core with what the edge
loaded, so its answers are the webhook's and the reconciler's. Everything runs on files
but `explain` and `plan` with `--kubeconfig/--context`, which list a cluster, read-only.
"""
