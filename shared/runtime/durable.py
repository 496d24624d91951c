"""Writes that must survive a failover of a Redis Cluster shard.

A cluster replicates asynchronously: a primary acknowledges a write before its replica has it,
so when the replica is promoted the write can be gone. Every key of one query lives on one
shard (`spex.proto.names`), and after a failover the coordinators replay their queries'
inboxes (their primaries' run ids changed), re-publishing whatever of theirs was lost. Two
kinds of write nothing would redo are made durable here:

- a submission, acknowledged to its client (lost, the question is gone without a trace), and
- a job's result, after which its worker acknowledges the job (the result lost and the
  acknowledgement kept — a primary cut off and back for a moment takes writes its successor
  never sees, while the next command already reaches the successor — the query would wait for
  it forever).

`Durable.run` sends the script and `WAIT` in one pipeline on one connection to the primary of
the script's slot (WAIT counts the replicas that have this connection's writes), and repeats
the script until a replica has it. The script is idempotent (the publish and the submit are),
so a repeat after a lost write writes it again and after a kept one does nothing. A shard that
has no replica just now (its replica was promoted, the old primary not back) cannot do better:
the write counts as made.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, cast

import redis.asyncio as aioredis
from redis.exceptions import (
    AskError,
    BusyLoadingError,
    ClusterError,
    MasterDownError,
    ReadOnlyError,
    RedisClusterException,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

__all__ = ["Durable", "NotReplicated"]

WAIT_MS = 200  # how long a write waits for its replica, each try
TRIES = 50  # about 10 s of tries before giving up (the caller retries as after any outage)
# A primary with no replica is trusted alone only after this many tries (over a second): one
# cut off and back (its replica promoted meanwhile) has no replica either, until its peers'
# gossip tells it, within milliseconds of its return, that it is a replica now.
ALONE_AFTER = 5
ALONE_RECHECK_S = 1.0  # a primary found alone: writes go on after a short wait, rechecked this often
ALONE_WAIT_MS = 5  # the wait for a replica while a primary is known to have none (one may return)
# Replies that mean the slot is served elsewhere now, or not yet: ask the cluster again.
MOVED = (AskError, BusyLoadingError, ClusterError, MasterDownError, ReadOnlyError, TryAgainError)
# What a node connection takes from the cluster client's own (credentials, TLS, timeouts).
KEPT = ("username", "password", "socket_timeout", "connection_class", "ssl_ca_certs", "ssl_certfile",
        "ssl_keyfile", "ssl_cert_reqs")  # fmt: skip


def _fence(key: str) -> str:
    """A key in `key`'s slot (its hash tag, or the key itself) for the fence write."""
    start = key.find("{")
    end = key.find("}", start + 1)
    tag = key[start + 1 : end] if start >= 0 and end > start + 1 else key
    return f"{{{tag}}}:durable-fence"


class NotReplicated(RedisConnectionError):
    """No replica took the write within TRIES: treated as Redis being unavailable."""


class Durable:
    def __init__(self, cluster: aioredis.RedisCluster, replicas: int = 1) -> None:
        self.cluster = cluster
        self.replicas = replicas
        self._nodes: dict[str, aioredis.Redis] = {}
        self._alone: dict[str, float] = {}  # primary -> when it was last found with no replica
        self._options = {k: v for k, v in cluster.connection_kwargs.items() if k in KEPT}

    async def run(self, script: Any, keys: list[str], args: list[object]) -> Any:
        """`script(keys, args)` on the primary of `keys[0]`'s slot, once a replica has it."""
        await self.cluster.initialize()  # the slot map (once: a no-op after the first command)
        for attempt in range(TRIES):
            try:
                node = self.cluster.get_node_from_key(keys[0])
            except RedisClusterException:  # the slot has no primary just now (a failover)
                node = None
            if node is None:
                await self._refresh(attempt, keys[0])
                continue
            name = f"{node.host}:{node.port}"
            client = self._client(node.host, int(node.port))
            alone = time.monotonic() - self._alone.get(name, -1e9) < ALONE_RECHECK_S
            try:
                async with client.pipeline(transaction=False) as pipe:
                    await script(keys=keys, args=args, client=pipe)  # loaded on the node first
                    # A write of this connection's own after the script: a repeat that found
                    # its write already made writes nothing, and WAIT would count nothing.
                    # Replication is in order: a replica with the fence has what came before.
                    pipe.set(_fence(keys[0]), 1, px=60_000)
                    pipe.execute_command("WAIT", self.replicas, ALONE_WAIT_MS if alone else WAIT_MS)
                    result, _, acked = await pipe.execute(raise_on_error=False)
            except (RedisConnectionError, RedisTimeoutError):
                await self._refresh(attempt, keys[0])
                continue
            if isinstance(result, ResponseError):
                if isinstance(result, MOVED):
                    await self._refresh(attempt, keys[0])
                    continue
                raise result
            if isinstance(acked, int) and acked >= self.replicas:
                self._alone.pop(name, None)  # a replica (again)
                return result
            if alone and isinstance(acked, int):
                return result  # still alone: its replica was promoted and is not back
            # Nothing to wait for when its replica was promoted (and it is not back yet).
            settled = not isinstance(acked, Exception)
            may_be_alone = settled and (attempt >= ALONE_AFTER or name in self._alone)
            if may_be_alone and await self._found_alone(client):
                self._alone[name] = time.monotonic()
                return result
            await self._refresh(attempt, keys[0])
        raise NotReplicated(f"no replica took a write to {keys[0]!r} in {TRIES} tries")

    def _client(self, host: str, port: int) -> aioredis.Redis:
        """One connection per primary: WAIT counts what this connection wrote."""
        name = f"{host}:{port}"
        if name not in self._nodes:
            pool = aioredis.BlockingConnectionPool(host=host, port=port, max_connections=1, **self._options)
            self._nodes[name] = aioredis.Redis(connection_pool=pool)
        return self._nodes[name]

    async def _found_alone(self, client: aioredis.Redis) -> bool:
        """The node is a primary with no replica connected."""
        try:
            info = cast(dict[str, str | int], await client.info("replication"))
        except (RedisConnectionError, RedisTimeoutError):
            return False  # not known: keep trying
        return info.get("role") == "master" and int(info.get("connected_slaves", 0)) == 0

    async def _refresh(self, attempt: int, key: str) -> None:
        """Wait a little, then let the cluster client learn who serves `key` now: a command on
        it follows MOVED and reconnects as the client does for everything else."""
        await asyncio.sleep(min(0.05 * (attempt + 1), 0.5))
        failed = (RedisConnectionError, RedisTimeoutError, RedisClusterException, ResponseError)
        with contextlib.suppress(*failed):
            await self.cluster.exists(key)

    async def aclose(self) -> None:
        for client in self._nodes.values():
            await client.aclose()
        self._nodes.clear()
