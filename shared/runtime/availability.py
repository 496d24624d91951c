"""Redis being unavailable: unreachable, or up but refusing writes. Both are waited out.

Unreachable: the connection is lost or times out, or a cluster is between primaries (a slot
unserved, the cluster down during a failover, a slot moving: TRYAGAIN). Refusing writes: Redis
answers, but refuses every command that would add data — out of memory under `maxmemory` with `noeviction`
(`OOM`), its last snapshot failed with `stop-writes-on-bgsave-error` (`MISCONF`), or it is a
read-only replica (`READONLY`, also a cluster shard's old primary during a failover). Neither
is a fault of the message being handled: a loop waits it out with backoff, a job is not
counted as delivered again for it, a question is not failed for it, and an HTTP request is
answered 503 with Retry-After (`unavailable` gives the reason it names).

`REDIS` follows the state for this process and logs one line when it changes (every place
that waits, down: `redis_unavailable`; all of them through: `redis_available`), never one per
attempt.
"""

from __future__ import annotations

from redis.exceptions import (
    AuthenticationError,
    ClusterError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisClusterException,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from structlog.typing import FilteringBoundLogger

__all__ = [
    "REDIS",
    "REFUSALS",
    "REFUSING_RETRY_AFTER_S",
    "UNREACHABLE",
    "Availability",
    "refusal",
    "unavailable",
]

UNREACHABLE = (RedisConnectionError, RedisTimeoutError, ClusterError, RedisClusterException, TryAgainError)
# Redis's error code for a write it refuses -> what it means, for a one-line reason. A refusal
# inside a script keeps its code after a `-` (Redis 6.2: "Error running script …: -OOM …").
REFUSALS = {
    "OOM": "Redis is out of memory (maxmemory)",
    "MISCONF": "Redis refuses writes after a failed snapshot (MISCONF)",
    "READONLY": "Redis is a read-only replica (READONLY)",
}
REFUSING_RETRY_AFTER_S = 2  # what an HTTP client is told to wait while Redis refuses writes


def unavailable(exc: BaseException) -> str | None:
    """The one-line reason when `exc` says Redis is unavailable (unreachable, or refusing
    writes); None when it is any other error (the command's own fault: not waited out). A
    wrong or missing password is not unavailability: waiting does not mend it."""
    if isinstance(exc, AuthenticationError):
        return None
    if isinstance(exc, UNREACHABLE):
        return f"Redis is unreachable: {exc}"
    return refusal(exc)


def refusal(exc: BaseException) -> str | None:
    """The one-line reason when `exc` is Redis refusing a write (`REFUSALS`), else None."""
    if not isinstance(exc, ResponseError):
        return None
    text = str(exc)
    if isinstance(exc, OutOfMemoryError):
        code = "OOM"
    elif isinstance(exc, ReadOnlyError):
        code = "READONLY"
    else:
        code = next((c for c in REFUSALS if text.startswith(f"{c} ") or f"-{c} " in text), "")
    if not code:
        return None
    said = text.split(f"-{code} ", 1)[-1].removeprefix(f"{code} ").strip().rstrip(".")
    return f"{REFUSALS[code]}: {said}"


class Availability:
    """Redis's availability as this process sees it: each place that waits it out says when
    it is down (with the reason) and when it is through; one line is logged per change."""

    def __init__(self) -> None:
        self._down: dict[object, str] = {}  # who is waiting -> the reason it waits

    @property
    def reason(self) -> str | None:
        """Why Redis is unavailable just now (None: nothing is waiting on it)."""
        return next(iter(self._down.values()), None)

    def down(self, who: object, reason: str, log: FilteringBoundLogger) -> None:
        if not self._down:
            log.warning("redis_unavailable", error=reason)
        self._down[who] = reason

    def up(self, who: object, log: FilteringBoundLogger) -> None:
        if self._down.pop(who, None) is not None and not self._down:
            log.info("redis_available")

    def forget(self, who: object) -> None:
        """`who` stopped waiting without getting through (its service is stopping)."""
        self._down.pop(who, None)


REDIS = Availability()
