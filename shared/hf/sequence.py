"""A request as the in-process engine holds it, and what it does with each sampled token:
the stop rules (an exact count, EOS, a stop string past the step's minimum length, the token
limit) and the completion it ends with."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from spex.shared.engine.api import Completion, CompletionReason, EngineRequest, StopReason
from spex.shared.hf.attention import KV
from spex.shared.hf.kvcache import Entry

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["Sequence"]


@dataclass(eq=False)
class Sequence:
    """A request in the engine: its prompt's pieces and their cache entries, its own KV, its
    tokens and text so far."""

    req: EngineRequest
    seq: int
    arrival_s: float
    pieces: list[tuple[int, ...]]  # the prompt's token ids, piece by piece
    entries: list[Entry] = field(default_factory=list)  # its pieces in the cache, locked
    own: KV | None = None  # the generated tokens' KV, after the prompt's
    next_logits: torch.Tensor | None = None
    ids: list[int] = field(default_factory=list)  # generated tokens
    logprobs: list[float] = field(default_factory=list)
    text: str = ""
    stop_reason: StopReason = ""
    cached_tokens: int = 0
    first_token_s: float | None = None
    short_text: int = 0  # characters of `text` written before the step's minimum length
    abort_s: float | None = None  # when an abort arrived (it takes effect at the next step)

    @property
    def placed(self) -> bool:
        return bool(self.entries)

    @property
    def prefilled(self) -> bool:
        return self.next_logits is not None

    @property
    def prompt_tokens(self) -> int:
        return sum(len(p) for p in self.pieces)

    @property
    def context(self) -> int:
        return self.prompt_tokens + len(self.ids)

    @property
    def past_tokens(self) -> int:
        return 0 if self.own is None else self.own.length

    def segments(self) -> list[KV]:
        return [e.kv for e in self.entries]

    def take(
        self, token: int, logprob: float, tokenizer: PreTrainedTokenizerBase, eos: frozenset[int]
    ) -> bool:
        """The sequence's next token: False when the sequence is done (its text and stop
        reason then final): its exact count (synthetic content), EOS, a stop string past the
        step's minimum length, or its token limit."""
        self.ids.append(token)
        self.logprobs.append(logprob)
        if self.req.output_tokens > 0:  # exactly this many (the synthetic content mode)
            if len(self.ids) >= self.req.output_tokens:
                self.stop_reason = "length"
                self.text = str(tokenizer.decode(self.ids, skip_special_tokens=True))
                return False
            return True
        if token in eos:
            self.stop_reason = "eos"
            self.text = str(tokenizer.decode(self.ids[:-1], skip_special_tokens=True))
            return False
        self.text = str(tokenizer.decode(self.ids, skip_special_tokens=True))
        # A stop string counts after the step's first words (a step is never empty) and once
        # the step has its minimum length: one that ends before that is passed over.
        if len(self.ids) <= min(self.req.min_tokens, self.req.max_new_tokens - 1):
            self.short_text = len(self.text)
            return True
        start = len(self.text) - len(self.text.lstrip())
        found = (self.text.find(stop, max(start, self.short_text - len(stop) + 1)) for stop in self.req.stop)
        cut = min((i for i in found if i >= 0), default=-1)
        if cut >= 0:
            self.text, self.stop_reason = self.text[:cut], "stop"
            return False
        if len(self.ids) >= self.req.max_new_tokens:
            self.stop_reason = "length"
            return False
        return True

    def finish(self, now_s: float, reason: CompletionReason) -> Completion:
        """Its completion; it holds no KV or entries after (the engine has let them go)."""
        placed = self.placed
        self.own, self.entries, self.next_logits = None, [], None
        logprobs = self.logprobs or [0.0]
        return Completion(
            rid=self.req.rid,
            time_s=now_s,
            generated=len(self.ids),
            prompt_tokens=self.prompt_tokens if placed else 0,
            cached_tokens=self.cached_tokens,
            reason=reason,
            arrival_s=self.arrival_s,
            first_token_s=self.first_token_s,
            priority=self.req.priority,
            text=self.text,
            stop_reason=self.stop_reason,
            logprob_mean=sum(logprobs) / len(logprobs),
            logprob_min=min(logprobs),
        )
