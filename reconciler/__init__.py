"""reconciler: placeholder until its issue lands."""
