"""The simulated engine's plan of its next step: which waiting requests are admitted and how much
of each prompt is prefilled (at most `chunked_prefill_tokens` a step, uncached tokens only),
which sequences decode (`scheduling="paused"`: speculative ones only within `spec_step_slack`
of the primaries' step), how many decode steps run before anything can change (a "macro
step"), each step's duration, FLOPs and what it would have cost the primaries alone; and the
KV this takes — admission reserves output as SGLang's `new_token_ratio`, a decode that runs
out of KV retracts the lowest-priority, latest request.

`engine.SimEngine` owns one `StepPlanner`, as vLLM's engine core owns its scheduler: the planner
owns the queues (waiting, running) and the KV they hold; the engine submits, runs planned steps
and commits them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from spex.proto.messages import PRIMARY
from spex.shared.engine.api import EngineStats
from spex.shared.roofline.capacity import spare_concurrency
from spex.shared.roofline.hardware import Profile
from spex.shared.sim.radix import RadixCache
from spex.shared.sim.requests import EngineConfig, SimRequest

__all__ = ["Step", "StepPlanner"]


@dataclass
class Step:
    """A step the engine planned: a prefill, a run of decode steps, or both in one (mixed)."""

    kind: str  # "prefill" | "decode" | "mixed" (both in one step)
    start_s: float
    ends_s: list[float]  # end of each planned step (decode runs several)
    flops: list[float]
    batch: list[SimRequest]
    chunks: list[tuple[SimRequest, int]] = field(default_factory=list)  # prefill: (req, new tokens)
    # Per planned step: its duration with the speculative work left out (0: no primary decodes).
    alone: list[float] = field(default_factory=list)
    primaries: int = 0  # primary sequences decoding in it
    # Requests whose cost of their own (`Profile.request_s`) it pays: the first step that
    # prefills them (a step planned again after an interruption pays what the first did not).
    paying: list[SimRequest] = field(default_factory=list)
    spec_prompts_s: float = 0.0  # of a mixed step's duration, what its speculative chunks add

    @property
    def end_s(self) -> float:
        return self.ends_s[-1]


class StepPlanner:
    """Planning the next step, and the KV it holds: `capacity_tokens` in all, at most
    `chunk_tokens` of prompt a step; `stats` are the engine's counters."""

    def __init__(
        self,
        profile: Profile,
        config: EngineConfig,
        capacity_tokens: int,
        chunk_tokens: int,
        stats: EngineStats,
    ) -> None:
        self.profile, self.config, self.stats = profile, config, stats
        self.capacity_tokens, self.chunk_tokens = capacity_tokens, chunk_tokens
        self.spec_step_slack = config.spec_step_slack  # "paused": a governor may move it
        self.cache = RadixCache()
        self.waiting: list[SimRequest] = []
        self.running: list[SimRequest] = []  # admitted: prefilling or decoding
        self.private = 0  # Σ generated − committed over running requests (KV not in the cache yet)

    # ------------------------------------------------------------------ KV
    @property
    def used_tokens(self) -> int:
        return self.cache.total_tokens + self.private

    @property
    def held_tokens(self) -> int:
        """KV held by admitted requests (SGLang's `num_used`: evictable cache excluded)."""
        return self.used_tokens - self.cache.evictable_tokens

    # ------------------------------------------------------------------ planning
    def plan(self, start_s: float) -> Step | None:
        prefill = self._plan_prefill(start_s)
        if prefill is None:
            return self._plan_decode(start_s)
        decoding = self._decode_batch() if self.config.mixed_chunk else []
        if not decoding or self._free_tokens() < len(decoding):
            return prefill
        ctx = sum(r.prompt_tokens + r.generated for r in decoding)
        work = [(n, r.prefilled) for r, n in prefill.chunks]
        paying, request_s = prefill.paying, self.profile.request_s
        dur = self.profile.mixed_step_s(len(decoding), ctx, work) + request_s * len(paying)
        flops = self.profile.prefill_flops(work) + self.profile.decode_flops(len(decoding), ctx)
        bp, ctx_p = self._primary(decoding)
        work_p = [(n, r.prefilled) for r, n in prefill.chunks if r.priority == PRIMARY]
        alone = 0.0
        if bp:
            mine = sum(r.priority == PRIMARY for r in paying)
            alone = self.profile.mixed_step_s(bp, ctx_p, work_p) + request_s * mine
        theirs = sum(r.priority != PRIMARY for r in paying)
        without = self.profile.mixed_step_s(len(decoding), ctx, work_p) + request_s * (len(paying) - theirs)
        chunks = prefill.chunks
        step = Step("mixed", start_s, [start_s + dur], [flops], decoding, chunks, [alone], bp, paying)
        step.spec_prompts_s = max(0.0, dur - without)
        return step

    @staticmethod
    def _primary(batch: list[SimRequest]) -> tuple[int, int]:
        """Primary sequences in `batch` (promoted speculative ones included) and their context:
        the step the TPOT governor holds the measured one against is theirs alone."""
        mine = [r.prompt_tokens + r.generated for r in batch if r.priority == PRIMARY]
        return len(mine), sum(mine)

    def _reserved_tokens(self) -> int:
        ratio = self.config.new_token_ratio
        return sum(
            max(0, int(r.max_new_tokens * ratio) - r.generated) for r in self.running if r.output_tokens
        )

    def _plan_prefill(self, start_s: float) -> Step | None:
        chunks: list[tuple[SimRequest, int]] = []
        budget = self.chunk_tokens
        # A request admitted in an earlier step whose prompt is not yet computed goes first.
        for req in self.running:
            remaining = req.prefill_target - req.prefilled
            if remaining > 0 and budget > 0:
                n = min(remaining, budget)
                chunks.append((req, n))
                budget -= n
        # A block cache (vLLM's) hits in whole blocks and hashes a request's blocks as it
        # allocates them: requests admitted in the same step share them. A radix cache
        # (SGLang's) takes a prompt once it is computed: they each compute it.
        block = self.profile.cache_block_tokens
        deferred: list[SimRequest] = []  # admitted once the step's admission is decided (radix)
        waiting = sorted(self.waiting, key=lambda r: (r.priority, r.seq)) if self.waiting else []
        if waiting:
            free = self.capacity_tokens - self.used_tokens
            avail = free + self.cache.evictable_tokens - self._reserved_tokens()
        for req in waiting:
            if budget <= 0 or len(self.running) + len(deferred) >= self.config.max_running:
                break
            prompt = req.resume_prompt()
            matched, hit = self.cache.match(prompt, start_s)
            need = self.cache.new_tokens(prompt)
            # Admitting locks the matched prefix, which then no longer counts as evictable.
            need += sum(n.tokens for n in hit if n.ref == 0)
            reserve = int(req.max_new_tokens * self.config.new_token_ratio) if req.output_tokens else 0
            if need + reserve > avail:
                break  # strict order: a large head request is not overtaken
            avail -= need + reserve
            total = sum(t for _, t in prompt)
            matched = min(matched, total - 1) if total else 0  # SGLang matches at most len-1
            matched -= matched % block
            req.cached_tokens += matched
            req.prefilled, req.prefill_target = matched, total
            self.stats.prompt_tokens += total
            self.stats.cached_tokens += matched
            n = min(total - matched, budget)
            budget -= n
            chunks.append((req, n))
            if block > 1:
                self.waiting.remove(req)
                self._admit(req, start_s)
            else:
                deferred.append(req)
        if not chunks:
            return None
        for req in deferred:
            self.waiting.remove(req)
            self._admit(req, start_s)
        work = [(n, r.prefilled) for r, n in chunks]
        batch = [r for r, _ in chunks]
        paying = [r for r in batch if not r.request_paid]
        dur = self.profile.prefill_step_s(work) + self.profile.request_s * len(paying)
        flops = self.profile.prefill_flops(work)
        return Step("prefill", start_s, [start_s + dur], [flops], batch, chunks, [0.0], paying=paying)

    def _admit(self, req: SimRequest, now_s: float) -> None:
        prompt = req.resume_prompt()
        _, hit = self.cache.match(prompt, now_s)
        self.cache.lock(hit)  # keep the matched prefix from being evicted to make room
        self.ensure_free(self.cache.new_tokens(prompt))
        req.path = self.cache.insert(prompt, now_s)
        self.cache.lock(req.path)
        self.cache.unlock(hit, now_s)
        req.committed = req.generated  # resumed after a retraction: those tokens are cached
        self.running.append(req)

    def _plan_decode(self, start_s: float) -> Step | None:
        batch = self._decode_batch()
        if not batch:
            return None
        # KV for one token per sequence per step; retract when even one step does not fit.
        while batch and self._free_tokens() < len(batch):
            self._retract(batch, start_s)
        if not batch:
            return None
        if any(r.abort_requested for r in batch):
            steps = 1
        else:
            steps = min(r.output_tokens - r.generated for r in batch)
        steps = max(1, min(steps, self._free_tokens() // len(batch)))
        ctx0 = sum(r.prompt_tokens + r.generated for r in batch)
        bp, ctx_p0 = self._primary(batch)
        b, p = len(batch), self.profile
        ends, flops, alone, t = [], [], [], start_s
        for j in range(steps):
            ctx = ctx0 + j * b
            t += p.decode_step_s(b, ctx)
            ends.append(t)
            flops.append(p.decode_flops(b, ctx))
            alone.append(p.decode_step_s(bp, ctx_p0 + j * bp) if bp else 0.0)
        return Step("decode", start_s, ends, flops, batch, alone=alone, primaries=bp)

    def _decode_batch(self) -> list[SimRequest]:
        """Sequences that decode in the next step: every primary one, and speculative ones
        while the roofline allows (an aborted one always gets its last step)."""
        batch = [r for r in self.running if self._decoding(r)]
        if self.config.scheduling != "paused":
            return batch
        slack = self.spec_step_slack
        primary = [r for r in batch if r.priority == PRIMARY]
        spec = [r for r in batch if r.priority != PRIMARY]
        if not spec:
            return batch
        ctx = sum(r.prompt_tokens + r.generated for r in primary)
        spec_ctx = sum(r.prompt_tokens + r.generated for r in spec) / len(spec)
        room = spare_concurrency(self.profile, len(primary), ctx, spec_ctx, slack)
        chosen = sorted(spec, key=lambda r: (not r.abort_requested, r.priority, r.seq))[: max(room, 0)]
        chosen += [r for r in spec if r.abort_requested and r not in chosen]
        keep = set(map(id, primary + chosen))
        return [r for r in batch if id(r) in keep]

    def _decoding(self, req: SimRequest) -> bool:
        return req.output_tokens > 0 and req.prefilled >= req.prefill_target

    def _free_tokens(self) -> int:
        return self.capacity_tokens - self.used_tokens + self.cache.evictable_tokens

    def ensure_free(self, tokens: int) -> None:
        short = tokens - (self.capacity_tokens - self.used_tokens)
        if short > 0:
            self.stats.evicted_tokens += self.cache.evict(short)

    def _retract(self, batch: list[SimRequest], now_s: float) -> None:
        victim = max(batch, key=lambda r: (r.priority, r.seq))
        batch.remove(victim)
        self.release(victim, now_s)
        victim.prefilled = victim.prefill_target = 0
        self.waiting.append(victim)
        self.stats.retractions += 1

    def release(self, req: SimRequest, now_s: float) -> None:
        """Free a request's slot; the KV it computed stays in the cache, unlocked."""
        self.running.remove(req)
        self.private -= req.generated - req.committed
        if req.generated > req.committed:
            # The private output tokens move into the cache: used_tokens stays the same.
            self.cache.insert((*req.prompt, (req.output_segment, req.generated)), now_s)
            req.committed = req.generated
        self.cache.unlock(req.path, now_s)
        req.path = []
