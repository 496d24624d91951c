"""What every service entry point shares: logging, settings, the Redis client, signals.

An entry point's shape: configure logging → build settings → build the service → run →
clean up in `finally`. SIGTERM (and Ctrl-C) is a state change: the service stops taking work
and returns from `run` (exit status 0). A loop that keeps failing on something other than
Redis's availability (`loop_forever`: MAX_CONSECUTIVE_FAILURES in a row) ends the process with
status 1, so its supervisor (`spex up`, Kubernetes) restarts it — a service never lingers
half-alive.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping

import redis.asyncio as aioredis
import structlog
from redis.exceptions import RedisError
from structlog.typing import FilteringBoundLogger

from spex.shared.engine.api import Completion
from spex.shared.engine.live import OnComplete
from spex.shared.runtime import connect, tracing
from spex.shared.runtime.availability import REDIS, unavailable
from spex.shared.runtime.lifeline import watch_lifeline
from spex.shared.runtime.metrics import serve_metrics
from spex.shared.runtime.settings import Settings

__all__ = [
    "MAX_CONSECUTIVE_FAILURES",
    "LoopFailed",
    "Service",
    "configure_logging",
    "guarded",
    "loop_forever",
    "redis_client",
    "run_service",
]


class Service(ABC):
    """What `run_service` calls on the service it builds, in this order: `prepare`, `run`,
    `summary`."""

    async def prepare(self) -> None:  # noqa: B027 - a hook: most services have nothing to prepare
        """Before the service says it started: wait for what it needs (a serving engine, its
        flags), bind its port. A ValueError or OSError here is a one-line error, status 2."""

    @abstractmethod
    async def run(self, stop: asyncio.Event) -> None:
        """Serve until `stop` is set (SIGTERM, Ctrl-C)."""

    @abstractmethod
    def summary(self) -> Mapping[str, object]:
        """The counts the `service_stopped` line reports."""


def configure_logging(level: str = "info") -> None:
    """structlog JSON lines on stderr, one event per lifecycle step."""
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelNamesMapping()[level.upper()]),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
    )


MAX_CONSECUTIVE_FAILURES = 10  # a loop failing this often in a row (~11 s of backoff) gives up


class LoopFailed(RuntimeError):
    """A service loop kept failing on something other than Redis's reachability. Unrecoverable
    here: the process exits with status 1 and its supervisor restarts it."""


async def loop_forever(
    stop: asyncio.Event,
    body: Callable[[], Awaitable[float | None]],
    log: FilteringBoundLogger,
    on_reconnect: Callable[[], None],
    max_failures: int = MAX_CONSECUTIVE_FAILURES,
) -> None:
    """Run `body` until `stop`, each pass followed by the pause it returns (if any). Redis
    being unavailable (unreachable, or refusing writes: `availability.unavailable`) is waited
    out, with backoff, for as long as it takes, and the consumer re-reads its own pending
    entries afterwards (not counted as deliveries); the process logs one line when Redis goes
    and one when it is back. Any other error is logged and retried with backoff; after
    `max_failures` in a row the loop raises LoopFailed, so the service exits with status 1
    instead of lingering half-alive (bad input never gets here: handlers dead-letter it)."""
    backoff = 0.05
    failures = 0
    me = object()  # this loop, in the process's account of who waits on Redis
    try:
        while not stop.is_set():
            try:
                pause_s = await body()
                backoff, failures = 0.05, 0
                REDIS.up(me, log)
                if pause_s:  # the pause the pass asks for before the next
                    await asyncio.sleep(pause_s)
            except Exception as exc:  # noqa: BLE001 - the one place failures are handled
                reason = unavailable(exc)
                if reason is not None:
                    REDIS.down(me, reason, log)
                    await asyncio.sleep(backoff)
                    backoff = min(2.0, backoff * 2)
                    on_reconnect()
                    continue
                failures += 1
                error = str(exc) or repr(exc)
                log.error("loop_failed", error=error, error_type=type(exc).__name__, failures=failures)
                if failures >= max_failures:
                    name = getattr(body, "__name__", "loop")
                    raise LoopFailed(f"{name}: {failures} failures in a row; the last: {error}") from exc
                await asyncio.sleep(backoff)
                backoff = min(2.0, backoff * 2)
    finally:
        REDIS.forget(me)


def guarded(on_complete: OnComplete, log: FilteringBoundLogger) -> OnComplete:
    """An engine loop's completion callback whose failure is logged, never the loop's end (the
    job stays pending: it is reclaimed and retried, then dead-lettered)."""

    async def call(completion: Completion) -> None:
        try:
            await on_complete(completion)
        except Exception as exc:
            log.error("completion_failed", job_id=completion.rid, error=str(exc) or repr(exc))

    return call


def redis_client(
    settings: Settings, retry_once: bool = False, pool_size: int | None = None
) -> aioredis.Redis:
    return connect.redis_client(settings, retry_once, pool_size)


def run_service(
    name: str,
    build: Callable[[aioredis.Redis, Settings], Service],
    *,
    retry_once: bool = False,
    pool_size: Callable[[Settings], int] | None = None,
    **overrides: object,
) -> int:
    """Run one service in this process until SIGTERM/SIGINT. `retry_once`: its Redis client
    retries a command once on a fresh connection (a service that serves requests, the ingress;
    one that loops on the bus sees the reconnect instead). `pool_size`: its client's pool is
    that many connections (of its settings), waited for (`connect.redis_client`)."""
    try:
        settings = Settings.from_env(None, **overrides)
    except ValueError as exc:
        print(f"spex {name}: error: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level)
    watch_lifeline()  # started by a supervisor: stop when it is gone
    log = structlog.get_logger().bind(service=name, consumer=settings.consumer)
    problem = serve_metrics(settings.metrics_port, settings.http_host)
    if problem:
        log.warning("metrics_not_served", error=problem)
    tracing.configure(name, settings.otlp_endpoint)

    async def main() -> int:
        try:  # a bad token file, password file, engine directory or server: one line, status 2
            with contextlib.suppress(RedisError):  # unreachable: waited out once running
                await asyncio.to_thread(connect.check_redis, settings)  # one SPEX cannot use
            client = redis_client(settings, retry_once, pool_size(settings) if pool_size else None)
            service = build(client, settings)
            await service.prepare()
        except (ValueError, OSError) as exc:
            print(f"spex {name}: error: {exc}", file=sys.stderr)
            return 2
        except Exception as exc:  # noqa: BLE001 - e.g. the engine never came up: the supervisor retries
            log.error("service_failed", error=str(exc) or repr(exc), error_type=type(exc).__name__)
            return 1
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        log.info("service_started")
        status = 0
        try:
            await service.run(stop)
        except Exception as exc:  # a loop died: exit, and let the supervisor restart us
            log.error("service_failed", error=str(exc) or repr(exc), error_type=type(exc).__name__)
            status = 1
        finally:
            log.info("service_stopped", status=status, **service.summary())
            await client.aclose()
            tracing.flush()
        return status

    return asyncio.run(main())
