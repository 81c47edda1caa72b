"""Prometheus metrics of the webhook, in a registry of its own (one per app instance)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

from gpuclass.shared.kube.processmetrics import register_standard_metrics

disable_created_metrics()  # type: ignore[no-untyped-call]

DURATION_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)


CUT_REASONS = (
    "header_timeout",
    "idle_evicted",
    "connection_limit",
    "slow_body_evicted",
    "in_flight_limit",
    "malformed",
    "headers_too_large",
)


class WebhookMetrics:
    """Every metric the webhook exports, in its own registry (so tests build as many as they like);
    the names and labels are the ones docs/metrics.md lists and the chart's alerts use."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        register_standard_metrics(r)
        self.requests = Counter(
            "gpuclass_webhook_requests",
            "Admission requests answered, by webhook, operation, verdict and HTTP-level code.",
            ["webhook", "operation", "allowed", "code"],
            registry=r,
        )
        self.denials = Counter(
            "gpuclass_webhook_denials",
            "Refusal causes, by webhook and cause code.",
            ["webhook", "cause"],
            registry=r,
        )
        self.duration = Histogram(
            "gpuclass_webhook_request_duration_seconds",
            "Time to answer an admission request.",
            ["webhook"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.answering = 0
        """Admission requests being answered: a plain count the route keeps (one event loop, no
        lock), read by the gauge when scraped rather than set per request."""
        self.in_flight = Gauge(
            "gpuclass_webhook_requests_in_flight", "Admission requests being answered.", registry=r
        )
        self.in_flight.set_function(lambda: self.answering)
        self.catalog_synced = Gauge(
            "gpuclass_webhook_catalog_synced",
            "1 once the catalog cache has completed its first full sync.",
            registry=r,
        )
        self.catalog_age = Gauge(
            "gpuclass_webhook_catalog_age_seconds",
            "Seconds since the catalog cache last changed.",
            registry=r,
        )
        self.cert_expiry: Gauge | None = None  # see served_certificate
        self.connections_cut = Counter(
            "gpuclass_webhook_connections_cut",
            "Connections closed by a server limit, by reason (docs/webhook.md, Limits).",
            ["reason"],
            registry=r,
        )
        self.watch_restarts = Counter(
            "gpuclass_webhook_watch_restarts",
            "List/watch restarts of the catalog cache, by resource and reason.",
            ["resource", "reason"],
            registry=r,
        )
        self.store_errors = Counter(
            "gpuclass_webhook_store_errors",
            "Objects the catalog cache raised on (a bug in the webhook, logged with a traceback).",
            ["resource"],
            registry=r,
        )
        for reason in CUT_REASONS:
            self.connections_cut.labels(reason)
        self.cert_synced: Gauge | None = None
        self.cert_sync_failures: Counter | None = None
        # Series exist from the start so that rate()/increase() and dashboards show 0, not nothing.
        for resource in ("gpuclasses", "namespaces", "kubevirts", "resourcequotas"):
            for reason in ("expired", "error"):
                self.watch_restarts.labels(resource, reason)

    def served_certificate(self, not_after: float) -> None:
        """A serving certificate is loaded; `not_after` is its end (Unix time).

        The series exists only from the first load: a replica still on its placeholder (waiting
        for the webhook-managed Secret) exports nothing rather than 0, so the expiry alert never
        reads a value that is no certificate's.
        """
        if not_after <= 0:
            return  # nothing loaded
        if self.cert_expiry is None:
            self.cert_expiry = Gauge(
                "gpuclass_webhook_cert_expiry_timestamp_seconds",
                "notAfter of the serving certificate (Unix time); absent until one is loaded.",
                registry=self.registry,
            )
        self.cert_expiry.set(not_after)

    def certificate_sync(self, ok: bool) -> None:
        """A sync of the webhook-managed certificates ended (`ok`) or failed.

        The two series exist only in the webhook-managed mode (created on the first sync), so
        the alert on them stays silent where the chart or cert-manager makes the certificates.
        """
        if self.cert_synced is None or self.cert_sync_failures is None:
            self.cert_synced = Gauge(
                "gpuclass_webhook_certificate_last_sync_timestamp_seconds",
                "When this replica last completed a sync of its own CA, serving certificate and "
                "caBundles (Unix time; 0 before the first). Webhook-managed certificates only.",
                registry=self.registry,
            )
            self.cert_sync_failures = Counter(
                "gpuclass_webhook_certificate_sync_failures",
                "Certificate syncs that failed (API refusals, conflicts that did not settle, "
                "unwritable files). Webhook-managed certificates only.",
                registry=self.registry,
            )
        if ok:
            self.cert_synced.set_to_current_time()
        else:
            self.cert_sync_failures.inc()
