"""Prometheus metrics of the webhook, in a registry of its own (one per app instance)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

from gpuclass.shared.process.processmetrics import (
    MetricSpec,
    build_metrics,
    register_standard_metrics,
)

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


METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "requests",
        "counter",
        "gpuclass_webhook_requests",
        "Admission requests answered, by webhook, operation, verdict and HTTP-level code.",
        ("webhook", "operation", "allowed", "code"),
    ),
    MetricSpec(
        "denials",
        "counter",
        "gpuclass_webhook_denials",
        "Refusal causes, by webhook and cause code.",
        ("webhook", "cause"),
    ),
    MetricSpec(
        "duration",
        "histogram",
        "gpuclass_webhook_request_duration_seconds",
        "Time to answer an admission request.",
        ("webhook",),
        DURATION_BUCKETS,
    ),
    MetricSpec(
        "in_flight",
        "gauge",
        "gpuclass_webhook_requests_in_flight",
        "Admission requests being answered.",
    ),
    MetricSpec(
        "catalog_synced",
        "gauge",
        "gpuclass_webhook_catalog_synced",
        "1 once the catalog store has completed its first full list of every resource.",
    ),
    MetricSpec(
        "catalog_age",
        "gauge",
        "gpuclass_webhook_catalog_age_seconds",
        "Seconds since the catalog last changed.",
    ),
    MetricSpec(
        "connections_cut",
        "counter",
        "gpuclass_webhook_connections_cut",
        "Connections closed by a server limit, by reason (docs/webhook.md, Limits).",
        ("reason",),
    ),
    MetricSpec(
        "watch_restarts",
        "counter",
        "gpuclass_webhook_watch_restarts",
        "List/watch restarts of the catalog store, by resource and reason.",
        ("resource", "reason"),
    ),
    MetricSpec(
        "store_errors",
        "counter",
        "gpuclass_webhook_store_errors",
        "Objects the catalog store raised on (a bug in the webhook, logged with a traceback).",
        ("resource",),
    ),
)
"""The metrics every webhook exports from the start, in exposition order (docs/metrics.md; the
chart's alerts read them)."""

CERT_EXPIRY = MetricSpec(
    "cert_expiry",
    "gauge",
    "gpuclass_webhook_cert_expiry_timestamp_seconds",
    "notAfter of the serving certificate (Unix time); absent until one is loaded.",
)
CERT_SYNCED = MetricSpec(
    "cert_synced",
    "gauge",
    "gpuclass_webhook_certificate_last_sync_timestamp_seconds",
    "When this replica last completed a sync of its own CA, serving certificate and "
    "caBundles (Unix time; 0 before the first). Webhook-managed certificates only.",
)
CERT_SYNC_FAILURES = MetricSpec(
    "cert_sync_failures",
    "counter",
    "gpuclass_webhook_certificate_sync_failures",
    "Certificate syncs that failed (API refusals, conflicts that did not settle, "
    "unwritable files). Webhook-managed certificates only.",
)
"""The certificate metrics, each created on the first event it reports (see the methods)."""
WATCHED = ("gpuclasses", "namespaces", "kubevirts", "resourcequotas")


class WebhookMetrics:
    """Every metric the webhook exports, in its own registry (so tests build as many as they like);
    declared in :data:`METRICS` and the `CERT_*` specs, one attribute each."""

    requests: Counter
    denials: Counter
    duration: Histogram
    in_flight: Gauge
    catalog_synced: Gauge
    catalog_age: Gauge
    connections_cut: Counter
    watch_restarts: Counter
    store_errors: Counter

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        register_standard_metrics(self.registry)
        for attribute, metric in build_metrics(METRICS, self.registry).items():
            setattr(self, attribute, metric)
        self.answering = 0
        """Admission requests being answered: a plain count the route keeps (one event loop, no
        lock), read by the gauge when scraped rather than set per request."""
        self.in_flight.set_function(lambda: self.answering)
        self.cert_expiry: Gauge | None = None  # see served_certificate
        self.cert_synced: Gauge | None = None
        self.cert_sync_failures: Counter | None = None
        # Series exist from the start so that rate()/increase() and dashboards show 0, not nothing.
        for reason in CUT_REASONS:
            self.connections_cut.labels(reason)
        for resource in WATCHED:
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
                CERT_EXPIRY.name, CERT_EXPIRY.help, CERT_EXPIRY.labels, registry=self.registry
            )
        self.cert_expiry.set(not_after)

    def certificate_sync(self, ok: bool) -> None:
        """A sync of the webhook-managed certificates ended (`ok`) or failed.

        The two series exist only in the webhook-managed mode (created on the first sync), so
        the alert on them stays silent where the chart or cert-manager makes the certificates.
        """
        if self.cert_synced is None or self.cert_sync_failures is None:
            spec = CERT_SYNCED
            self.cert_synced = Gauge(spec.name, spec.help, spec.labels, registry=self.registry)
            spec = CERT_SYNC_FAILURES
            self.cert_sync_failures = Counter(
                spec.name, spec.help, spec.labels, registry=self.registry
            )
        if ok:
            self.cert_synced.set_to_current_time()
        else:
            self.cert_sync_failures.inc()
