"""A process reward model in process, of any family (`spex.shared.content.reward_prompts`): a
two-label token classifier read at a step's last token (SPEX's own), a step-tag model
(`Qwen2ForProcessRewardModel`) read at the step's tag, or a causal LM whose good and bad
tokens' logits are read there (Math-Shepherd, RLHFlow). Each path's text ends where its score is
read (`RewardFormat.pieces`), so a score is two logits at the path's last token
(`prm_models.PrmReader`) and the reward the right (or good) one's softmax probability.

One forward pass over a path gives a score at every position, so it scores the whole path's
steps at once; every ready score request (up to `max_batch`, and `max_batch_tokens` padded
tokens) shares one right-padded pass, most urgent first. A row's score agrees with the same
path scored alone to float rounding (the causal mask keeps padding out of a row's real
positions; only the kernels' summation order differs: `tests/hf/test_reward_batching.py`
holds float32 to 1e-5). Deterministic mode scores one request per pass, so a score never
depends on its batch mates. The model is any local directory of the family (`spex model init
--prm --prm-kind KIND` builds a random-weight one; `init_model` with a catalog shape and `prm`
writes a token classifier's config whose weights are built where it loads).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from spex.proto.messages import PRIMARY
from spex.shared.content.reward_prompts import RewardFormat
from spex.shared.engine.api import Completion, CompletionReason, EngineLoad, EngineRequest, EngineStats
from spex.shared.hf.models import load_prm, load_tokenizer
from spex.shared.hf.prm_models import PrmReader
from spex.shared.hf.stepped import SteppedEngine

__all__ = ["RewardConfig", "RewardEngine"]


@dataclass(frozen=True)
class RewardConfig:
    max_batch: int = 16  # score requests a pass takes
    # Rows × the longest row's tokens. A 7B pass of 8k tokens already keeps a GPU's matrix units
    # busy; a longer one scores no faster per token and holds back a primary's score queued
    # behind it (the reward barrier SPEX shortens) for longer.
    max_batch_tokens: int = 8_192
    deterministic: bool = False
    device: str = "cpu"
    dtype: str | None = None  # float32, bfloat16 (None: as saved; bfloat16 on a GPU)


@dataclass(eq=False)
class _Score:
    req: EngineRequest
    seq: int
    arrival_s: float
    ids: list[int] = field(default_factory=list)


class RewardEngine(SteppedEngine):
    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        config: RewardConfig | None = None,
        fmt: RewardFormat | None = None,
    ) -> None:
        super().__init__()
        self.model = model
        self.tokenizer = tokenizer
        self.config = config or RewardConfig()
        self.format = fmt or RewardFormat()
        self.reader = PrmReader(self.format, tokenizer)
        self.stats = EngineStats()
        self.capacity_tokens = 0
        self.trace: list[tuple[float, float, int]] | None = None  # (start, end, rows) per pass
        self._waiting: list[_Score] = []
        self._by_rid: dict[str, _Score] = {}
        self._seq = 0
        self._pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0

    @classmethod
    def from_dir(
        cls, path: str | Path, config: RewardConfig | None = None, fmt: RewardFormat | None = None
    ) -> RewardEngine:
        config, fmt = config or RewardConfig(), fmt or RewardFormat()
        return cls(load_prm(path, config.device, config.dtype, fmt.kind), load_tokenizer(path), config, fmt)

    def count_tokens(self, text: str) -> int:
        """As a piece of a path is tokenized (`submit`): synthetic paths are sized by it."""
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    # ------------------------------------------------------------------ the interface
    def submit(self, req: EngineRequest, now_s: float) -> None:
        if req.rid in self._by_rid:
            raise ValueError(f"duplicate request id {req.rid!r}")
        if not req.text:
            raise ValueError(f"request {req.rid!r}: a score needs the path's text")
        if not self._waiting:
            self.clock_s = max(self.clock_s, now_s)
        self._seq += 1
        # A published family's path is tokenized whole, as its card (and a server) tokenizes it;
        # SPEX's own classifier reads its pieces one by one, as it always has (its scores, and so
        # the trees of runs before the families, stay what they were).
        pieces = req.text if self.format.kind == "token-classification" else ("".join(req.text),)
        ids = [t for piece in pieces for t in self.tokenizer.encode(piece, add_special_tokens=False)]
        s = _Score(req, self._seq, now_s, ids)
        self._by_rid[req.rid] = s
        self._waiting.append(s)

    def abort(self, rid: str, now_s: float) -> list[Completion]:
        s = self._by_rid.pop(rid, None)
        if s is None:
            return []
        self._waiting.remove(s)
        return [self._completion(s, now_s, "abort", None)]

    def promote(self, rid: str, now_s: float, priority: int = PRIMARY) -> None:
        s = self._by_rid.get(rid)
        if s is not None and s.req.priority > priority:
            s.req.priority = priority

    def ready_s(self) -> float | None:
        if any(s.arrival_s <= self.clock_s for s in self._waiting):
            return self.clock_s
        return min((s.arrival_s for s in self._waiting), default=None)

    def drop_all(self) -> list[str]:
        """Forget every request (after a failed step); their ids."""
        rids = list(self._by_rid)
        self._by_rid.clear()
        self._waiting.clear()
        self._held = []
        return rids

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def is_waiting(self, rid: str) -> bool:
        return rid in self._by_rid

    def load(self) -> EngineLoad:
        primary = [s for s in self._waiting if s.req.priority == PRIMARY]
        return EngineLoad(
            primary=len(primary),
            primary_ctx=sum(len(s.ids) for s in primary),
            spec=len(self._waiting) - len(primary),
            running=0,
            waiting=len(self._waiting),
            kv_held=0,
            kv_capacity=0,
            prefix_cache_hit_rate=0.0,
        )

    @property
    def held_tokens(self) -> int:
        return 0

    def utilization(self, span_s: float) -> float:
        return 0.0

    def close(self) -> None:
        """Nothing to let go of: it caches no prompt, and its requests end with their pass."""

    # ------------------------------------------------------------------ one step
    def step(self) -> list[Completion]:
        """Score the most urgent ready requests, one batch (or one request) per pass."""
        start = time.perf_counter()
        ready = sorted(
            (s for s in self._waiting if s.arrival_s <= self.clock_s), key=lambda s: (s.req.priority, s.seq)
        )
        batch = self._batch(ready)
        rewards = self.score([s.ids for s in batch])
        for s in batch:
            self._waiting.remove(s)
            del self._by_rid[s.req.rid]
        dt = time.perf_counter() - start
        if self.trace is not None:
            self.trace.append((self.clock_s, self.clock_s + dt, len(batch)))
        self.clock_s += dt
        self.stats.busy_s += dt
        self.stats.prefill_steps += 1
        self.stats.prompt_tokens += sum(len(s.ids) for s in batch)
        return [self._completion(s, self.clock_s, "finished", r) for s, r in zip(batch, rewards, strict=True)]

    def _batch(self, ready: list[_Score]) -> list[_Score]:
        """The pass's rows: the ready requests in order while the padded pass stays within
        `max_batch` rows and `max_batch_tokens` tokens (the first one always: a path longer
        than the budget still gets its pass)."""
        rows = 1 if self.config.deterministic else self.config.max_batch
        batch: list[_Score] = []
        width = 0
        for s in ready[:rows]:
            wider = max(width, len(s.ids))
            if batch and wider * (len(batch) + 1) > self.config.max_batch_tokens:
                break
            batch.append(s)
            width = wider
        return batch

    def score(self, paths: list[list[int]]) -> list[float]:
        """P(right) (or P(good)) at the last token of each path, in one right-padded forward pass."""
        width = max(len(p) for p in paths)
        dev = self.config.device
        ids = torch.full((len(paths), width), self._pad, dtype=torch.long, device=dev)
        mask = torch.zeros(len(paths), width, dtype=torch.long, device=dev)
        for b, p in enumerate(paths):
            ids[b, : len(p)] = torch.tensor(p, device=dev)
            mask[b, : len(p)] = 1
        last = torch.tensor([len(p) - 1 for p in paths], device=dev)
        with torch.inference_mode():
            logits = self.reader.logits(self.model, ids, mask, last).float()  # [B, 2]
        probs = torch.softmax(logits, dim=-1)[:, self.format.positive]
        return [float(x) for x in probs]

    def _completion(
        self, s: _Score, now_s: float, reason: CompletionReason, reward: float | None
    ) -> Completion:
        return Completion(
            rid=s.req.rid,
            time_s=now_s,
            generated=0,
            prompt_tokens=len(s.ids),
            cached_tokens=0,
            reason=reason,
            arrival_s=s.arrival_s,
            first_token_s=None,
            priority=s.req.priority,
            reward=reward,
        )
