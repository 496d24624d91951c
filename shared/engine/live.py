"""The engine a service runs against the wall clock: what the generator and the scorer need.

Three backends implement it: the simulated GPU in scaled real time (`spex.shared.sim.realtime`),
the in-process PyTorch engines with their steps in a worker thread (`spex.shared.hf.threaded`)
and the serving engines over HTTP (`spex.shared.serving.engine`). The virtual-clock `Engine`
of `api` is the other face of the first two: the bench loop steps it itself; a live engine
steps itself (`run`) and reports each completion as it happens.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol

from spex.proto.messages import PRIMARY
from spex.shared.content.prompts import Template
from spex.shared.engine.api import Completion, EngineLoad, EngineRequest

__all__ = ["LiveEngine", "OnComplete"]

OnComplete = Callable[[Completion], Awaitable[None]]


class LiveEngine(Protocol):
    """An engine against the wall clock. Only the service's event loop calls it."""

    @property
    def template(self) -> Template | None:
        """The prompt template of an engine that reads text (a model), or None for one that
        reads token counts only (the simulator): jobs then need no text."""
        ...

    @property
    def count_tokens(self) -> Callable[[str], int] | None:
        """The engine's token count of a text, or None where it has none (the simulator, a
        server without its model's tokenizer): synthetic prompts then go as they are, unsized."""
        ...

    @property
    def time_scale(self) -> float:
        """Wall seconds per second of the engine's clock (`Completion`'s times): the
        simulator's scale, 1.0 for a real engine."""
        ...

    @property
    def healthy(self) -> bool:
        """False while the engine cannot be reached (a serving engine's server is down): the
        worker takes no job and stops reporting itself alive."""
        ...

    async def start(self) -> None:
        """Before the first job: wait for the engine and check it can serve this
        configuration (raises a one-line error otherwise)."""
        ...

    def submit(self, request: EngineRequest) -> None:
        """Queue `request`; raises ValueError if the engine refuses it (the job's fault)."""
        ...

    def abort(self, rid: str) -> list[Completion]:
        """Stop `rid`: what ends at once is returned, the rest is reported by `run` with
        `reason="abort"`."""
        ...

    def promote(self, rid: str, priority: int = PRIMARY) -> None:
        """Raise `rid`'s priority, if the engine still can (what each backend can: its
        docstring). An unknown or finished `rid` is ignored."""
        ...

    def load(self) -> EngineLoad: ...

    async def run(self, on_complete: OnComplete, stop: asyncio.Event) -> None:
        """Step the engine, reporting every completion, until `stop` is set."""
        ...
