"""The reconciler's pure state: the store (incremental records and what each change dirties),
the decisions read from it, usage counters, status diffs, the in-use finalizer, the
license-copy plan, and the table of watched resources. No I/O (import-linter's `pure-shell-state` contract).
"""
