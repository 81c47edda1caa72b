"""webhook: placeholder until its issue lands."""
