"""Redis refusing writes is told apart from a command's own error, in every form it comes in:
out of memory from a command and from inside a script (Redis 6.2 wraps a script's refusal:
"Error running script …: -OOM …"), a read-only replica, a failed snapshot (MISCONF). Real
servers where a server can be made to refuse; Redis's own MISCONF text otherwise."""

import asyncio

import pytest
import redis
import redis.asyncio as aioredis
from redis.exceptions import AuthenticationError, ResponseError

from spex.shared.runtime.availability import refusal, unavailable
from spex.shared.runtime.redis_server import RedisServer, redis_binaries

MEMORY = "Redis is out of memory (maxmemory): command not allowed when used memory > 'maxmemory'"


@pytest.mark.every_redis
def test_out_of_memory_is_a_refusal_from_a_command_and_from_a_script(redis_url):
    async def main():
        r = aioredis.Redis.from_url(redis_url)
        script = r.register_script("return redis.call('XADD', KEYS[1], '*', 'e', ARGV[1])")
        await r.config_set("maxmemory", 1)
        errors = []
        try:
            for call in (lambda: r.xadd("s", {"e": "x"}), lambda: script(keys=["s"], args=["x"])):
                with pytest.raises(ResponseError) as refused:
                    await call()
                errors.append(refused.value)
        finally:
            await r.config_set("maxmemory", 0)
        try:  # with memory back (Redis refuses a write for memory before it reads it)
            with pytest.raises(ResponseError) as own:  # the command's own error
                await r.execute_command("XADD", "s", "not-an-id", "e", "x")
        finally:
            await r.aclose()
        return errors, own.value

    errors, own = asyncio.run(main())
    reasons = [refusal(e) for e in errors]
    assert all(r is not None and r.startswith(MEMORY) for r in reasons), (
        reasons
    )  # Valkey adds the script line
    assert refusal(own) is None and unavailable(own) is None


def test_a_replica_refuses_writes_as_read_only():
    binary = redis_binaries()["6.2"]
    with (
        RedisServer(binary) as primary,
        RedisServer(binary) as replica,
        redis.Redis.from_url(replica.url) as r,
    ):
        r.replicaof("127.0.0.1", primary.port)
        with pytest.raises(ResponseError) as refused:
            r.set("k", 1)
    assert (
        refusal(refused.value)
        == "Redis is a read-only replica (READONLY): You can't write against a read only replica"
    )


def test_a_failed_snapshot_and_the_unreachable_and_a_password():
    misconf = ResponseError(
        "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk."
    )
    assert refusal(misconf).startswith(
        "Redis refuses writes after a failed snapshot (MISCONF): Redis is configured"
    )
    assert (
        unavailable(redis.ConnectionError("Connection refused")) == "Redis is unreachable: Connection refused"
    )
    assert unavailable(AuthenticationError("invalid password")) is None  # waiting does not mend it
