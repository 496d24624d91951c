"""The simulated engine's configuration and its request state (the interface's types are in
`spex.shared.engine`)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from functools import cached_property

from spex.shared.engine.api import EngineRequest
from spex.shared.sim.radix import RadixNode, Segment

__all__ = ["SCHEDULINGS", "EngineConfig", "SimRequest"]

SCHEDULINGS = ("sglang", "paused")  # `EngineConfig.scheduling`


@dataclass(frozen=True)
class EngineConfig:
    max_running: int = 256  # --max-running-requests
    mixed_chunk: bool = True  # --enable-mixed-chunk: extend and decode share one step
    # "sglang": what SGLang 0.5's priority scheduling does — admission by priority, retraction
    # of the lowest priority under KV pressure, every admitted sequence decodes every step.
    # "paused": also pause speculative sequences step by step, decoding them (most likely
    # first) only while the step stays within (1 + spec_step_slack) of what the primary
    # sequences alone cost. No stock engine can do the latter; it is kept to compare.
    scheduling: str = "sglang"
    spec_step_slack: float = 0.10
    new_token_ratio: float = 0.3  # share of max_new_tokens reserved per running request
    chunked_prefill_tokens: int | None = None  # None: SGLang's automatic size for the GPU


@dataclass(eq=False)
class SimRequest(EngineRequest):
    """An engine request with the simulator's state of it."""

    arrival_s: float = 0.0
    seq: int = 0
    prefilled: int = 0  # prompt tokens computed or found cached since (re)admission
    prefill_target: int = 0  # prompt tokens to have before decoding (set at admission)
    generated: int = 0
    committed: int = 0  # generated tokens already held by a locked cache entry
    cached_tokens: int = 0
    first_token_s: float | None = None
    abort_s: float | None = None  # when an abort arrived
    path: list[RadixNode] = field(default_factory=list)  # locked cache entries
    request_paid: bool = False  # a step has charged its own cost (`Profile.request_s`)

    @property
    def abort_requested(self) -> bool:
        return self.abort_s is not None

    @cached_property
    def prompt_tokens(self) -> int:  # the prompt never changes
        return sum(t for _, t in self.prompt)

    def resume_prompt(self) -> tuple[Segment, ...]:
        """Prompt to (re)prefill: after a retraction, the tokens generated so far too."""
        if self.generated:
            return (*self.prompt, (self.output_segment, self.generated))
        return self.prompt

    @classmethod
    def of(cls, req: EngineRequest) -> SimRequest:
        if isinstance(req, SimRequest):
            return req
        if req.output_tokens < 0:
            raise ValueError(f"request {req.rid!r}: the simulator needs the number of tokens to generate")
        return cls(**{f.name: getattr(req, f.name) for f in fields(EngineRequest)})
