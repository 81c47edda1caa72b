"""The reconciler's pure state: the incremental cache and what each change dirties,
usage counters, status diffs, the in-use finalizer, the license-copy plan, and the
table of watched sources. No I/O (import-linter's `pure-shell-state` contract).
"""
