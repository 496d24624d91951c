"""The simulated engine's requests, completions, configuration, statistics and load."""

from __future__ import annotations

from dataclasses import dataclass, field

from spex.proto.messages import PRIMARY
from spex.shared.sim.radix import RadixNode, Segment

__all__ = ["Completion", "EngineConfig", "EngineLoad", "EngineStats", "SimRequest"]


@dataclass(frozen=True)
class EngineConfig:
    max_running: int = 256  # --max-running-requests
    mixed_chunk: bool = True  # --enable-mixed-chunk: extend and decode share one step
    # Speculative (priority 1) sequences decode only while the step stays within (1 + slack) of
    # what the primary sequences alone cost; the rest wait, holding their KV (priority
    # preemption). None: no limit.
    spec_step_slack: float | None = None
    new_token_ratio: float = 0.3  # share of max_new_tokens reserved per running request
    chunked_prefill_tokens: int | None = None  # None: SGLang's automatic size for the GPU


@dataclass(eq=False)
class SimRequest:
    rid: str
    prompt: tuple[Segment, ...]  # (segment id, tokens) from the root; the question first
    output_segment: str  # cache key of the generated tokens (the node's id)
    output_tokens: int  # tokens this request will generate; 0 = prefill only (scoring)
    max_new_tokens: int = 256
    priority: int = PRIMARY
    # --- engine state ---
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

    @property
    def abort_requested(self) -> bool:
        return self.abort_s is not None

    @property
    def prompt_tokens(self) -> int:
        return sum(t for _, t in self.prompt)

    def resume_prompt(self) -> tuple[Segment, ...]:
        """Prompt to (re)prefill: after a retraction, the tokens generated so far too."""
        if self.generated:
            return (*self.prompt, (self.output_segment, self.generated))
        return self.prompt


@dataclass(frozen=True)
class Completion:
    rid: str
    time_s: float
    generated: int
    prompt_tokens: int
    cached_tokens: int
    reason: str  # "finished" | "abort"
    arrival_s: float
    first_token_s: float | None
    priority: int

    @property
    def tpot_s(self) -> float | None:
        if self.first_token_s is None or self.generated < 2:
            return None
        return (self.time_s - self.first_token_s) / (self.generated - 1)


@dataclass
class EngineStats:
    busy_s: float = 0.0
    decode_s: float = 0.0
    batch_time: float = 0.0  # Σ batch · step time over decode steps
    flops: float = 0.0
    decode_steps: int = 0
    prefill_steps: int = 0
    tokens_decoded: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    peak_kv_tokens: int = 0  # most KV held by admitted requests at once
    retractions: int = 0
    evicted_tokens: int = 0

    @property
    def mean_batch(self) -> float:
        return self.batch_time / self.decode_s if self.decode_s else 0.0

    @property
    def cache_hit_rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


@dataclass(frozen=True)
class EngineLoad:
    """An engine's load at one instant (what a generator reports as its WorkerLoadEvent)."""

    primary: int  # primary requests admitted or queued
    primary_ctx: int  # their summed context tokens
    spec: int  # speculative requests admitted or queued
    running: int
    waiting: int
    kv_held: int  # KV tokens held by admitted requests (evictable cache excluded)
    kv_capacity: int
    prefix_cache_hit_rate: float
