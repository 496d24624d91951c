"""Redis clients built from Settings: the password and TLS files in one place.

Every service and tool connects through here, so a password (SPEX_REDIS_PASSWORD or the first
line of SPEX_REDIS_PASSWORD_FILE) and a `rediss://` URL's CA and client certificate apply
everywhere alike. The password is passed to redis-py as an option, never put into a URL, and
never logged. A URL that carries its own password still works: redis-py reads it from the URL.

With SPEX_REDIS_CLUSTER the URL is a seed node of a Redis (or Valkey) Cluster and the client is
redis-py's cluster client (it follows MOVED and failovers). SPEX_PARTITIONS splits the global
streams across the cluster's slots: the keys are built with `Partitions(settings.partitions)`
(`spex.proto.names`), which each service, bus and client holds; connecting sets nothing.
"""

from __future__ import annotations

from typing import TypedDict, cast

import redis
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.retry import Retry

from spex.proto.text import as_str
from spex.shared.runtime.pool import POOL_WAIT_S, WaitingPool
from spex.shared.runtime.settings import Settings, without_password

__all__ = ["RedisOptions", "check_redis", "redis_client", "redis_options", "sync_client"]

# Blocking reads stay far below the socket timeout (redis_streams.md §3.8).
TIMEOUTS: RedisOptions = {"socket_timeout": 10, "health_check_interval": 30}
CLUSTER_TIMEOUTS: RedisOptions = {"socket_timeout": 10}
# With `retry_once`, a command that fails on a broken connection is sent once more on a fresh
# one: after a Redis restart every pooled connection is broken, and without it each one's next
# command fails (redis-py's clients made `from_url` retry nothing). For request-serving clients
# (the ingress, the Python client) whose every command is safe to repeat (the submit script is
# idempotent by client key). Not for the services' loops: a blocking read or a lease script
# repeated after a lost reply would hide the reconnect the bus re-reads its pending entries on.
RETRIED = (redis.ConnectionError, redis.TimeoutError)


class RedisOptions(TypedDict, total=False):
    """The keyword arguments SPEX gives redis-py's `from_url`."""

    password: str
    ssl_ca_certs: str
    ssl_cert_reqs: str
    ssl_certfile: str
    ssl_keyfile: str
    socket_timeout: float
    health_check_interval: float
    retry: Retry | AsyncRetry
    retry_on_error: list[type[Exception]]


def redis_options(settings: Settings) -> RedisOptions:
    """Keyword arguments for redis-py's `from_url`: the password, and TLS files for `rediss://`."""
    options: RedisOptions = {}
    password = settings.password()
    if password:
        options["password"] = password
    if settings.redis_url.startswith("rediss://"):
        options |= _tls_options(settings)
    return options


def redis_client(
    settings: Settings, retry_once: bool = False, pool_size: int | None = None
) -> aioredis.Redis:
    """An asyncio client. `pool_size`: its pool holds that many connections, and a command that
    finds them all in use waits up to POOL_WAIT_S for one, then raises `pool.PoolBusy` (without
    it, redis-py's pool: a hundred, and MaxConnectionsError at once). Not on a cluster, whose
    client keeps a pool per node."""
    if settings.redis_cluster:
        # The cluster client is not a subclass of Redis, but answers every command SPEX sends
        # alike (its pipelines group commands by node); it retries on its own after MOVED.
        options: RedisOptions = {**CLUSTER_TIMEOUTS, **redis_options(settings)}
        cluster = aioredis.RedisCluster.from_url(_cluster_url(settings.redis_url), **options)
        return cast(aioredis.Redis, cluster)
    retry: RedisOptions = _retry_once(AsyncRetry) if retry_once else {}
    options = {**retry, **TIMEOUTS, **redis_options(settings)}
    if pool_size is None:
        return aioredis.Redis.from_url(settings.redis_url, **options)
    pool = WaitingPool.from_url(settings.redis_url, max_connections=pool_size, timeout=POOL_WAIT_S, **options)
    return aioredis.Redis.from_pool(pool)  # the client owns the pool: closing it closes the pool


def sync_client(settings: Settings, retry_once: bool = False) -> redis.Redis:
    if settings.redis_cluster:
        options: RedisOptions = {**CLUSTER_TIMEOUTS, **redis_options(settings)}
        cluster = redis.RedisCluster.from_url(_cluster_url(settings.redis_url), **options)
        return cast(redis.Redis, cluster)
    retry: RedisOptions = _retry_once(Retry) if retry_once else {}
    return redis.Redis.from_url(settings.redis_url, **{**retry, **TIMEOUTS, **redis_options(settings)})


def check_redis(settings: Settings, timeout_s: float = 2.0) -> None:
    """Refuse a Redis SPEX cannot use, in one line naming what to change (ValueError): one that
    wants a password not given, or refuses the one given; a Redis Cluster node without
    SPEX_REDIS_CLUSTER, or the setting without a cluster; a read-only replica. Each would pass a
    PING and then fail every write. Redis unreachable raises redis-py's ConnectionError (the
    caller waits it out, or says so); a server that will not say (an ACL) is not refused."""
    cluster = settings.redis_cluster
    url = _cluster_url(settings.redis_url) if cluster else settings.redis_url
    timeouts = {"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s}
    client = redis.Redis.from_url(url, retry=Retry(NoBackoff(), 0), **timeouts, **redis_options(settings))
    where = without_password(settings.redis_url)
    try:
        info = cast(dict[str, int | str], client.info("cluster"))
        reply = cast(list[bytes | int | list[object]], client.execute_command("ROLE"))
    except redis.AuthenticationError as exc:
        raise ValueError(_auth_problem(settings, where, exc)) from None
    except redis.ResponseError:  # INFO or ROLE not allowed to this user: nothing to check
        return
    finally:
        client.close()
    enabled = bool(int(info.get("cluster_enabled", 0)))
    if enabled and not cluster:
        raise ValueError(
            f"{where} is a node of a Redis Cluster (cluster_enabled:1): "
            "set SPEX_REDIS_CLUSTER=1 (and SPEX_PARTITIONS, at least 4 per shard)"
        )
    if cluster and not enabled:
        raise ValueError(f"SPEX_REDIS_CLUSTER: set, but {where} is not a cluster node (cluster_enabled:0)")
    role = [
        as_str(v) if isinstance(v, bytes) else str(v) for v in reply
    ]  # a replica's: kind, host, port, ...
    if role[0] in ("slave", "replica") and not cluster:  # a cluster client finds the primaries itself
        primary = f" (its primary: {role[1]}:{role[2]})" if len(role) > 2 else ""
        raise ValueError(
            f"{where} is a read-only replica{primary}: point SPEX_REDIS_URL (spex up: --redis) at the primary"
        )


def _auth_problem(settings: Settings, where: str, exc: redis.AuthenticationError) -> str:
    """What to do about a password Redis wants or refuses (never the password itself)."""
    given = (
        "SPEX_REDIS_PASSWORD" if settings.redis_password
        else f"SPEX_REDIS_PASSWORD_FILE ({settings.redis_password_file})" if settings.redis_password_file
        else "the password in SPEX_REDIS_URL" if "@" in settings.redis_url.partition("://")[2]
        else ""
    )  # fmt: skip
    if not given:
        return (
            f"Redis at {where} needs a password: put it in a file and set SPEX_REDIS_PASSWORD_FILE "
            "(spex up: --redis-password-file), or set SPEX_REDIS_PASSWORD"
        )
    reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"Redis at {where} refused the password given by {given}: {reason}"


def _cluster_url(url: str) -> str:
    """A cluster has one database: a `/0` (or none) is all a cluster URL may name."""
    scheme, _, rest = url.partition("://")
    host, _, db = rest.partition("/")
    if db not in ("", "0"):
        raise ValueError(f"SPEX_REDIS_URL (redis_url): a cluster has database 0 only, not /{db}")
    return f"{scheme}://{host}"


def _retry_once(kind: type[Retry] | type[AsyncRetry]) -> RedisOptions:
    """redis-py's options for one more try, after 50 ms, on a fresh connection."""
    retry = kind(ExponentialBackoff(cap=0.5, base=0.05), retries=1, supported_errors=RETRIED)
    return {"retry": retry, "retry_on_error": list(RETRIED)}


def _tls_options(settings: Settings) -> RedisOptions:
    options: RedisOptions = {}
    if settings.redis_ca:
        options |= {"ssl_ca_certs": settings.redis_ca, "ssl_cert_reqs": "required"}
    if settings.redis_cert:
        options["ssl_certfile"] = settings.redis_cert
    if settings.redis_key:
        options["ssl_keyfile"] = settings.redis_key
    return options
