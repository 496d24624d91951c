"""What a generation job writes, by its content (`GenerateRequest.content`): the engine
request's length and stop rules, and the text, finish reason and log-probabilities its result
carries. The generator is given one source per content kind (`SOURCES` unless a caller injects
others) and knows neither.

- `synthetic` — the synthetic workload's step, fixed before the engine runs (the engine decodes
  exactly its number of tokens: on the simulated GPU or a real engine, only the timing is the
  engine's), so results equal the virtual-time benchmark's;
- `real` — the model's own step, prompted with the question and the steps on the path, up to
  the step delimiter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from spex.proto import Content, FinishReason, GenerateRequest, LogprobSummary, Synthetic
from spex.shared.content.prompts import PromptStyle
from spex.shared.engine.api import UNTIL_STOP, Completion
from spex.shared.sim.workload import Generation, SyntheticWorkload, WorkloadKnobs

__all__ = ["SOURCES", "ModelSteps", "Step", "StepSource", "SyntheticSteps"]


@dataclass(frozen=True)
class Step:
    """A job's step as its source plans it."""

    tokens: int  # what the engine decodes: a count, or UNTIL_STOP
    stop: tuple[str, ...] = ()
    min_tokens: int = 0  # a stop string before this many tokens does not end the step
    written: Generation | None = None  # the text, fixed before the engine runs (synthetic)


class StepSource(Protocol):
    def plan(self, req: GenerateRequest) -> Step: ...

    def result(self, step: Step, c: Completion) -> tuple[str, FinishReason, LogprobSummary]:
        """The result's text, finish reason and log-probabilities, once the engine ran."""
        ...


class SyntheticSteps:
    def plan(self, req: GenerateRequest) -> Step:
        where = req.synthetic or Synthetic()  # a job without the extension: the defaults' world
        workload = SyntheticWorkload(WorkloadKnobs(), where.seed, where.style)
        path = [*req.prompt_node_ids[1:], req.node_id]
        written = workload.generate(workload.question(where.question or req.query_id), path)
        return Step(min(written.tokens, req.max_new_tokens), written=written)

    def result(self, step: Step, c: Completion) -> tuple[str, FinishReason, LogprobSummary]:
        w = step.written
        assert w is not None
        return (
            w.text,
            w.finish_reason,
            LogprobSummary(mean=w.mean_logprob, min=w.mean_logprob, count=c.generated),
        )


class ModelSteps:
    def plan(self, req: GenerateRequest) -> Step:
        stop = tuple(req.stop) or PromptStyle.of(req.split, req.prompt).stop_strings()
        return Step(UNTIL_STOP, stop, req.min_tokens)

    def result(self, step: Step, c: Completion) -> tuple[str, FinishReason, LogprobSummary]:
        logprobs = LogprobSummary(mean=c.logprob_mean, min=c.logprob_min, count=c.generated)
        return c.text.strip(), c.stop_reason or "stop", logprobs


SOURCES: dict[Content, StepSource] = {"synthetic": SyntheticSteps(), "real": ModelSteps()}
