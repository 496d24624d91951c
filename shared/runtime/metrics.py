"""Prometheus metrics, one set per process, labelled by service and consumer.

`SPEX_METRICS_PORT` > 0 serves them at `http://<host>:<port>/metrics` (scraped by Prometheus or
KEDA). Names follow Prometheus conventions: `_total` counters, base units.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, start_http_server

__all__ = ["DEAD_LETTERS", "EVENTS", "JOBS", "JOBS_IN_FLIGHT", "QUERIES_OWNED", "serve_metrics"]

EVENTS = Counter("spex_messages_total", "messages handled", ["service", "consumer", "type"])
JOBS = Counter("spex_jobs_total", "jobs finished, by outcome", ["service", "consumer", "outcome"])
DEAD_LETTERS = Counter(
    "spex_dead_letters_total", "messages parked in a dead-letter stream", ["consumer", "stream"]
)
JOBS_IN_FLIGHT = Gauge("spex_jobs_in_flight", "jobs on this worker's engine", ["service", "consumer"])
QUERIES_OWNED = Gauge("spex_queries_owned", "queries this coordinator holds the lease on", ["consumer"])


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
