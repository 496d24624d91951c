"""One engine interface for every backend: the simulated GPU (`spex.shared.sim`), the
in-process PyTorch engine (`spex.shared.hf`), and the HTTP serving engines to come.

An engine runs on its own clock, in seconds. The simulator's clock is virtual; a real
engine's advances by the measured duration of each of its steps. A driver submits requests
and aborts at a time on that clock, asks when the engine's next event is (`next_event_s`),
and advances it (`advance_to`), which returns the requests that finished. The virtual-time
driver steps several engines this way in one discrete-event loop; a service runs one against
the wall clock through the `LiveEngine` interface (`spex.shared.engine.live`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Literal, Protocol, get_args

from spex.proto.messages import PRIMARY, WorkerLoadEvent
from spex.shared.content.prompts import Template
from spex.shared.core.commands import Segment

__all__ = [
    "ENGINES",
    "SERVERS",
    "UNTIL_STOP",
    "Completion",
    "CompletionReason",
    "Engine",
    "EngineFailed",
    "EngineLoad",
    "EngineName",
    "EngineRequest",
    "EngineStats",
    "ServerName",
    "StopReason",
]

# The engines a worker or a benchmark runs on: the simulated GPU, the in-process PyTorch engine,
# and the servers reached at a URL. Each driver builds them from one table keyed by the name.
ServerName = Literal["vllm", "sglang"]
EngineName = Literal["sim", "hf", ServerName]
ENGINES: tuple[EngineName, ...] = get_args(EngineName)  # the nested Literal comes flattened
SERVERS: tuple[ServerName, ...] = get_args(ServerName)

UNTIL_STOP = -1  # output_tokens of a real generation: until a stop string, EOS or the limit

# How a request ended: it ran to its end, it was aborted (asked for), or the engine refused or
# failed it (`Completion.text` then says why; the service dead-letters the job).
CompletionReason = Literal["finished", "abort", "error"]
# Why a real generation stopped: a stop string, EOS, the token limit; "" for the simulator.
StopReason = Literal["stop", "eos", "length", ""]


class EngineFailed(RuntimeError):
    """A real engine failed a request (a server's error or timeout, a server gone): a
    benchmark's run cannot go on, and running it again helps only once the engine is back."""


@dataclass(eq=False)
class EngineRequest:
    rid: str
    prompt: tuple[Segment, ...]  # (segment id, tokens) from the root; the question first
    output_segment: str  # cache key of the generated tokens (the node's id)
    # Tokens to generate: exactly this many (the simulator; a real engine in the synthetic
    # content mode), 0 = prefill only (scoring), UNTIL_STOP = as the model decides.
    output_tokens: int
    max_new_tokens: int = 256
    priority: int = PRIMARY
    seed: int = 0  # per-request sampling seed (real engines)
    temperature: float = 1.0
    stop: tuple[str, ...] = ()  # stop strings (real engines)
    text: tuple[str, ...] = ()  # real engines: the prompt's text, one piece per prompt segment
    min_tokens: int = 0  # real engines: a stop string met before this many tokens is passed over


@dataclass(frozen=True)
class Completion:
    rid: str
    time_s: float
    generated: int
    prompt_tokens: int
    cached_tokens: int
    reason: CompletionReason
    arrival_s: float
    first_token_s: float | None
    priority: int
    # --- real engines (the simulator leaves them empty)
    text: str = ""  # what was generated, a stop string and EOS excluded
    stop_reason: StopReason = ""
    logprob_mean: float = 0.0  # mean log-probability of the generated tokens
    logprob_min: float = 0.0
    reward: float | None = None  # a reward model's score (prefill-only requests)

    @property
    def tpot_s(self) -> float | None:
        """Time per output token after the first; a reply that was not streamed (a serving
        engine's: no first token's time) gives its whole time over its tokens."""
        if self.generated < 2:
            return None
        if self.first_token_s is None:
            return (self.time_s - self.arrival_s) / self.generated
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
    # Steps in which primary sequences decoded: how many, and Σ primaries × step time, measured
    # and as the same step would have taken without any speculative work in it (the TPOT
    # governor's measured vs. counterfactual, weighted per primary token).
    primary_steps: int = 0
    primary_step_s: float = 0.0
    primary_alone_s: float = 0.0
    # Of primary_step_s − primary_alone_s, what the speculative decode rows and the speculative
    # prompt rows in those steps cost (Σ primaries × cost; engines that can tell, else 0).
    primary_spec_decode_s: float = 0.0
    primary_spec_prompt_s: float = 0.0
    startup_s: float = 0.0  # start-up work met during steps (CUDA graph captures), left out of the clock

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
    prompt_tokens: int = 0  # prompt tokens looked up in the prefix cache so far (cumulative)
    cached_tokens: int = 0  # of those, found there
    # Cumulative, for the TPOT governor (EngineStats): primary decode steps (or tokens), and
    # Σ primaries × step time measured and without the speculative work.
    primary_steps: int = 0
    primary_step_s: float = 0.0
    primary_alone_s: float = 0.0

    @classmethod
    def of(
        cls, running: int, waiting: int, primary_ctx: Sequence[int], kv_held: int, kv_capacity: int,
        stats: EngineStats,
    ) -> EngineLoad:  # fmt: skip
        """The load of an engine that counts its own: `running` and `waiting` requests,
        `primary_ctx` the context of each primary one among them, its counters in `stats`."""
        return cls(
            primary=len(primary_ctx),
            primary_ctx=sum(primary_ctx),
            spec=running + waiting - len(primary_ctx),
            running=running,
            waiting=waiting,
            kv_held=kv_held,
            kv_capacity=kv_capacity,
            prefix_cache_hit_rate=stats.cache_hit_rate,
            prompt_tokens=stats.prompt_tokens,
            cached_tokens=stats.cached_tokens,
            primary_steps=stats.primary_steps,
            primary_step_s=stats.primary_step_s,
            primary_alone_s=stats.primary_alone_s,
        )

    def event(
        self, msg_id: str, worker: str, jobs_done: int, jobs: int, slots: int, queries: int
    ) -> WorkerLoadEvent:
        """This load as worker `worker` reports it (every field of ours is one of the event's),
        with what the worker holds: `jobs` of `slots`, of `queries` distinct queries."""
        return WorkerLoadEvent(
            msg_id=msg_id, query_id="", worker=worker, jobs_done=jobs_done, jobs=jobs, slots=slots,
            queries=queries, **asdict(self),
        )  # fmt: skip


class Engine(Protocol):
    """What a driver needs of an engine."""

    stats: EngineStats
    capacity_tokens: int
    trace: list[tuple[float, float, int]] | None  # (start, end, batch) per decode run, if kept

    def submit(self, req: EngineRequest, now_s: float) -> None: ...

    def abort(self, rid: str, now_s: float) -> list[Completion]:
        """Abort `rid`: a waiting request ends at once (returned), a running one at its next
        step boundary (reported by `advance_to`)."""
        ...

    def promote(self, rid: str, now_s: float, priority: int = PRIMARY) -> None: ...

    def next_event_s(self) -> float | None:
        """When the engine's next event happens on its clock; None when it has no work."""
        ...

    def advance_to(self, t_s: float) -> list[Completion]:
        """Run the engine up to `t_s`; the requests that finished."""
        ...

    def is_waiting(self, rid: str) -> bool: ...

    def load(self) -> EngineLoad: ...

    @property
    def held_tokens(self) -> int: ...

    @property
    def waiting(self) -> int:
        """Requests queued for admission (not yet holding a slot)."""
        ...

    def utilization(self, span_s: float) -> float: ...

    # --- what a driver's content needs of an engine that reads text
    @property
    def template(self) -> Template | None:
        """The prompt template of an engine that reads text (a model), or None for one that
        reads token counts only (the simulator)."""
        ...

    @property
    def count_tokens(self) -> Callable[[str], int] | None:
        """The engine's token count of a text, or None where it has no tokenizer (the
        simulator, an in-process reward model, a server without its model's)."""
        ...

    def close(self) -> None:
        """The run is over: let go of what the engine holds (a server's connections and
        thread, a model's KV); nothing for the simulator."""
        ...
