"""`/ready`: whether this process can serve, which is whether Redis takes a write (a PING
passes while Redis refuses writes: out of memory, a failed snapshot, a read-only replica; then
the reason is Redis's). The probe writes an expiring key over a connection of its own, so a
pool momentarily busy with requests never reads as unready: a readiness probe failing then
would pull a healthy pod from its Service, and the load it carried would land on the others.
An outcome is reused for FRESH_S, so a burst of probes costs one write.
"""

from __future__ import annotations

import asyncio
import time

import redis.asyncio as aioredis

from spex.proto.names import INGRESS_READY
from spex.shared.runtime.availability import refusal
from spex.shared.runtime.streams import is_cluster

__all__ = ["Readiness"]

PROBE_TIMEOUT_S = 2.0  # a write unanswered this long: unready
PROBE_KEY_MS = 10_000  # how long the key a probe writes lives
FRESH_S = 1.0  # an outcome is reused this long
UNREACHABLE = "the queue is unreachable"


class Readiness:
    def __init__(self, client: aioredis.Redis) -> None:
        self._probe, self._owned = _own_connection(client)
        self._lock = asyncio.Lock()  # one probe at a time; probes queued behind reuse its outcome
        self._at, self._reason = -FRESH_S, ""

    async def unready(self) -> str | None:
        """None when Redis took the write within PROBE_TIMEOUT_S (now, or FRESH_S ago), else why not."""
        async with self._lock:
            if time.monotonic() - self._at >= FRESH_S:
                try:
                    await asyncio.wait_for(
                        self._probe.set(INGRESS_READY, 1, px=PROBE_KEY_MS), PROBE_TIMEOUT_S
                    )
                    self._reason = ""
                except Exception as exc:  # unreachable, refused, timed out: not ready, whatever the reason
                    self._reason = refusal(exc) or UNREACHABLE
                self._at = time.monotonic()
            return self._reason or None

    async def aclose(self) -> None:
        if self._owned:
            await self._probe.aclose()


def _own_connection(client: aioredis.Redis) -> tuple[aioredis.Redis, bool]:
    """A client of one connection to the server `client` reaches, with its options (password,
    TLS, timeouts), and whether it is new. A cluster client's own: it keeps a pool per node and
    its probe goes to the node that serves its key."""
    if is_cluster(client):
        return client, False
    pool = client.connection_pool
    own = aioredis.ConnectionPool(
        connection_class=pool.connection_class, max_connections=1, **pool.connection_kwargs
    )
    return aioredis.Redis.from_pool(own), True
