"""Start SPEX services against a real Redis: as asyncio tasks in this process, or as
separate OS processes (`python -m spex.services.<name>`), with the same interface.

Each process writes its log to a file of its own (never an unread pipe, which a chatty
service could fill and block on); `tests/conftest.py` shows every cluster's logs under a
failed test's report. (In-process services log to this process: pytest captures that.)
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from spex.proto.names import ALLOCATOR_LEASE, Partitions
from spex.services.allocator import Allocator
from spex.services.coordinator import Coordinator
from spex.services.generator.service import Generator
from spex.services.ingress.service import IngressService
from spex.services.launcher import service_env
from spex.services.scorer import Scorer
from spex.shared.runtime.client import IngressClient
from spex.shared.runtime.connect import redis_client
from spex.shared.runtime.settings import Settings
from spex.shared.runtime.supervisor import Supervisor

SERVICES = {
    "coordinator": Coordinator,
    "generator": Generator,
    "scorer": Scorer,
    "allocator": Allocator,
    "ingress": IngressService,
}
LOG_TAIL_LINES = 200  # of each service, in a failed test's report

CLUSTERS: list[Cluster] = []  # the clusters of the running test (cleared by tests/conftest.py)


class Cluster:
    """Services on one Redis. Processes run under the `spex up` supervisor (a killed one is
    restarted, as in production) unless `supervise=False`; `urls` gives a service its own
    Redis URL (a fault proxy in front of Redis, say)."""

    def __init__(self, url: str, mode: str, supervise: bool = True, **settings: Any) -> None:
        self.url, self.mode = url, mode
        self.settings = Settings(redis_url=url, **{"time_scale": 0.002, "block_ms": 50, **settings})
        self.tasks: dict[str, tuple[asyncio.Task[None], asyncio.Event, Any]] = {}
        self.client = IngressClient(
            redis_client(self.settings), self.settings.backlog_limit, self.settings.limits,
            partitions=Partitions(self.settings.partitions),
        )  # fmt: skip
        self._log_dir = tempfile.TemporaryDirectory(prefix="spex-services-")
        self.supervisor = Supervisor(Path(self._log_dir.name), say=lambda _msg: None)
        self.urls: dict[str, str] = {}
        if supervise:
            self.supervisor.watch(every_s=0.05)
        self._logs: dict[str, str] = {}  # kept after stop(), for the failure report
        self._clients: list[Any] = []  # the in-process services' Redis clients, closed by stop()
        CLUSTERS.append(self)

    @property
    def procs(self) -> dict[str, Any]:
        return {name: child.proc for name, child in self.supervisor.children.items()}

    def _settings(self, name: str) -> Settings:
        return Settings(
            **{**asdict(self.settings), "consumer": name, "redis_url": self.urls.get(name, self.url)}
        )

    def _log_path(self, name: str) -> Path:
        return Path(self._log_dir.name, f"{name}.log")

    async def start(self, kind: str, name: str) -> None:
        if self.mode == "inprocess":
            stop = asyncio.Event()
            settings = self._settings(name)
            client = redis_client(settings)
            self._clients.append(client)
            service = SERVICES[kind](client, settings)
            self.tasks[name] = (asyncio.create_task(service.run(stop)), stop, service)
            return
        self.supervisor.add(kind, name, service_env(self._settings(name), name))

    async def start_all(self, generators: int = 1, coordinators: int = 1) -> None:
        for i in range(coordinators):
            await self.start("coordinator", f"coord-{i}")
        for i in range(generators):
            await self.start("generator", f"gen-{i}")
        await self.start("scorer", "scorer-0")
        await self.start("allocator", "allocator-0")
        await self._wait_for(ALLOCATOR_LEASE)  # it reads query stats from its start on

    async def _wait_for(self, key: str, timeout_s: float = 20.0) -> None:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while not await self.client.r.exists(key):
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"{key} not set within {timeout_s} s:\n{self.logs()}")
            await asyncio.sleep(0.02)

    def kill(self, name: str) -> None:
        """SIGKILL a process (no cleanup, no acks): what a crash looks like. The supervisor
        restarts it (unless held down)."""
        self.supervisor.signal(name, signal.SIGKILL)

    def stall(self, name: str) -> None:
        self.supervisor.signal(name, signal.SIGSTOP)

    def resume(self, name: str) -> None:
        self.supervisor.signal(name, signal.SIGCONT)

    async def stop(self) -> None:
        for _task, stop, _ in self.tasks.values():
            stop.set()
        if self.tasks:
            await asyncio.gather(*(t for t, _, _ in self.tasks.values()))
        self.supervisor.stop()
        await self.client.aclose()
        for client in self._clients:
            await client.aclose()
        self._logs = {name: self._read_log(name) for name in self.procs}
        self._log_dir.cleanup()

    def logs(self) -> str:
        """The last lines each service process logged (kept once the cluster has stopped)."""
        texts = self._logs or {name: self._read_log(name) for name in self.procs}
        return "\n".join(
            f"----- {name} -----\n" + "\n".join(text.splitlines()[-LOG_TAIL_LINES:])
            for name, text in texts.items()
        )

    def _read_log(self, name: str) -> str:
        path = self._log_path(name)
        return path.read_text(errors="replace") if path.exists() else ""

    def service(self, name: str) -> Any:
        return self.tasks[name][2]


@contextlib.contextmanager
def threaded_cluster(url: str, **settings: Any) -> Iterator[tuple[str, Cluster, asyncio.AbstractEventLoop]]:
    """An in-process cluster with its HTTP ingress, on an event loop in a thread of its own, so
    a test's blocking clients (and `spex` processes) call it meanwhile: (the ingress's URL, the
    cluster, its loop: `asyncio.run_coroutine_threadsafe(..., loop)` reaches it)."""
    from spex.shared.runtime.redis_server import free_port
    from tests.services.helpers import wait_http

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    port = free_port()
    cluster = Cluster(url, "inprocess", http_port=port, **settings)

    async def start() -> None:
        await cluster.start("ingress", "ingress-0")
        await cluster.start_all()

    try:
        asyncio.run_coroutine_threadsafe(start(), loop).result(60)
        base = f"http://127.0.0.1:{port}"
        wait_http(f"{base}/health")
        yield base, cluster, loop
    finally:
        asyncio.run_coroutine_threadsafe(cluster.stop(), loop).result(60)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
