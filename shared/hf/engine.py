"""The in-process PyTorch engine: a transformers causal LM with continuous batching.

Each `step` (1) drops aborted sequences, (2) admits waiting requests — primary before
speculative, then arrival order; when the batch is full a waiting primary pauses the newest
running speculative sequence, which keeps its KV and resumes later — placing each prompt in
the prefix cache (`kvcache`): the pieces found there are referenced, the rest become new
entries to compute; (3) samples a token for every sequence with logits (all in one batch on
the model's device, each from its request's own seed, so a request's tokens do not depend on
its batch mates: `sampling`) and checks EOS, the stop strings and the token limit; and (4) runs the model
once (`llama`): one row for each continuing sequence's newest token, plus prompt rows — the
pieces admitted sequences still need, primaries' first, up to `prefill_tokens` a pass (a
longer piece goes on in the next pass). A piece is computed once whoever needs it, and every
sequence attends to it where it lies: prompt KV is never copied. Placing prompts and planning
the pass are its `passes.PromptPlanner`'s; this module admits, samples, finishes and keeps time.

Deterministic mode makes every number a sequence sees a function of its own tokens (`llama`:
by construction with the C kernels; on torch, each pass padded to the row count from which
the GEMM is batch-invariant and each run attending alone). Outputs are then batch-invariant
and speculation is lossless on a real model.

The engine's clock advances by the measured wall time of each step (`stepped`), so the
virtual-time driver can run it beside other engines as if each had its own device. Capturing
a CUDA graph is a server's start-up work, not a step's: its time is left out of the clock
(`EngineStats.startup_s` counts it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from spex.proto.messages import PRIMARY
from spex.shared.engine.api import (
    Completion,
    CompletionReason,
    EngineLoad,
    EngineRequest,
    EngineStats,
)
from spex.shared.hf.attention import KV, Pass
from spex.shared.hf.kvcache import PrefixCache
from spex.shared.hf.llama import LlamaRunner
from spex.shared.hf.models import eos_ids, load_lm, load_tokenizer
from spex.shared.hf.paged import PAGE
from spex.shared.hf.passes import PromptPlanner
from spex.shared.hf.sampling import sample
from spex.shared.hf.sequence import Sequence
from spex.shared.hf.stepped import SteppedEngine
from spex.shared.hf.tpot import PassRows, PrimaryAccount
from spex.shared.roofline.measured import MeasuredProfile

__all__ = ["HFConfig", "HFEngine"]


@dataclass(frozen=True)
class HFConfig:
    max_running: int = 16  # sequences decoded together
    kv_capacity_tokens: int = 65_536  # prefix cache and running sequences together
    deterministic: bool = False  # batch-invariant outputs (lossless speculation)
    device: str = "cpu"
    dtype: str | None = None  # the weights' and KV's: float32, bfloat16 (None: as saved; bf16 on a GPU)
    prefill_tokens: int = 128  # prompt rows a pass takes beside its decode rows
    cuda_graphs: bool = True  # on CUDA: decode passes replayed from graphs (`graphs`)


class HFEngine(SteppedEngine):
    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        config: HFConfig | None = None,
        runner: LlamaRunner | None = None,
    ) -> None:
        """`runner`: a forward pass already built for this model and config, its KV pool all
        free (one a closed engine used: its weights fused, its CUDA graphs captured)."""
        super().__init__()
        self.model = model
        self.tokenizer = tokenizer
        self.config = config or HFConfig()
        self.capacity_tokens = self.config.kv_capacity_tokens
        self.cache = PrefixCache()
        self.stats = EngineStats()
        self.trace: list[tuple[float, float, int]] | None = None
        self._waiting: list[Sequence] = []
        self._running: list[Sequence] = []
        self._by_rid: dict[str, Sequence] = {}
        self._seq = 0
        self._eos = eos_ids(model, tokenizer)
        if self.config.prefill_tokens < 1:
            raise ValueError(f"prefill_tokens: at least 1, not {self.config.prefill_tokens}")
        self.runner = runner or LlamaRunner(
            model,
            self.config.deterministic,
            max_rows=self.config.max_running + self.config.prefill_tokens,
            max_logits=2 * self.config.max_running,
            kv_tokens=self.config.kv_capacity_tokens + 2 * self.config.max_running * PAGE,
            cuda_graphs=self.config.cuda_graphs,
        )
        if self.runner.pool is not None and self.runner.pool.free_pages < self.runner.pool.pages - 1:
            raise ValueError("runner: its KV pool still holds another engine's sequences (close that engine)")
        self.prompts = PromptPlanner(
            tokenizer, self.cache, self.runner, self.config.prefill_tokens, self.config.max_running
        )
        self.primary = PrimaryAccount()  # the primaries' steps, for the TPOT governor

    @property
    def step_model(self) -> MeasuredProfile | None:
        """A measured step-time curve (`roofline.measured`): with it each primary decode step
        is also counted as it would have taken without speculation (`tpot.PrimaryAccount`)."""
        return self.primary.curve

    @step_model.setter
    def step_model(self, curve: MeasuredProfile | None) -> None:
        self.primary.curve = curve

    @classmethod
    def from_dir(cls, path: str | Path, config: HFConfig | None = None) -> HFEngine:
        config = config or HFConfig()
        return cls(load_lm(path, config.device, config.dtype), load_tokenizer(path), config)

    def count_tokens(self, text: str) -> int:
        return len(self.prompts.ids(text))

    # ------------------------------------------------------------------ the interface
    def submit(self, req: EngineRequest, now_s: float) -> None:
        if req.rid in self._by_rid:
            raise ValueError(f"duplicate request id {req.rid!r}")
        if not req.text or req.output_tokens == 0:
            raise ValueError(f"request {req.rid!r}: a generation needs its prompt text and tokens to make")
        pieces = [ids for ids in map(self.prompts.ids, req.text) if ids]
        if not pieces:
            raise ValueError(f"request {req.rid!r}: an empty prompt")
        if not self._running and not self._waiting:
            self.clock_s = max(self.clock_s, now_s)  # an idle engine starts at the arrival
        self._seq += 1
        s = Sequence(req, self._seq, now_s, pieces)
        self._by_rid[req.rid] = s
        self._waiting.append(s)

    def abort(self, rid: str, now_s: float) -> list[Completion]:
        s = self._by_rid.get(rid)
        if s is None or s.abort_s is not None:
            return []
        s.abort_s = now_s
        if s in self._waiting:
            self._waiting.remove(s)
            return [self._finish(s, max(now_s, s.arrival_s), "abort")]
        return []  # a running sequence leaves at the next step boundary

    def promote(self, rid: str, now_s: float, priority: int = PRIMARY) -> None:
        s = self._by_rid.get(rid)
        if s is not None and s.req.priority > priority:
            s.req.priority = priority

    def ready_s(self) -> float | None:
        if self._running or any(s.arrival_s <= self.clock_s for s in self._waiting):
            return self.clock_s
        return min((s.arrival_s for s in self._waiting), default=None)

    def drop_all(self) -> list[str]:
        """Forget every request (after a failed step); their ids."""
        rids = list(self._by_rid)
        for s in list(self._by_rid.values()):
            if s.entries:
                self.cache.unlock(s.entries)
            if s.own is not None:
                s.own.release()
        self.prompts.drop_pending()
        self._by_rid.clear()
        self._running.clear()
        self._waiting.clear()
        self._held = []
        return rids

    def close(self) -> None:
        """Forget every request and every cached prompt: all KV goes back to the pool."""
        self.drop_all()
        self.cache.evict(self.cache.total_tokens)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def is_waiting(self, rid: str) -> bool:
        s = self._by_rid.get(rid)
        return s is not None and s in self._waiting

    def load(self) -> EngineLoad:
        seqs = [*self._running, *self._waiting]
        primary_ctx = [s.context for s in seqs if s.req.priority == PRIMARY]
        running, waiting, held = len(self._running), len(self._waiting), self.held_tokens
        return EngineLoad.of(running, waiting, primary_ctx, held, self.capacity_tokens, self.stats)

    @property
    def used_tokens(self) -> int:
        """KV in memory: the prefix cache (every prompt piece, shared) and each sequence's
        generated tokens."""
        return self.cache.total_tokens + sum(s.past_tokens for s in self._by_rid.values())

    @property
    def held_tokens(self) -> int:
        return self.used_tokens - self.cache.evictable_tokens

    def utilization(self, span_s: float) -> float:
        return 0.0  # no roofline model of this machine

    # ------------------------------------------------------------------ one step
    def step(self) -> list[Completion]:
        """One scheduler iteration; the engine's clock advances by its measured duration."""
        start, startup_s = time.perf_counter(), self.runner.startup_s
        aborted = [s for s in self._running if s.abort_s is not None and s.abort_s <= self.clock_s]
        done: list[tuple[Sequence, CompletionReason]] = [(s, "abort") for s in aborted]
        for s, _ in done:
            self._running.remove(s)
        self._admit()
        pass_s = 0.0
        with torch.inference_mode():
            decoding = [s for s in self._running if s.prefilled]
            continuing = self._sample(decoding)
            for s in decoding:
                if s not in continuing:
                    done.append((s, "finished"))
                    self._running.remove(s)
            batch, logits_of, primary_rows = self.prompts.plan(continuing, self._running)
            if batch.rows:
                t = time.perf_counter()
                logits = self.runner.forward(batch, [row for row, _ in logits_of])
                pass_s = time.perf_counter() - t
                self.prompts.absorb(logits, logits_of, self._running)
        startup_s = self.runner.startup_s - startup_s  # a graph captured in this step
        self.stats.startup_s += startup_s
        pass_s -= startup_s
        dt = time.perf_counter() - start - startup_s
        t0, self.clock_s = self.clock_s, self.clock_s + dt
        self._account(t0, dt, batch.rows > len(continuing), decoding)
        primaries = sum(1 for s in decoding if s.req.priority == PRIMARY)
        if batch.rows:
            self.primary.step(
                self.stats, dt, pass_s, primaries, len(decoding), _rows(batch, len(continuing), primary_rows)
            )
        for s in decoding:
            if s.first_token_s is None:
                s.first_token_s = self.clock_s
        return [self._finish(s, self.clock_s, reason) for s, reason in done]

    def _account(self, t0: float, dt: float, prefilled: bool, decoding: list[Sequence]) -> None:
        st = self.stats
        st.busy_s += dt
        if prefilled:
            st.prefill_steps += 1
        if decoding:
            st.decode_steps += 1
            st.decode_s += dt
            st.batch_time += dt * len(decoding)
            st.tokens_decoded += len(decoding)
            if self.trace is not None:
                self.trace.append((t0, t0 + dt, len(decoding)))
        st.peak_kv_tokens = max(st.peak_kv_tokens, self.held_tokens)

    def _admit(self) -> None:
        ready = sorted(
            (s for s in self._waiting if s.arrival_s <= self.clock_s), key=lambda s: (s.req.priority, s.seq)
        )
        reserved = 0  # what this step's admissions will take once computed
        for s in ready:
            victim = None
            if len(self._running) >= self.config.max_running:
                victim = self._victim_for(s)
                if victim is None:
                    break
            need = 0
            if not s.placed:
                found = self.prompts.found(s)
                self.cache.lock(found)
                # A new sequence: its uncached pieces and its output.
                pieces = [len(p) for p in s.pieces[len(found) :]]
                need = sum(pieces) + s.req.max_new_tokens
                if not self._make_room(reserved + need, [*pieces, self.prompts.own_tokens(s)]):
                    self.cache.unlock(found)
                    break  # strict order: a large head request is not overtaken
                self.prompts.place(s, found)
                self.stats.prompt_tokens += s.prompt_tokens
                self.stats.cached_tokens += s.cached_tokens
            if victim is not None:  # a waiting primary takes the newest speculative slot
                self._running.remove(victim)
                self._waiting.append(victim)  # keeps its KV; resumes where it stopped
            reserved += need
            self._waiting.remove(s)
            self._running.append(s)
            self.prompts.ready(s)  # its pieces may have been computed while it waited

    def _victim_for(self, s: Sequence) -> Sequence | None:
        victims = [r for r in self._running if r.req.priority > s.req.priority and r.abort_s is None]
        return max(victims, key=lambda r: (r.req.priority, r.seq)) if victims else None

    def _make_room(self, tokens: int, segments: list[int]) -> bool:
        """Evict unreferenced cache entries so `tokens` fit, and (where the KV is pooled) the
        pages of new `segments` (their tokens each) — a page holds a segment's positions
        only, so the pool runs out before the tokens do — if eviction can make them fit. With
        nothing running, a request is admitted whatever it needs (it could never be)."""
        free = self.capacity_tokens - self.used_tokens
        if tokens > free + self.cache.evictable_tokens:
            return not self._running
        if tokens > free:
            self.stats.evicted_tokens += self.cache.evict(tokens - free)
        pool = self.runner.pool
        if pool is not None:
            short = sum(-(-n // PAGE) for n in segments) - pool.free_pages
            if short > 0:  # an evicted entry frees at least a page per PAGE of its tokens
                if short * PAGE > self.cache.evictable_tokens:
                    return not self._running
                self.stats.evicted_tokens += self.cache.evict(short * PAGE)
        return True

    # ------------------------------------------------------------------ sampling
    def _sample(self, seqs: list[Sequence]) -> list[Sequence]:
        """A token for each sequence from its logits, all in one batch (`sampling`): the
        sequences that go on."""
        if not seqs:
            return []
        logits = torch.stack([s.next_logits for s in seqs])  # type: ignore[misc]
        tokens, logprobs = sample(
            logits, [s.req.temperature for s in seqs], [s.req.seed for s in seqs], [len(s.ids) for s in seqs]
        )
        return [
            s
            for s, token, lp in zip(seqs, tokens, logprobs, strict=True)
            if s.take(token, lp, self.tokenizer, self._eos)
        ]

    def _finish(self, s: Sequence, now_s: float, reason: CompletionReason) -> Completion:
        if s.entries:
            self.cache.unlock(s.entries)
        if s.own is not None:
            s.own.release()
        self._by_rid.pop(s.req.rid, None)
        return s.finish(now_s, reason)


def _rows(batch: Pass[KV], decode_rows: int, primary_rows: list[int]) -> PassRows:
    """What `batch` held: its first `decode_rows` rows decode (a continuing sequence each), the
    rest are prompt rows; `primary_rows` are the primaries' of both."""
    primary_decode = sum(1 for r in primary_rows if r < decode_rows)
    primary_prompt = len(primary_rows) - primary_decode
    return PassRows(
        primary_decode,
        decode_rows - primary_decode,
        primary_prompt,
        batch.rows - decode_rows - primary_prompt,
        sum(batch.positions[r] + 1 for r in primary_rows),
        sum(p + 1 for p in batch.positions),
    )
