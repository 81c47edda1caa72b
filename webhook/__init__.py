"""gpuclass-webhook: the admission webhook, a thin HTTPS shell over shared/."""
