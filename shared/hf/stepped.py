"""What the in-process engines share: a clock measured step by step, and prompts through the
tokenizer's chat template.

A step runs when the driver's time reaches the step's start, and what it finished is held
back until the driver's time reaches the step's end — as the simulator reports a step at its
end — so a driver that runs several engines in one loop never sees time go backwards. A
service calls `step` directly instead, against the wall clock.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

from spex.proto.messages import PRIMARY
from spex.shared.content.prompts import Template
from spex.shared.engine.api import Completion, EngineLoad, EngineRequest

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["SteppedEngine"]


class SteppedEngine(ABC):
    tokenizer: PreTrainedTokenizerBase

    def __init__(self) -> None:
        self.clock_s = 0.0  # end of the last step, on the engine's measured clock
        self._held: list[Completion] = []  # finished by the last step, released at its end

    @abstractmethod
    def submit(self, req: EngineRequest, now_s: float) -> None: ...

    @abstractmethod
    def abort(self, rid: str, now_s: float) -> list[Completion]: ...

    @abstractmethod
    def promote(self, rid: str, now_s: float, priority: int = PRIMARY) -> None: ...

    @abstractmethod
    def load(self) -> EngineLoad: ...

    @abstractmethod
    def count_tokens(self, text: str) -> int:
        """The model's token count of a text: synthetic prompts are sized by it."""

    @abstractmethod
    def drop_all(self) -> list[str]:
        """Forget every request (after a failed step); their ids."""

    @abstractmethod
    def ready_s(self) -> float | None:
        """When the next step can start (None: no work)."""

    @abstractmethod
    def step(self) -> list[Completion]:
        """Run one step at `clock_s`, advancing it by the step's measured duration."""

    @property
    def template(self) -> Template:
        """The model's prompts: through the tokenizer's chat template if it has one."""
        return Template(self.tokenizer)

    def next_event_s(self) -> float | None:
        return self.clock_s if self._held else self.ready_s()

    def advance_to(self, t_s: float) -> list[Completion]:
        if not self._held:
            start = self.ready_s()
            if start is None or start > t_s:
                return []
            self.clock_s = max(self.clock_s, start)
            self._held = self.step()  # stamped with the step's end, the new clock
            if not self._held:
                return []
        if self.clock_s > t_s:
            return []
        out, self._held = self._held, []
        return out
