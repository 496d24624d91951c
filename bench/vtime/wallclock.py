"""A live engine (a vLLM or SGLang server) on the bench loop's clock: the wall clock.

The bench loop (`loop.py`) steps its engines on their own clocks: the simulator's is virtual,
the in-process engine's advances by each step's measured duration. A server decodes whether
or not anyone steps it, so its clock can only be the wall clock. `WallClock` runs one asyncio
loop in a thread for every live engine of a run (the generator's server, a reward server) and
`WallEngine` puts one of them behind the `Engine` interface:

- `submit`, `abort` and `promote` are handed to that loop and return once it has them;
- `next_event_s` is "now" while the engine has requests out (None when it has none);
- `advance_to` returns what has finished, first waiting (at most `WAIT_S`) until some engine
  on the clock has finished something, so the loop sleeps instead of spinning while the server
  works.

What a server does not say is not made up: its step times, batch and busy time are read from
the running-requests gauge its `/metrics` gives (sampled as the loop turns), and a primary's
time per token is its whole time over its tokens (`Completion.tpot_s`: not streamed).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from spex.proto.messages import PRIMARY
from spex.shared.content.prompts import Template
from spex.shared.engine.api import Completion, EngineFailed, EngineLoad, EngineRequest, EngineStats
from spex.shared.roofline.measured import MeasuredProfile
from spex.shared.serving.engine import ServingEngine

__all__ = ["WallClock", "WallEngine"]

T = TypeVar("T")
WAIT_S = 0.5  # the longest `advance_to` waits for a completion before the loop turns again


class WallClock:
    """Seconds since the run began, and the thread the run's live engines talk to their
    servers from."""

    def __init__(self) -> None:
        self.epoch_s = time.monotonic()  # restarted at the run's first request (`begin`)
        self._begun = False
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="wall-clock", daemon=True)
        self._thread.start()
        self.finished = threading.Condition()  # notified when an engine has a completion
        self.engines: list[WallEngine] = []

    def now(self) -> float:
        return time.monotonic() - self.epoch_s

    def begin(self) -> None:
        """Time 0 is now: the run's first request, not the servers' start-up checks."""
        if not self._begun:
            self._begun = True
            self.epoch_s = time.monotonic()
            for engine in self.engines:
                engine.live.epoch_s = self.epoch_s

    def call(self, fn: Callable[..., T], *args: object) -> T:
        """`fn(*args)` on the clock's loop (the engines are not thread-safe); its exception is
        raised here."""

        async def run() -> T:
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result()

    def wait(self) -> None:
        with self.finished:
            self.finished.wait_for(lambda: any(e.has_finished() for e in self.engines), WAIT_S)

    def close(self) -> None:
        """Stop every engine on the clock (their calls still out are aborted), then the
        thread; a second call does nothing."""
        if self.loop.is_closed():
            return
        for engine in self.engines:
            engine.stop()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=30)
        self.loop.close()


class WallEngine:
    """A `ServingEngine` as the bench loop's `Engine`, on `clock`."""

    def __init__(self, live: ServingEngine, clock: WallClock, start_timeout_s: float) -> None:
        self.live, self.clock = live, clock
        live.epoch_s = clock.epoch_s  # its completions' times on the run's clock
        if hasattr(live.backend, "cache_salt"):  # vLLM: no prefix cached by an earlier run
            live.backend.cache_salt = f"spex-run-{os.urandom(12).hex()}"
        self.stats = EngineStats()
        self.trace: list[tuple[float, float, int]] | None = None  # a server's steps are not seen
        self.capacity_tokens = 0  # the server's KV, once its /metrics is read
        self._finished: list[Completion] = []
        self._out: set[str] = set()  # submitted, not yet finished
        self._sampled_s = 0.0  # when `stats` last took the server's running gauge
        try:
            asyncio.run_coroutine_threadsafe(live.start(start_timeout_s), clock.loop).result()
        except BaseException:
            asyncio.run_coroutine_threadsafe(live.close(), clock.loop).result()
            raise
        self._stop = clock.call(asyncio.Event)
        self._runner = clock.call(self._start_runner)
        clock.engines.append(self)

    @property
    def template(self) -> Template:
        return self.live.template

    @property
    def count_tokens(self) -> Callable[[str], int] | None:
        return self.live.count_tokens

    @property
    def step_model(self) -> MeasuredProfile | None:
        """The server's measured step curve: the governor's counterfactual (`ServingEngine`)."""
        return self.live.step_model

    @step_model.setter
    def step_model(self, model: MeasuredProfile | None) -> None:
        self.clock.call(setattr, self.live, "step_model", model)

    @property
    def server_info(self) -> dict[str, object]:
        """What the server says of itself (version, model, flags), for the results file."""
        return dict(self.live.backend.server_info)

    def _start_runner(self) -> asyncio.Task[None]:  # on the clock's loop
        return asyncio.get_running_loop().create_task(self.live.run(self._on, self._stop))

    async def _on(self, completion: Completion) -> None:  # on the clock's loop
        with self.clock.finished:
            self._finished.append(completion)
            self.clock.finished.notify_all()

    def has_finished(self) -> bool:
        return bool(self._finished)

    # ------------------------------------------------------------------ Engine
    def submit(self, req: EngineRequest, now_s: float) -> None:
        self.clock.begin()
        self.clock.call(self.live.submit, req)
        self._out.add(req.rid)

    def abort(self, rid: str, now_s: float) -> list[Completion]:
        done = self.clock.call(self.live.abort, rid)
        for c in done:
            self._account(c)
        return done

    def promote(self, rid: str, now_s: float, priority: int = PRIMARY) -> None:
        self.clock.call(self.live.promote, rid, priority)

    def next_event_s(self) -> float | None:
        return self.clock.now() if self._out or self._finished else None

    def advance_to(self, t_s: float) -> list[Completion]:
        if self._runner.done():  # its task ended by itself: nothing more will come
            raise EngineFailed(f"{self.live.backend.name} at {self.live.url}: stopped reporting")
        if self.clock.engines[0] is self:  # the loop advances every engine each turn: wait once
            self.clock.wait()
        with self.clock.finished:
            done, self._finished = self._finished, []
        for c in done:
            self._account(c)
        self._sample()
        return done

    def is_waiting(self, rid: str) -> bool:
        return False  # a server's queue is its own: whether one request is in it is not known

    def load(self) -> EngineLoad:
        return self.clock.call(self.live.load)

    @property
    def held_tokens(self) -> int:
        return self.load().kv_held

    @property
    def waiting(self) -> int:
        return self.live.server.waiting

    def utilization(self, span_s: float) -> float:
        return self.stats.busy_s / span_s if span_s else 0.0

    def close(self) -> None:
        """The run is over: the clock and every engine on it stop."""
        self.clock.close()

    def stop(self) -> None:
        self.clock.call(self._stop.set)
        asyncio.run_coroutine_threadsafe(asyncio.wait({self._runner}, timeout=30), self.clock.loop).result()

    # ------------------------------------------------------------------ what is measured
    def _account(self, c: Completion) -> None:
        self._out.discard(c.rid)
        s = self.stats
        s.tokens_decoded += c.generated
        s.prompt_tokens += c.prompt_tokens
        s.cached_tokens += c.cached_tokens

    def _sample(self) -> None:
        """The server's running requests since the last sample (its /metrics, polled by the
        engine): the mean batch and the busy time; and the TPOT governor's counters."""
        now = self.clock.now()
        span, self._sampled_s = now - self._sampled_s, now
        load = self.load()
        s = self.stats
        if load.running:
            s.busy_s += span
            s.decode_s += span
            s.batch_time += load.running * span
        s.peak_kv_tokens = max(s.peak_kv_tokens, load.kv_held)
        self.capacity_tokens = load.kv_capacity
        s.primary_steps, s.primary_step_s, s.primary_alone_s = (
            load.primary_steps,
            load.primary_step_s,
            load.primary_alone_s,
        )
