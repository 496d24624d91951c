"""A real engine against the wall clock, for the services (a `LiveEngine`,
`spex.shared.engine.live`): its steps run in a worker thread (torch releases the GIL), so the
service's event loop keeps reading jobs, heartbeating and reporting load while the model
computes.

Only the worker thread touches the engine: submissions, aborts and promotions are queued and
applied at the next step boundary, and the load is a snapshot taken after each step. A request the
engine refuses, or a step that fails (say, out of memory), ends its requests with
`reason="error"` and the error's text in `Completion.text`: the service dead-letters those
jobs and goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Literal

from spex.proto.messages import PRIMARY
from spex.shared.content.prompts import Template
from spex.shared.engine.api import Completion, EngineLoad, EngineRequest
from spex.shared.engine.live import OnComplete
from spex.shared.hf.stepped import SteppedEngine

__all__ = ["ThreadedEngine"]

log = logging.getLogger(__name__)


_Op = (
    tuple[Literal["submit"], EngineRequest]
    | tuple[Literal["abort"], str]
    | tuple[Literal["promote"], tuple[str, int]]
)


class ThreadedEngine:
    time_scale = 1.0  # its clock is the wall clock

    def __init__(self, engine: SteppedEngine) -> None:
        self.engine = engine  # an HFEngine or a RewardEngine
        self._ops: list[_Op] = []
        self._lock = threading.Lock()
        self._wake = asyncio.Event()
        self._load: EngineLoad = engine.load()

    @property
    def template(self) -> Template | None:
        return self.engine.template

    @property
    def count_tokens(self) -> Callable[[str], int] | None:
        return self.engine.count_tokens  # the tokenizer's: read-only, safe beside the worker thread

    @property
    def healthy(self) -> bool:
        return True  # in process: a failed step fails its requests, not the engine

    async def start(self) -> None:
        return None

    def submit(self, request: EngineRequest) -> None:
        self._queue(("submit", request))

    def abort(self, rid: str) -> list[Completion]:
        self._queue(("abort", rid))
        return []  # reported by `run` once the engine has dropped it

    def promote(self, rid: str, priority: int = PRIMARY) -> None:
        """At the next step boundary: a waiting request is admitted sooner (the engine's
        `promote`)."""
        self._queue(("promote", (rid, priority)))

    def load(self) -> EngineLoad:
        return self._load

    async def run(self, on_complete: OnComplete, stop: asyncio.Event) -> None:
        while not stop.is_set():
            if self._idle():
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=0.5)
                continue
            for completion in await asyncio.to_thread(self._step):
                await on_complete(completion)

    def _queue(self, op: _Op) -> None:
        with self._lock:
            self._ops.append(op)
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
        for op in ops:
            if op[0] == "submit":
                try:
                    engine.submit(op[1], engine.clock_s)
                except ValueError as exc:  # refused: this request's fault alone
                    out.append(_failed(op[1].rid, engine.clock_s, str(exc)))
            elif op[0] == "abort":
                out += engine.abort(op[1], engine.clock_s)
            else:
                rid, priority = op[1]
                engine.promote(rid, engine.clock_s, priority)
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
