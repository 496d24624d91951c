"""A pipeline to break on purpose: a durable Redis, a fault proxy in front of it for every
service (so one service can be cut off alone), and every service a supervised process.

Faults, each one call: `kill` (SIGKILL; the supervisor restarts it), `stall`/`resume`
(SIGSTOP/SIGCONT), `partition`/`heal` (the service's link to Redis reset and refused),
`restart_redis` (SIGKILL, then the same port and data), `fill_redis`/`free_redis` (Redis out
of memory: its `maxmemory` set far below what it holds, so it refuses every write with OOM,
then set back). `heal_all` undoes whatever is still in effect. The Redis fsyncs every write
(`appendfsync always`), so a SIGKILL of Redis loses nothing acknowledged: the invariants the
chaos run checks are the pipeline's, not a consequence of the everysec loss window
(docs/guides/operations.md).

With `cluster`, a Valkey Cluster (three primaries, three replicas, no password) replaces the
one Redis and its proxies (a cluster client follows MOVED to the nodes themselves, past any
proxy): `redis` faults SIGKILL a primary (its replica is promoted; the node comes back as a
replica), and `stall_redis` SIGSTOPs one, sometimes past the failover timeout.
"""

from __future__ import annotations

import secrets
import signal
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import cast

import redis

from spex.bench.chaos.proxy import FaultProxy
from spex.proto.names import Partitions
from spex.services.launcher import service_env
from spex.shared.runtime.client import IngressClient
from spex.shared.runtime.connect import redis_client
from spex.shared.runtime.redis_cluster import RedisCluster
from spex.shared.runtime.redis_server import RedisServer, free_port
from spex.shared.runtime.settings import Settings
from spex.shared.runtime.supervisor import Supervisor

__all__ = ["KINDS", "Rig"]

KINDS = ("coordinator", "generator", "scorer", "allocator", "ingress")
FULL_MAXMEMORY = 1  # bytes: below what any Redis holds, so every write is refused
SHORT = {
    "coordinator": "coord",
    "generator": "gen",
    "scorer": "scorer",
    "allocator": "alloc",
    "ingress": "ingress",
}


class Rig:
    def __init__(
        self,
        settings: Settings,
        counts: dict[str, int] | None = None,
        workdir: Path | None = None,
        say=lambda _msg: None,  # noqa: ANN001 - a print-like callable
        cluster: bool = False,
    ) -> None:
        # An ingress only when asked for (its HTTP answers are what a fault checks): the
        # questions go in through the Python client, and a seed's schedule picks its targets
        # from the services started.
        defaults = {"coordinator": 2, "generator": 2, "scorer": 1, "allocator": 1, "ingress": 0}
        self.counts = {**defaults, **(counts or {})}
        self._tmp = None if workdir else tempfile.TemporaryDirectory(prefix="spex-chaos-")
        self.workdir = workdir or Path(self._tmp.name)  # type: ignore[union-attr]
        password = secrets.token_urlsafe(24)
        secret = self.workdir / "redis.password"
        secret.write_text(password + "\n")
        secret.chmod(0o600)
        self.redis = RedisServer(data_dir=self.workdir / "redis", password=password, fsync="always")
        self.settings = replace(settings, redis_password="", redis_password_file=str(secret))
        self.cluster = RedisCluster(primaries=3, replicas=1, node_timeout_ms=1000) if cluster else None
        if cluster:
            self.settings = replace(self.settings, redis_password_file="", redis_cluster=True, partitions=8)
        self.supervisor = Supervisor(self.workdir, say=say)
        self.proxies: dict[str, FaultProxy] = {}
        self.stalled: set[str] = set()
        self.http_port = 0  # the ingress's, when it has one
        self.maxmemory: str | None = None  # Redis's own, while `fill_redis` holds it full
        self.client: IngressClient | None = None

    @property
    def names(self) -> list[str]:
        return list(self.supervisor.children)

    def kind(self, name: str) -> str:
        return self.supervisor.children[name].kind

    def start(self) -> Rig:
        if self.cluster is not None:
            self.settings = replace(self.settings, redis_url=self.cluster.start().url)
        else:
            self.redis.start()
            self.settings = replace(self.settings, redis_url=self.redis.url)
        for kind in KINDS:
            for i in range(self.counts[kind]):
                name = f"{SHORT[kind]}-{i}"
                own = self.settings
                if kind == "ingress":
                    self.http_port = free_port()
                    own = replace(own, http_port=self.http_port)
                if self.cluster is None:
                    proxy = self.proxies[name] = FaultProxy("127.0.0.1", self.redis.port).start()
                    own = replace(own, redis_url=proxy.url())
                self.supervisor.add(kind, name, service_env(own, name))
        self.supervisor.watch(every_s=0.1)
        self.client = IngressClient(
            redis_client(self.settings), self.settings.backlog_limit, self.settings.limits,
            partitions=Partitions(self.settings.partitions),
        )  # fmt: skip
        return self

    def wait_started(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        for name in self.names:
            while b"service_started" not in self.supervisor.log_path(name).read_bytes():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{name} did not start: {self.log(name)[-400:]}")
                time.sleep(0.05)

    # ---------------------------------------------------------------- faults
    def kill(self, name: str) -> None:
        self.stalled.discard(name)
        self.supervisor.signal(name, signal.SIGKILL)

    def stall(self, name: str) -> None:
        self.stalled.add(name)
        self.supervisor.signal(name, signal.SIGSTOP)

    def resume(self, name: str) -> None:
        self.stalled.discard(name)
        self.supervisor.signal(name, signal.SIGCONT)

    def partition(self, name: str) -> None:
        self.proxies[name].partition()

    def heal(self, name: str) -> None:
        self.proxies[name].heal()

    def restart_supervisor(self, down_s: float = 0.5) -> None:
        """The supervisor SIGKILLed and started again (its children see exactly that: their
        lifeline breaks, they stop, new ones start); stalled services die with it."""
        self.stalled.clear()
        self.supervisor.relaunch(down_s)

    def restart_redis(self, down_s: float = 0.3) -> None:
        if self.cluster is not None:  # a primary dies: its replica takes over; it returns as one
            port = self._primary()
            self.cluster.kill(port)
            self.cluster.await_healthy()
            time.sleep(down_s)
            self.cluster.revive(port)
            return
        self.redis.kill()
        time.sleep(down_s)
        self.redis.start()

    def fill_redis(self) -> None:
        """Redis out of memory: every write refused (`OOM command not allowed when used memory >
        'maxmemory'`) until `free_redis`."""
        with redis.Redis.from_url(self.redis.url, password=self.redis.password) as r:
            if self.maxmemory is None:
                self.maxmemory = str(cast(dict, r.config_get("maxmemory"))["maxmemory"])
            r.config_set("maxmemory", FULL_MAXMEMORY)

    def free_redis(self) -> None:
        """Redis's `maxmemory` as it was before `fill_redis`."""
        if self.maxmemory is None:
            return
        with redis.Redis.from_url(self.redis.url, password=self.redis.password) as r:
            r.config_set("maxmemory", self.maxmemory)
        self.maxmemory = None

    def stall_redis(self, down_s: float) -> None:
        """A cluster primary cut off (SIGSTOP) for `down_s`: past the node timeout its replica
        is promoted and it comes back as a replica; shorter, it keeps its slots."""
        assert self.cluster is not None
        port = self._primary()
        self.cluster.stall(port)
        time.sleep(down_s)
        self.cluster.resume(port)
        self.cluster.await_healthy()

    def _primary(self) -> int:
        assert self.cluster is not None
        ports = self.cluster.primary_ports()
        return ports[int(time.monotonic() * 1000) % len(ports)]

    def heal_all(self) -> None:
        for name in list(self.stalled):
            self.resume(name)
        for proxy in self.proxies.values():
            if proxy.mode != "pass":
                proxy.heal()
        if self.cluster is not None:
            self.cluster.await_healthy()
        elif not self.redis.running():
            self.redis.start()
        self.free_redis()

    # ---------------------------------------------------------------- the end
    def log(self, name: str) -> str:
        path = self.supervisor.log_path(name)
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        self.supervisor.stop()
        for proxy in self.proxies.values():
            proxy.stop()
        self.redis.stop()
        if self.cluster is not None:
            self.cluster.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
