"""The ingress's pool (`pool.WaitingPool`): a command that finds every connection in use waits
for one, gets it when one is freed within the wait, and raises PoolBusy when none is — never
the ConnectionError of a Redis that is away, which stays what it is. A real Redis."""

import asyncio
import time

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from spex.shared.runtime.connect import redis_client
from spex.shared.runtime.pool import POOL_WAIT_S, PoolBusy
from spex.shared.runtime.redis_server import free_port
from spex.shared.runtime.settings import Settings


def test_a_full_pool_waits_then_says_busy_and_a_dead_redis_says_unreachable(redis_url):
    async def go():
        r = redis_client(Settings(redis_url=redis_url), retry_once=True, pool_size=2)
        pool = r.connection_pool
        held = [await pool.get_connection() for _ in range(2)]
        started = time.monotonic()
        with pytest.raises(PoolBusy) as busy:
            await r.ping()
        waited = time.monotonic() - started
        # One freed during the wait: the command gets it, late but answered.
        asyncio.get_running_loop().call_later(0.2, lambda: asyncio.ensure_future(pool.release(held.pop())))
        assert await r.ping() is True
        await pool.release(held.pop())
        await r.aclose()
        dead = redis_client(Settings(redis_url=f"redis://127.0.0.1:{free_port()}/0"), pool_size=2)
        with pytest.raises(RedisConnectionError) as away:
            await dead.ping()
        await dead.aclose()
        return busy.value, waited, away.value

    busy, waited, away = asyncio.run(go())
    assert POOL_WAIT_S <= waited < POOL_WAIT_S + 0.5
    assert str(busy) == f"all 2 Redis connections in use for {POOL_WAIT_S:g} s"
    assert not isinstance(away, PoolBusy)
