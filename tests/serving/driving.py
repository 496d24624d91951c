"""Drive a ServingEngine as a generator does: `run()` as a task, completions collected as they
come, requests written the way the generator writes them."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from spex.proto.messages import PRIMARY
from spex.shared.engine.api import UNTIL_STOP, Completion, EngineRequest
from spex.shared.serving import ServingEngine

SPECULATIVE = PRIMARY + 1


@dataclass
class Driven:
    """What came back from an engine: completions by job id, in the order they came."""

    engine: ServingEngine
    done: dict[str, Completion] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    done_at: dict[str, float] = field(default_factory=dict)  # time.monotonic() of each

    async def on_complete(self, c: Completion) -> None:
        assert c.rid not in self.done, f"{c.rid} completed twice"
        self.done[c.rid] = c
        self.order.append(c.rid)
        self.done_at[c.rid] = time.monotonic()

    async def wait(self, *rids: str, timeout_s: float = 120.0) -> list[Completion]:
        """The completions of `rids`, once all have come (fails after `timeout_s`)."""
        deadline = time.monotonic() + timeout_s
        while not all(r in self.done for r in rids):
            missing = [r for r in rids if r not in self.done]
            assert time.monotonic() < deadline, f"no completion after {timeout_s} s for {missing[:5]}"
            await asyncio.sleep(0.01)
        return [self.done[r] for r in rids]

    async def until(self, predicate: Callable[[], object], timeout_s: float = 30.0, what: str = "") -> None:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
            await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def driving(engine: ServingEngine, start: bool = True) -> AsyncIterator[Driven]:
    """`engine` started (unless `start=False`) and running until the block ends."""
    if start:
        await engine.start(wait_s=30.0)
    driven = Driven(engine)
    stop = asyncio.Event()
    task = asyncio.create_task(engine.run(driven.on_complete, stop))
    try:
        yield driven
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=10.0)


def request(
    rid: str,
    text: str | tuple[str, ...],
    tokens: int = UNTIL_STOP,
    *,
    max_new_tokens: int = 64,
    priority: int = PRIMARY,
    seed: int = 0,
    temperature: float = 1.0,
    stop: tuple[str, ...] = (),
    prompt: tuple[tuple[str, int], ...] = (("q", 8),),
) -> EngineRequest:
    """A generation job: `tokens` exactly (synthetic content) or UNTIL_STOP (the model's own)."""
    pieces = (text,) if isinstance(text, str) else text
    return EngineRequest(
        rid, prompt, f"{rid}-out", tokens, max_new_tokens, priority, seed, temperature, stop, pieces
    )
