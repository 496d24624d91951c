"""A real engine against the wall clock, for the services: its steps run in a worker thread
(torch releases the GIL), so the service's event loop keeps reading jobs, heartbeating and
reporting load while the model computes.

Only the worker thread touches the engine: submissions and aborts are queued and applied at
the next step boundary, and the load is a snapshot taken after each step. A request the
engine refuses, or a step that fails (say, out of memory), ends its requests with
`reason="error"` and the error's text in `Completion.text`: the service dead-letters those
jobs and goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from spex.shared.engine.api import Completion, EngineLoad, EngineRequest

__all__ = ["ThreadedEngine"]

log = logging.getLogger(__name__)


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
                try:
                    engine.submit(arg, engine.clock_s)
                except ValueError as exc:  # refused: this request's fault alone
                    out.append(_failed(arg.rid, engine.clock_s, str(exc)))
            else:
                out += engine.abort(arg, engine.clock_s)
        if engine.ready_s() is not None:
            try:
                out += engine.step()  # on the wall clock: what a step finished is reported at once
            except Exception as exc:  # noqa: BLE001 - the engine failed: fail its requests, not the service
                log.exception("engine_step_failed")
                out += [_failed(rid, engine.clock_s, repr(exc)) for rid in engine.drop_all()]
        self._load = engine.load()
        return out


def _failed(rid: str, now_s: float, error: str) -> Completion:
    return Completion(rid, now_s, 0, 0, 0, "error", now_s, None, 0, text=error)
