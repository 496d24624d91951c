"""Prometheus metrics, one set per process, labelled by service and consumer.

Every service serves them at `http://<host>:<port>/metrics` (`SPEX_METRICS_PORT`; `spex up`
gives each its own port and prints them), scraped by Prometheus or KEDA; the Grafana dashboard
in `deploy/grafana/spex.json` reads them (tests/test_dashboard.py checks that every metric it
names is one of these). Names follow Prometheus conventions: `_total` counters, base units;
no `_created` series.

What each service records:
- every service: `spex_messages_total`, `spex_dead_letters_total`, `spex_bus_hop_seconds`;
- coordinator: `spex_query_latency_seconds`, `spex_queries_total`, `spex_speculative_jobs_total`,
  `spex_tokens_total`, `spex_queries_owned`;
- generator and scorer: `spex_jobs_total`, `spex_job_seconds`, `spex_queue_wait_seconds`,
  `spex_jobs_in_flight`;
- allocator: `spex_governor_slack`, `spex_speculative_pool`, `spex_speculative_budget`;
- ingress: `spex_questions_in_flight`, `spex_backlog`, `spex_http_requests_total`.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, disable_created_metrics, start_http_server

__all__ = [
    "BACKLOG",
    "BUS_HOP",
    "DEAD_LETTERS",
    "EVENTS",
    "GOVERNOR_SLACK",
    "HTTP_REQUESTS",
    "IN_FLIGHT",
    "JOBS",
    "JOBS_IN_FLIGHT",
    "JOB_SECONDS",
    "QUERIES",
    "QUERIES_OWNED",
    "QUERY_LATENCY",
    "QUEUE_WAIT",
    "SPECULATION",
    "SPEC_BUDGET",
    "SPEC_POOL",
    "TOKENS",
    "serve_metrics",
]

disable_created_metrics()

# Latency buckets from a simulated step (milliseconds) to a long search (tens of minutes).
_SECONDS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)

EVENTS = Counter("spex_messages_total", "messages handled", ["service", "consumer", "type"])
DEAD_LETTERS = Counter(
    "spex_dead_letters_total", "messages parked in a dead-letter stream", ["consumer", "stream"]
)
BUS_HOP = Histogram(
    "spex_bus_hop_seconds", "a message's time from its publisher to its reader (wall clocks)",
    ["service", "type"], buckets=_SECONDS,
)  # fmt: skip

QUERY_LATENCY = Histogram(
    "spex_query_latency_seconds", "a query's time from its adoption to its answer",
    ["algorithm", "mode"], buckets=_SECONDS,
)  # fmt: skip
QUERIES = Counter("spex_queries_total", "queries finished, by outcome", ["outcome"])
SPECULATION = Counter(
    "spex_speculative_jobs_total", "speculative jobs: issued, and what became of them", ["outcome"]
)
TOKENS = Counter(
    "spex_tokens_total",
    "generated tokens: the search's own (generated), speculative, and speculative the search used "
    "(consumed); wasted is speculative - consumed",
    ["kind"],
)
QUERIES_OWNED = Gauge("spex_queries_owned", "queries this coordinator holds the lease on", ["consumer"])

JOBS = Counter("spex_jobs_total", "jobs finished, by outcome", ["service", "consumer", "outcome"])
JOB_SECONDS = Histogram(
    "spex_job_seconds", "a finished job's time on its worker, from taken to done", ["kind", "priority"],
    buckets=_SECONDS,
)  # fmt: skip
QUEUE_WAIT = Histogram(
    "spex_queue_wait_seconds", "a job's time in its engine from arrival to its first token (wall)",
    ["service", "priority"], buckets=_SECONDS,
)  # fmt: skip
JOBS_IN_FLIGHT = Gauge("spex_jobs_in_flight", "jobs on this worker's engine", ["service", "consumer"])

GOVERNOR_SLACK = Gauge("spex_governor_slack", "the TPOT governor's roofline slack, per worker", ["worker"])
SPEC_POOL = Gauge("spex_speculative_pool", "speculative jobs the allocator lets a worker run", ["worker"])
SPEC_BUDGET = Gauge("spex_speculative_budget", "speculative jobs granted to queries in all (k_total)")

IN_FLIGHT = Gauge("spex_questions_in_flight", "questions submitted and not answered yet")
BACKLOG = Gauge("spex_backlog", "questions submitted that no coordinator has taken yet")
HTTP_REQUESTS = Counter("spex_http_requests_total", "HTTP requests to the ingress", ["route", "status"])


def serve_metrics(port: int, host: str = "127.0.0.1") -> str | None:
    """Serve /metrics over HTTP on `host:port` (a daemon thread; 0 = do not serve). A port
    already taken is not fatal: returns the error, and the service runs without metrics."""
    if not port:
        return None
    try:
        start_http_server(port, addr=host)
    except OSError as exc:
        return f"metrics port {port}: {exc.strerror or exc}"
    return None
