"""The ingress's back-pressure: every 429 and 503 it sends says when to retry (Retry-After),
and a pool with no connection free is a busy ingress, not an unreachable Redis.

A 429 is one client's excess (its questions in flight, its long-lived requests); a 503 is the
ingress's or the cluster's (a full backlog, a busy pool, Redis away). Either is worth retrying,
so both carry `Retry-After` whoever builds the refusal (`with_retry_after`).
"""

from __future__ import annotations

import time

import structlog

from spex.shared.runtime.pool import PoolBusy

__all__ = ["RETRY_AFTER_S", "BusyRefusals", "with_retry_after"]

RETRY_AFTER_S = 1  # what a 429 or 503 tells the client to wait, seconds
RETRIED = frozenset({429, 503})  # the statuses that say when to retry
BUSY_LOG_EVERY_S = 10.0  # an ingress busy for a while logs a line this often, not one a request


def with_retry_after(status: int, headers: dict[str, str] | None = None) -> dict[str, str] | None:
    """`headers`, with Retry-After when `status` is a 429 or a 503 that does not say already."""
    if status not in RETRIED or (headers and "Retry-After" in headers):
        return headers
    return {**(headers or {}), "Retry-After": str(RETRY_AFTER_S)}


class BusyRefusals:
    """The reason a request refused for a busy pool is given, and the log of those refusals:
    one line when they start and one every BUSY_LOG_EVERY_S while they go on (with how many),
    never a line per request, which under the very load that causes them would flood the log."""

    def __init__(self) -> None:
        self.log = structlog.get_logger().bind(service="ingress")
        self._logged_at = -BUSY_LOG_EVERY_S
        self._since_logged = 0

    def reason(self, exc: PoolBusy) -> str:
        self._since_logged += 1
        if time.monotonic() - self._logged_at >= BUSY_LOG_EVERY_S:
            self.log.warning("ingress_busy", error=str(exc), refused=self._since_logged)
            self._logged_at, self._since_logged = time.monotonic(), 0
        return f"the ingress is busy: {exc}; retry later"
