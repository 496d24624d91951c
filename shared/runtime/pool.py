"""The ingress's Redis connection pool: a fixed number of connections, a command that finds
them all in use waiting a moment for one, and a wait that runs out raising `PoolBusy`.

redis-py's own pool raises MaxConnectionsError, a ConnectionError, the moment its connections
are all in use, which reads exactly like Redis being down (the ingress answered "the queue is
unreachable" and `/ready` went 503 while Redis was healthy). Its BlockingConnectionPool waits,
but then raises a plain ConnectionError too. This one tells the two apart: PoolBusy is
back-pressure (the ingress answers 503 "busy" with Retry-After); any other ConnectionError is
Redis unreachable.
"""

from __future__ import annotations

import asyncio
from typing import Any

from redis.asyncio import BlockingConnectionPool
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError

__all__ = ["POOL_WAIT_S", "PoolBusy", "WaitingPool"]

POOL_WAIT_S = 2.0  # the longest a command waits for a pooled connection


class PoolBusy(RedisConnectionError):
    """Every pooled connection stayed in use for the whole wait: this process is busy, Redis is
    not known to be away. Recoverable: retry in a moment."""


class WaitingPool(BlockingConnectionPool):
    """A BlockingConnectionPool whose wait running out raises PoolBusy."""

    async def get_connection(self, *args: Any, **kwargs: Any) -> AbstractConnection:
        try:
            return await super().get_connection(*args, **kwargs)
        except RedisConnectionError as exc:
            # redis-py raises its ConnectionError from the wait's TimeoutError; a failure to
            # connect (Redis away) has another cause, and stays what it is.
            if not isinstance(exc.__cause__, asyncio.TimeoutError):
                raise
            wait = f"{self.timeout:g} s"
            raise PoolBusy(f"all {self.max_connections} Redis connections in use for {wait}") from None
