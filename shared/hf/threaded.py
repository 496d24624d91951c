"""A real engine against the wall clock, for the services: its steps run in a worker thread
(torch releases the GIL), so the service's event loop keeps reading jobs, heartbeating and
reporting load while the model computes.

Only the worker thread touches the engine: submissions and aborts are queued and applied at
the next step boundary, and the load is a snapshot taken after each step.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from spex.shared.engine.api import Completion, EngineLoad, EngineRequest

__all__ = ["ThreadedEngine"]


class ThreadedEngine:
    def __init__(self, engine: Any) -> None:
        self.engine = engine  # an HFEngine or a RewardEngine
        self._ops: list[tuple[str, Any]] = []
        self._lock = threading.Lock()
        self._wake = asyncio.Event()
        self._load: EngineLoad = engine.load()

    def submit(self, request: EngineRequest) -> None:
        self._queue("submit", request)

    def abort(self, rid: str) -> list[Completion]:
        self._queue("abort", rid)
        return []  # reported by `run` once the engine has dropped it

    def load(self) -> EngineLoad:
        return self._load

    @property
    def cache_hit_rate(self) -> float:
        return self._load.prefix_cache_hit_rate

    async def run(self, on_complete: Callable[[Completion], Awaitable[None]], stop: asyncio.Event) -> None:
        while not stop.is_set():
            if self._idle():
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=0.5)
                continue
            for completion in await asyncio.to_thread(self._step):
                await on_complete(completion)

    def _queue(self, op: str, arg: Any) -> None:
        with self._lock:
            self._ops.append((op, arg))
        self._wake.set()

    def _idle(self) -> bool:
        with self._lock:
            return not self._ops and self._load.running == 0 and self._load.waiting == 0

    def _step(self) -> list[Completion]:
        """In the worker thread: apply the queued operations, then run one engine step."""
        engine = self.engine
        with self._lock:
            ops, self._ops = self._ops, []
        out: list[Completion] = []
        for op, arg in ops:
            if op == "submit":
                engine.submit(arg, engine.clock_s)
            else:
                out += engine.abort(arg, engine.clock_s)
        nxt = engine.next_event_s()
        if nxt is not None:
            out += engine.advance_to(nxt)
        self._load = engine.load()
        return out
