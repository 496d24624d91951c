"""The in-process PyTorch engine: a transformers causal LM with continuous batching.

Each `step` (1) drops aborted sequences, (2) admits waiting requests — primary before
speculative, then arrival order; when the batch is full a waiting primary pauses the newest
running speculative sequence, which keeps its KV and resumes later — (3) prefills what was
admitted, piece by piece through the prefix cache (`kvcache`), and (4) decodes one token for
every running sequence: it samples from the sequence's last logits with the request's own
`torch.Generator` (so a request's tokens do not depend on its batch mates), checks EOS, the
stop strings and the token limit, and runs the model once over the continuing sequences
(`llama`: the linear layers over the batch, attention row by row over each sequence's own
KV buffer, written in place).

Deterministic mode makes every number a sequence sees a function of its own tokens: prompt
pieces are always computed alone (see `kvcache`), attention is per sequence anyway, and the
linear layers get at least the row count from which this CPU's GEMM is batch-invariant
(`LlamaRunner.rows`, measured at start). Outputs are then batch-invariant and speculation is
lossless on a real model, at batched speed: the cost is padding a smaller batch to that count
(SmolLM2 in float32: 1 to 3 sequences to 4 rows). The end-to-end tests check the rest of
the layer (norms, activations) for the models here.

The engine's clock advances by the measured wall time of each step (`stepped`), so the
virtual-time driver can run it beside other engines as if each had its own device.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from spex.proto.messages import PRIMARY
from spex.shared.engine.api import (
    Completion,
    CompletionReason,
    EngineLoad,
    EngineRequest,
    EngineStats,
    StopReason,
)
from spex.shared.hf.kvcache import Entry, PrefixCache
from spex.shared.hf.llama import LlamaRunner, SeqKV
from spex.shared.hf.models import eos_ids, load_lm, load_tokenizer
from spex.shared.hf.stepped import SteppedEngine
from spex.shared.roofline.measured import MeasuredProfile

__all__ = ["HFConfig", "HFEngine"]


@dataclass(frozen=True)
class HFConfig:
    max_running: int = 16  # sequences decoded together
    kv_capacity_tokens: int = 65_536  # prefix cache and running sequences together
    deterministic: bool = False  # batch-invariant outputs (lossless speculation)
    device: str = "cpu"
    dtype: str | None = None  # the weights' and KV's: float32, bfloat16 (None: as saved)


@dataclass(eq=False)
class _Seq:
    req: EngineRequest
    seq: int
    arrival_s: float
    generator: torch.Generator
    entries: list[Entry] = field(default_factory=list)  # locked prompt pieces
    kv: SeqKV | None = None  # the prompt's and the generated tokens' KV
    next_logits: torch.Tensor | None = None
    ids: list[int] = field(default_factory=list)  # generated tokens
    logprobs: list[float] = field(default_factory=list)
    text: str = ""
    stop_reason: StopReason = ""
    prompt_tokens: int = 0
    cached_tokens: int = 0
    first_token_s: float | None = None
    short_text: int = 0  # characters of `text` written before the step's minimum length
    abort_s: float | None = None  # when an abort arrived (it takes effect at the next step)

    @property
    def prefilled(self) -> bool:
        return self.next_logits is not None

    @property
    def context(self) -> int:
        return self.prompt_tokens + len(self.ids)

    @property
    def past_tokens(self) -> int:
        return 0 if self.kv is None else self.kv.length


class HFEngine(SteppedEngine):
    def __init__(self, model: Any, tokenizer: Any, config: HFConfig | None = None) -> None:
        super().__init__()
        self.model = model
        self.tokenizer = tokenizer
        self.config = config or HFConfig()
        self.capacity_tokens = self.config.kv_capacity_tokens
        self.cache = PrefixCache()
        self.stats = EngineStats()
        self.trace: list[tuple[float, float, int]] | None = None
        self._waiting: list[_Seq] = []
        self._running: list[_Seq] = []
        self._by_rid: dict[str, _Seq] = {}
        self._seq = 0
        self._piece_ids: dict[str, tuple[int, ...]] = {}
        self._eos = eos_ids(model, tokenizer)
        self.runner = LlamaRunner(model, self.config.deterministic, self.config.max_running)
        # A measured step-time curve (`roofline.measured`): with it each primary decode step is
        # also counted as it would have taken without speculation, for the TPOT governor.
        self.step_model: MeasuredProfile | None = None

    @classmethod
    def from_dir(cls, path: str | Path, config: HFConfig | None = None) -> HFEngine:
        config = config or HFConfig()
        return cls(load_lm(path, config.device, config.dtype), load_tokenizer(path), config)

    def count_tokens(self, text: str) -> int:
        return len(self._ids(text))

    # ------------------------------------------------------------------ the interface
    def submit(self, req: EngineRequest, now_s: float) -> None:
        if req.rid in self._by_rid:
            raise ValueError(f"duplicate request id {req.rid!r}")
        if not req.text or req.output_tokens == 0:
            raise ValueError(f"request {req.rid!r}: a generation needs its prompt text and tokens to make")
        if not self._running and not self._waiting:
            self.clock_s = max(self.clock_s, now_s)  # an idle engine starts at the arrival
        self._seq += 1
        generator = torch.Generator(device=self.config.device).manual_seed(req.seed)
        s = _Seq(req, self._seq, now_s, generator)
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
        self._by_rid.clear()
        self._running.clear()
        self._waiting.clear()
        self._held = []
        return rids

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def is_waiting(self, rid: str) -> bool:
        s = self._by_rid.get(rid)
        return s is not None and s in self._waiting

    def load(self) -> EngineLoad:
        seqs = [*self._running, *self._waiting]
        primary = [s for s in seqs if s.req.priority == PRIMARY]
        return EngineLoad(
            primary=len(primary),
            primary_ctx=sum(s.context for s in primary),
            spec=len(seqs) - len(primary),
            running=len(self._running),
            waiting=len(self._waiting),
            kv_held=self.held_tokens,
            kv_capacity=self.capacity_tokens,
            prefix_cache_hit_rate=self.stats.cache_hit_rate,
            prompt_tokens=self.stats.prompt_tokens,
            cached_tokens=self.stats.cached_tokens,
        )

    @property
    def used_tokens(self) -> int:
        """KV in memory: the prefix cache, and each admitted sequence's own copy of its
        prompt's and generated tokens' KV (what it attends over)."""
        return self.cache.total_tokens + sum(s.past_tokens for s in self._by_rid.values())

    @property
    def held_tokens(self) -> int:
        return self.used_tokens - self.cache.evictable_tokens

    def utilization(self, span_s: float) -> float:
        return 0.0  # no roofline model of this machine

    # ------------------------------------------------------------------ one step
    def step(self) -> list[Completion]:
        """One scheduler iteration; the engine's clock advances by its measured duration."""
        start = time.perf_counter()
        aborted = [s for s in self._running if s.abort_s is not None and s.abort_s <= self.clock_s]
        done: list[tuple[_Seq, CompletionReason]] = [(s, "abort") for s in aborted]
        for s, _ in done:
            self._running.remove(s)
        self._admit()
        prefill_s = primary_prefill_s = decode_s = 0.0  # parts of the step, for the TPOT governor
        with torch.inference_mode():
            prefill = [s for s in self._running if not s.prefilled]
            for s in prefill:
                t = time.perf_counter()
                self._prefill(s)
                took = time.perf_counter() - t
                prefill_s += took
                if s.req.priority == PRIMARY:
                    primary_prefill_s += took
            decoding = [s for s in self._running if s.prefilled]
            continuing = []
            for s in decoding:
                if self._sample(s):
                    continuing.append(s)
                else:
                    done.append((s, "finished"))
            for s, _ in done:
                if s in self._running:
                    self._running.remove(s)
            if continuing:
                t = time.perf_counter()
                self._decode(continuing)
                decode_s = time.perf_counter() - t
        dt = time.perf_counter() - start
        t0, self.clock_s = self.clock_s, self.clock_s + dt
        self._account(t0, dt, prefill, decoding)
        self._account_primary(
            dt, primary_prefill_s, dt - decode_s - prefill_s, decode_s, decoding, continuing
        )
        for s in decoding:
            if s.first_token_s is None:
                s.first_token_s = self.clock_s
        return [self._finish(s, self.clock_s, reason) for s, reason in done]

    def _account(self, t0: float, dt: float, prefill: list[_Seq], decoding: list[_Seq]) -> None:
        st = self.stats
        st.busy_s += dt
        if prefill:
            st.prefill_steps += 1
        if decoding:
            st.decode_steps += 1
            st.decode_s += dt
            st.batch_time += dt * len(decoding)
            st.tokens_decoded += len(decoding)
            if self.trace is not None:
                self.trace.append((t0, t0 + dt, len(decoding)))
        st.peak_kv_tokens = max(st.peak_kv_tokens, self.held_tokens)

    def _account_primary(
        self,
        dt: float,
        prefill_s: float,
        rest_s: float,
        decode_s: float,
        decoding: list[_Seq],
        continuing: list[_Seq],
    ) -> None:
        """A step that gave primaries a token, as measured and as it would have taken without
        the speculative sequences in it: the primaries' own prefill (not the speculative
        ones'), the decode pass scaled by the measured curve from the whole batch to the
        primaries in it, and the rest of the step (sampling, admission) in proportion."""
        primary = sum(1 for s in decoding if s.req.priority == PRIMARY)
        if not primary or self.step_model is None:
            return
        alone = prefill_s + max(0.0, rest_s) * primary / len(decoding)
        mine = [s for s in continuing if s.req.priority == PRIMARY]
        if mine:
            alone += self.step_model.counterfactual_s(
                decode_s,
                len(mine),
                sum(s.context for s in mine),
                len(continuing),
                sum(s.context for s in continuing),
            )
        st = self.stats
        st.primary_steps += 1
        st.primary_step_s += primary * dt
        st.primary_alone_s += primary * min(alone, dt)

    def _admit(self) -> None:
        ready = sorted(
            (s for s in self._waiting if s.arrival_s <= self.clock_s), key=lambda s: (s.req.priority, s.seq)
        )
        reserved = 0  # what this step's admissions will take once prefilled
        for s in ready:
            victim = None
            if len(self._running) >= self.config.max_running:
                victim = self._victim_for(s)
                if victim is None:
                    break
            # A new sequence: its prompt's cache entries, its own copy of them, its output.
            need = 0 if s.prefilled else 2 * self._prompt_estimate(s) + s.req.max_new_tokens
            if need and not self._make_room(reserved + need):
                break  # strict order: a large head request is not overtaken
            if victim is not None:  # a waiting primary takes the newest speculative slot
                self._running.remove(victim)
                self._waiting.append(victim)  # keeps its KV; resumes where it stopped
            reserved += need
            self._waiting.remove(s)
            self._running.append(s)

    def _victim_for(self, s: _Seq) -> _Seq | None:
        victims = [r for r in self._running if r.req.priority > s.req.priority and r.abort_s is None]
        return max(victims, key=lambda r: (r.req.priority, r.seq)) if victims else None

    def _make_room(self, tokens: int) -> bool:
        """Evict unreferenced cache entries so `tokens` fit, if eviction can make them fit.
        With nothing running, a request is admitted whatever it needs (it could never be)."""
        free = self.capacity_tokens - self.used_tokens
        if tokens <= free:
            return True
        if tokens > free + self.cache.evictable_tokens:
            return not self._running
        self.stats.evicted_tokens += self.cache.evict(tokens - free)
        return True

    def _prompt_estimate(self, s: _Seq) -> int:
        return sum(len(self._ids(piece)) for piece in s.req.text)

    # ------------------------------------------------------------------ the model
    def _ids(self, piece: str) -> tuple[int, ...]:
        ids = self._piece_ids.get(piece)
        if ids is None:
            ids = tuple(self.tokenizer.encode(piece, add_special_tokens=False))
            if len(self._piece_ids) > 100_000:
                self._piece_ids.clear()
            self._piece_ids[piece] = ids
        return ids

    def _prefill(self, s: _Seq) -> None:
        """The prompt's pieces into the sequence's KV: a cached piece is copied in, a new one
        computed over exactly the pieces before it (so its tensors do not depend on who
        computed it) and cached."""
        kv = self.runner.new_kv(self._prompt_estimate(s) + s.req.max_new_tokens + 1)
        parent: Entry | None = None
        entries: list[Entry] = []
        for piece in s.req.text:
            ids = self._ids(piece)
            if not ids:
                continue
            entry = self.cache.lookup(parent, ids)
            if entry is None:
                start = kv.length
                logits = self.runner.prefill(kv, ids)
                entry = self.cache.insert(parent, ids, kv.piece(start, kv.length), logits)
            else:
                kv.append(entry.kv)
                s.cached_tokens += entry.tokens
            entries.append(entry)
            parent = entry
        if not entries:
            raise ValueError(f"request {s.req.rid!r}: an empty prompt")
        self.cache.lock(entries)
        s.entries = entries
        s.prompt_tokens = kv.length
        s.kv = kv
        s.next_logits = entries[-1].last_logits
        self.stats.prompt_tokens += s.prompt_tokens
        self.stats.cached_tokens += s.cached_tokens

    def _sample(self, s: _Seq) -> bool:
        """Sample the next token from the sequence's logits; False when the sequence is done."""
        assert s.next_logits is not None
        logits = s.next_logits
        logp = torch.log_softmax(logits, dim=-1)
        if s.req.temperature > 0:
            # Inverse CDF: one uniform draw from the request's generator (multinomial draws
            # one exponential per vocabulary entry: a tenth of a step at batch 16).
            cdf = torch.softmax(logits / s.req.temperature, dim=-1).cumsum(-1)
            u = torch.rand(1, generator=s.generator, device=cdf.device) * cdf[-1]
            token = min(int(torch.searchsorted(cdf, u, right=True).item()), cdf.shape[0] - 1)
        else:
            token = int(torch.argmax(logits).item())
        s.ids.append(token)
        s.logprobs.append(float(logp[token]))
        if s.req.output_tokens > 0:  # exactly this many (the synthetic content mode)
            if len(s.ids) >= s.req.output_tokens:
                s.stop_reason = "length"
                s.text = self.tokenizer.decode(s.ids, skip_special_tokens=True)
                return False
            return True
        if token in self._eos:
            s.stop_reason = "eos"
            s.text = self.tokenizer.decode(s.ids[:-1], skip_special_tokens=True)
            return False
        s.text = self.tokenizer.decode(s.ids, skip_special_tokens=True)
        # A stop string counts after the step's first words (a step is never empty) and once
        # the step has its minimum length: one that ends before that is passed over.
        if len(s.ids) <= min(s.req.min_tokens, s.req.max_new_tokens - 1):
            s.short_text = len(s.text)
            return True
        start = len(s.text) - len(s.text.lstrip())
        found = (s.text.find(stop, max(start, s.short_text - len(stop) + 1)) for stop in s.req.stop)
        cut = min((i for i in found if i >= 0), default=-1)
        if cut >= 0:
            s.text, s.stop_reason = s.text[:cut], "stop"
            return False
        if len(s.ids) >= s.req.max_new_tokens:
            s.stop_reason = "length"
            return False
        return True

    def _decode(self, seqs: list[_Seq]) -> None:
        """Run the model over each sequence's newest token, in one batch: its next logits,
        and its KV written in place."""
        kvs = [s.kv for s in seqs]
        assert all(kv is not None for kv in kvs)
        logits = self.runner.decode(kvs, [s.ids[-1] for s in seqs])  # type: ignore[arg-type]
        for b, s in enumerate(seqs):
            s.next_logits = logits[b]

    def _finish(self, s: _Seq, now_s: float, reason: CompletionReason) -> Completion:
        if s.entries:
            self.cache.unlock(s.entries)
        self._by_rid.pop(s.req.rid, None)
        s.kv, s.entries = None, []
        logprobs = s.logprobs or [0.0]
        return Completion(
            rid=s.req.rid,
            time_s=now_s,
            generated=len(s.ids),
            prompt_tokens=s.prompt_tokens,
            cached_tokens=s.cached_tokens,
            reason=reason,
            arrival_s=s.arrival_s,
            first_token_s=s.first_token_s,
            priority=s.req.priority,
            text=s.text,
            stop_reason=s.stop_reason,
            logprob_mean=sum(logprobs) / len(logprobs),
            logprob_min=min(logprobs),
        )
