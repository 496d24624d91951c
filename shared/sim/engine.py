"""A continuous-batching GPU engine in virtual time, modelled on SGLang; its steps cost what
`spex.shared.roofline.hardware` says.

Each step prefills (extends) admitted requests — uncached prompt tokens only, at most
`chunked_prefill_tokens` per step — and, with `mixed_chunk` (SGLang's --enable-mixed-chunk),
decodes one token for every running request in the same step; without it prefill takes
priority over decode. Admission is limited by KV capacity (the uncached prompt plus a
reservation for output, as SGLang's `new_token_ratio`), by `max_running` and by priority
(0 = primary before speculative ones, 1, 2, … most likely first; then arrival order). Every
admitted sequence decodes every step, as in SGLang 0.5 (`scheduling="sglang"`); with
`scheduling="paused"` speculative sequences decode only while the step stays within
`spec_step_slack` of what the primary ones alone cost, a per-step pausing no stock engine
does, kept for comparison. When decode runs out of KV, the lowest-priority, latest request is
retracted to the waiting queue and later resumes from the prefix cache. An aborted running request does
one more step, then frees its slot; the KV it computed stays as evictable cache. A profile
measured on a server (`roofline.measured`) adds its per-request cost to the first step that
prefills a request (once: not again after a retraction), and a block cache as vLLM's (hits in
whole blocks, shared within a step).

The engine is event-driven: between two external events the batch cannot change, so a run
of decode steps up to the next completion is planned at once (a "macro step") and cut short
at the first step boundary after a new arrival or abort. A step that starts at time `s` sees
every submission made at or before `s`. Planning a step and the KV it holds are
its `planning.StepPlanner`'s; this module takes requests, runs planned steps and commits them.
"""

from __future__ import annotations

from spex.proto.messages import PRIMARY
from spex.shared.engine.api import Completion, CompletionReason, EngineLoad, EngineRequest, EngineStats
from spex.shared.roofline.hardware import Profile
from spex.shared.sim.planning import Step, StepPlanner
from spex.shared.sim.requests import EngineConfig, SimRequest

__all__ = ["Completion", "EngineConfig", "EngineLoad", "EngineStats", "SimEngine", "SimRequest"]


class SimEngine:
    template = None  # it reads token counts only: no text, no tokenizer
    count_tokens = None

    def __init__(self, profile: Profile, config: EngineConfig | None = None) -> None:
        self.profile = profile
        self.config = config or EngineConfig()
        self.capacity_tokens = profile.kv_capacity_tokens
        self.stats = EngineStats()
        chunk_tokens = self.config.chunked_prefill_tokens or profile.chunked_prefill_tokens
        self.planner = StepPlanner(profile, self.config, self.capacity_tokens, chunk_tokens, self.stats)
        self.cache = self.planner.cache
        self.clock_s = 0.0  # end of the last committed step
        self._waiting = self.planner.waiting  # the planner's queues, which the engine fills and empties
        self._running = self.planner.running
        self._by_rid: dict[str, SimRequest] = {}
        self._current: Step | None = None
        self._seq = 0
        self.trace: list[tuple[float, float, int]] | None = None  # (start, end, batch) per decode run

    # ------------------------------------------------------------------ public surface
    @property
    def spec_step_slack(self) -> float:
        """`scheduling="paused"`: how far speculation may stretch a step (a governor moves it)."""
        return self.planner.spec_step_slack

    @spec_step_slack.setter
    def spec_step_slack(self, slack: float) -> None:
        self.planner.spec_step_slack = slack

    @property
    def used_tokens(self) -> int:
        return self.planner.used_tokens

    @property
    def held_tokens(self) -> int:
        """KV held by admitted requests (SGLang's `num_used`: evictable cache excluded)."""
        return self.planner.held_tokens

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def load(self) -> EngineLoad:
        """What a budget allocator needs: primary jobs and their context, speculative jobs,
        KV held (admitted and queued requests alike)."""
        reqs = [*self._running, *self._waiting]
        primary_ctx = [r.prompt_tokens + r.generated for r in reqs if r.priority == PRIMARY]
        running, waiting, held = len(self._running), len(self._waiting), self.held_tokens
        return EngineLoad.of(running, waiting, primary_ctx, held, self.capacity_tokens, self.stats)

    def is_waiting(self, rid: str) -> bool:
        """The request is queued for admission (not yet holding a slot)."""
        req = self._by_rid.get(rid)
        return req is not None and req in self._waiting

    def submit(self, request: EngineRequest, now_s: float) -> None:
        req = SimRequest.of(request)
        if req.rid in self._by_rid:
            raise ValueError(f"duplicate request id {req.rid!r}")
        reserve = int(req.max_new_tokens * self.config.new_token_ratio) if req.output_tokens else 0
        if req.prompt_tokens + reserve > self.capacity_tokens:
            raise ValueError(f"request {req.rid!r} needs more KV than the pool holds")
        self._seq += 1
        req.arrival_s, req.seq = now_s, self._seq
        self._by_rid[req.rid] = req
        if self._current is None and not self._running and not self._waiting:
            self.clock_s = max(self.clock_s, now_s)  # an idle engine starts at the arrival
        self._waiting.append(req)
        self._interrupt(now_s)

    def abort(self, rid: str, now_s: float) -> list[Completion]:
        """Abort `rid`; a waiting request ends at once, a running one after one more step."""
        req = self._by_rid.get(rid)
        if req is None or req.abort_requested:
            return []
        if req in self._waiting:
            self._waiting.remove(req)
            return [self._complete(req, now_s, "abort")]
        req.abort_s = now_s
        self._interrupt(now_s)
        return []

    def promote(self, rid: str, now_s: float, priority: int = PRIMARY) -> None:
        """Raise a request's priority; a waiting one is admitted sooner. (A running request
        keeps its slot either way; priority then only decides who is retracted first.)"""
        req = self._by_rid.get(rid)
        if req is not None and req.priority > priority:
            req.priority = priority
            if req in self._waiting:
                self._interrupt(now_s)

    def next_event_s(self) -> float | None:
        """End of the next planned step, or None when the engine has nothing to do."""
        if self._current is None:
            self._current = self.planner.plan(self.clock_s)
        return self._current.end_s if self._current else None

    def advance_to(self, t_s: float) -> list[Completion]:
        """Run every step that ends at or before `t_s`; return the requests they finished."""
        out: list[Completion] = []
        while True:
            if self._current is None:
                self._current = self.planner.plan(self.clock_s)
                if self._current is None:
                    self.clock_s = max(self.clock_s, t_s)
                    return out
            if self._current.end_s > t_s:
                return out
            out.extend(self._commit(self._current))

    # ------------------------------------------------------------------ a plan cut short
    def _interrupt(self, now_s: float) -> None:
        """Keep only the planned steps that started before `now_s`."""
        cur = self._current
        if cur is None:
            return
        starts = [cur.start_s, *cur.ends_s[:-1]]
        keep = sum(1 for s in starts if s < now_s)
        if keep == 0:
            self._current = None
        elif keep < len(cur.ends_s):
            del cur.ends_s[keep:], cur.flops[keep:], cur.alone[keep:]

    # ------------------------------------------------------------------ committing
    def _commit(self, step: Step) -> list[Completion]:
        self._current = None
        dur = step.end_s - step.start_s
        self.clock_s = step.end_s
        self.stats.busy_s += dur
        self.stats.flops += sum(step.flops)
        starts = [step.start_s, *step.ends_s[:-1]]
        for s, e, a in zip(starts, step.ends_s, step.alone, strict=True):
            if a > 0:
                self.stats.primary_steps += 1
                self.stats.primary_step_s += step.primaries * (e - s)
                self.stats.primary_alone_s += step.primaries * a
                prompts = min(step.spec_prompts_s, e - s - a)  # what the rest is: decode rows
                self.stats.primary_spec_prompt_s += step.primaries * max(0.0, prompts)
                self.stats.primary_spec_decode_s += step.primaries * max(0.0, e - s - a - prompts)
        out: list[Completion] = []
        if step.kind != "decode":
            self.stats.prefill_steps += 1
            for req in step.paying:
                req.request_paid = True
            for req, n in step.chunks:
                req.prefilled += n
                if self._abort_due(req, step):
                    out.append(self._finish(req, step.end_s, "abort"))
                elif req.prefilled < req.prefill_target:
                    continue
                elif req.output_tokens == 0:
                    out.append(self._finish(req, step.end_s, "finished"))
                else:
                    self.planner.ensure_free(1)
                    if req.first_token_s is None:
                        req.first_token_s = step.end_s
                    out.extend(self._grow(req, 1, step))  # extend emits a token
        if step.kind != "prefill":
            steps = len(step.ends_s)
            self.stats.decode_steps += steps
            self.stats.decode_s += dur
            self.stats.batch_time += dur * len(step.batch)
            self.stats.tokens_decoded += steps * len(step.batch)
            if self.trace is not None:
                self.trace.append((step.start_s, step.end_s, len(step.batch)))
            self.planner.ensure_free(steps * len(step.batch))
            for req in step.batch:
                out.extend(self._grow(req, steps, step))
        self.stats.peak_kv_tokens = max(self.stats.peak_kv_tokens, self.held_tokens)
        return out

    def _grow(self, req: SimRequest, tokens: int, step: Step) -> list[Completion]:
        req.generated += tokens
        self.planner.private += tokens
        if req.generated >= req.output_tokens:
            return [self._finish(req, step.end_s, "finished")]
        if self._abort_due(req, step):
            return [self._finish(req, step.end_s, "abort")]
        return []

    @staticmethod
    def _abort_due(req: SimRequest, step: Step) -> bool:
        """An abort takes effect after the first step that started once it had arrived: the
        step in flight finishes, the request runs one more step, then its slot is freed."""
        return req.abort_s is not None and step.start_s >= req.abort_s

    def _finish(self, req: SimRequest, now_s: float, reason: CompletionReason) -> Completion:
        self.planner.release(req, now_s)
        return self._complete(req, now_s, reason)

    def _complete(self, req: SimRequest, now_s: float, reason: CompletionReason) -> Completion:
        del self._by_rid[req.rid]
        return Completion(
            rid=req.rid,
            time_s=now_s,
            generated=req.generated,
            prompt_tokens=req.prompt_tokens,
            cached_tokens=req.cached_tokens,
            reason=reason,
            arrival_s=req.arrival_s,
            first_token_s=req.first_token_s,
            priority=req.priority,
        )

    def utilization(self, span_s: float) -> float:
        """Achieved FLOPs over the calibrated compute roofline, idle time included."""
        if span_s <= 0:
            return 0.0
        return self.stats.flops * self.profile.compute_s(1.0) / span_s

    def close(self) -> None:
        """Nothing is held outside this process."""
