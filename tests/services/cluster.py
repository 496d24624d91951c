"""Start SPEX services against a real Redis: as asyncio tasks in this process, or as
separate OS processes (`python -m services.<name>`), with the same interface."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import asdict
from typing import Any

import redis.asyncio as aioredis

from services.coordinator import Coordinator
from services.generator import Generator
from services.ingress import IngressClient, IngressService
from services.scorer import Scorer
from shared.settings import ENV, Settings

SERVICES = {"coordinator": Coordinator, "generator": Generator, "scorer": Scorer, "ingress": IngressService}


class Cluster:
    def __init__(self, url: str, mode: str, **settings: Any) -> None:
        self.url, self.mode = url, mode
        self.settings = Settings(redis_url=url, **{"time_scale": 0.002, "block_ms": 50, **settings})
        self.tasks: dict[str, tuple[asyncio.Task[None], asyncio.Event, Any]] = {}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.client = IngressClient(aioredis.Redis.from_url(url))
        self.log_dir = tempfile.TemporaryDirectory(prefix="spex-services-")
        self.logs: list[Any] = []

    def _settings(self, name: str) -> Settings:
        return Settings(**{**asdict(self.settings), "consumer": name})

    async def start(self, kind: str, name: str) -> None:
        if self.mode == "inprocess":
            stop = asyncio.Event()
            service = SERVICES[kind](aioredis.Redis.from_url(self.url), self._settings(name))
            self.tasks[name] = (asyncio.create_task(service.run(stop)), stop, service)
            return
        env = dict(os.environ)
        for var, (field, _) in ENV.items():
            env[var] = str(getattr(self._settings(name), field))
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", f"services.{kind}"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    async def start_all(self, generators: int = 1, coordinators: int = 1) -> None:
        for i in range(coordinators):
            await self.start("coordinator", f"coord-{i}")
        for i in range(generators):
            await self.start("generator", f"gen-{i}")
        await self.start("scorer", "scorer-0")

    def kill(self, name: str) -> None:
        """SIGKILL a process (no cleanup, no acks): what a crash looks like."""
        self.procs[name].send_signal(signal.SIGKILL)
        self.procs[name].wait()

    async def stop(self) -> None:
        for _task, stop, _ in self.tasks.values():
            stop.set()
        if self.tasks:
            await asyncio.gather(*(t for t, _, _ in self.tasks.values()))
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        await self.client.r.aclose()
        for log in self.logs:
            log.close()
        self.log_dir.cleanup()

    def service(self, name: str) -> Any:
        return self.tasks[name][2]
