"""A simulated engine run against the wall clock, for the distributed runtime (a
`LiveEngine`, `spex.shared.engine.live`).

Virtual (GPU) time advances as `(monotonic() − start) / time_scale`: with time_scale 0.02 a
simulated second passes in 20 ms. The same step model as the virtual-time benchmark decides
when each request finishes. It reads token counts only (no template).
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from spex.proto.messages import PRIMARY
from spex.shared.content.prompts import Template
from spex.shared.engine.api import Completion, EngineLoad, EngineRequest
from spex.shared.engine.live import OnComplete
from spex.shared.sim.engine import SimEngine

__all__ = ["RealtimeEngine"]


class RealtimeEngine:
    def __init__(self, engine: SimEngine, time_scale: float) -> None:
        self.engine = engine
        self.time_scale = time_scale
        self._start = time.monotonic()
        self._wake = asyncio.Event()
        self.healthy = True  # the simulator is always reachable (tests set it to play an outage)

    @property
    def template(self) -> Template | None:
        return None

    @property
    def count_tokens(self) -> None:
        return None

    async def start(self) -> None:
        return None

    def now(self) -> float:
        """Virtual seconds since the engine started."""
        return (time.monotonic() - self._start) / self.time_scale

    def submit(self, request: EngineRequest) -> None:
        self.engine.submit(request, self.now())
        self._wake.set()

    def load(self) -> EngineLoad:
        return self.engine.load()

    def abort(self, rid: str) -> list[Completion]:
        done = self.engine.abort(rid, self.now())
        self._wake.set()
        return done

    def promote(self, rid: str, priority: int = PRIMARY) -> None:
        """A waiting request is admitted sooner; a running one is retracted later."""
        self.engine.promote(rid, self.now(), priority)
        self._wake.set()

    async def run(self, on_complete: OnComplete, stop: asyncio.Event) -> None:
        """Advance with the clock, reporting completions, until `stop` is set."""
        while not stop.is_set():
            for completion in self.engine.advance_to(self.now()):
                await on_complete(completion)
            nxt = self.engine.next_event_s()
            wait_s = 0.5 if nxt is None else max(0.0, (nxt - self.now()) * self.time_scale)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=min(wait_s, 0.5))
