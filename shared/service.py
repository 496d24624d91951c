"""What every service entry point shares: logging, settings, the Redis client, signals.

An entry point's shape: configure logging → build settings → build the service → run →
clean up in `finally`. SIGTERM (and Ctrl-C) is a state change: the service stops taking work
and returns from `run`.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Callable
from typing import Any, Protocol

import redis.asyncio as aioredis
import structlog

from shared.settings import Settings

__all__ = ["Service", "configure_logging", "redis_client", "run_service"]


class Service(Protocol):
    async def run(self, stop: asyncio.Event) -> None: ...


def configure_logging(level: str = "info") -> None:
    """structlog JSON lines on stderr, one event per lifecycle step."""
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
    )


def redis_client(settings: Settings) -> aioredis.Redis:
    # Blocking reads stay far below the socket timeout (redis_streams.md §3.8).
    return aioredis.Redis.from_url(settings.redis_url, socket_timeout=10, health_check_interval=30)


def run_service(name: str, build: Callable[[aioredis.Redis, Settings], Any], **overrides: object) -> int:
    """Run one service in this process until SIGTERM/SIGINT."""
    try:
        settings = Settings.from_env(None, **overrides)
    except ValueError as exc:
        print(f"spex {name}: error: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level)
    log = structlog.get_logger().bind(service=name, consumer=settings.consumer)

    async def main() -> None:
        client = redis_client(settings)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        service = build(client, settings)
        log.info("service_started")
        try:
            await service.run(stop)
        finally:
            log.info("service_stopped", **getattr(service, "summary", dict)())
            await client.aclose()

    asyncio.run(main())
    return 0
