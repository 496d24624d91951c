"""The in-process engine's prompts and its forward pass: each prompt placed in the prefix cache
(`kvcache`) piece by piece — the pieces found there referenced, the rest new entries to
compute — and each step's pass planned (a row for each continuing sequence's newest token,
then prompt rows, primaries' first, up to `prefill_tokens`) and its logits handed out.

`engine.HFEngine` is one of these; the mixin holds no state of its own (as SGLang splits its
scheduler): the engine's fields it reads are declared here for the type checker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from spex.proto.messages import PRIMARY
from spex.shared.engine.api import EngineStats
from spex.shared.hf.attention import Pass
from spex.shared.hf.kvcache import Entry, PrefixCache
from spex.shared.hf.llama import LlamaRunner
from spex.shared.hf.sequence import Sequence

if TYPE_CHECKING:
    from spex.shared.hf.engine import HFConfig

__all__ = ["PromptPasses"]


class PromptPasses:
    """Prompts in the prefix cache, and the pass of each step."""

    config: HFConfig
    tokenizer: Any
    cache: PrefixCache
    runner: LlamaRunner
    stats: EngineStats
    _running: list[Sequence]
    _piece_ids: dict[str, tuple[int, ...]]
    _pending: dict[Entry, int]  # prompt pieces being computed: rows done

    @staticmethod
    def _own_tokens(s: Sequence) -> int:
        """What a sequence's own segment holds: every token it may make, and one more."""
        return max(s.req.max_new_tokens, s.req.output_tokens) + 1

    # ------------------------------------------------------------------ prompts in the cache
    def _ids(self, piece: str) -> tuple[int, ...]:
        ids = self._piece_ids.get(piece)
        if ids is None:
            ids = tuple(self.tokenizer.encode(piece, add_special_tokens=False))
            if len(self._piece_ids) > 100_000:
                self._piece_ids.clear()
            self._piece_ids[piece] = ids
        return ids

    def _found(self, s: Sequence) -> list[Entry]:
        """The longest run of the prompt's first pieces the cache holds (computed or not)."""
        found: list[Entry] = []
        for ids in s.pieces:
            entry = self.cache.lookup(found[-1] if found else None, ids)
            if entry is None:
                break
            found.append(entry)
        return found

    def _place(self, s: Sequence, found: list[Entry]) -> None:
        """The prompt's entries: `found` (locked), then a new one for each piece after them."""
        entries = list(found)
        for ids in s.pieces[len(found) :]:
            segment = self.runner.new_segment(len(ids))
            segment.length = len(ids)  # what a later piece or token attends to, once computed
            entry = self.cache.insert(entries[-1] if entries else None, ids, segment, None)
            self._pending[entry] = 0
            self.cache.lock([entry])
            entries.append(entry)
        s.entries = entries
        s.own = self.runner.new_segment(self._own_tokens(s))  # its pages taken with its prompt's
        s.cached_tokens = sum(e.tokens for e in found)
        self.stats.prompt_tokens += s.prompt_tokens
        self.stats.cached_tokens += s.cached_tokens

    def _ready(self, s: Sequence) -> None:
        """A sequence whose every piece is computed decodes from its last piece's logits."""
        if s.next_logits is None and all(e.last_logits is not None for e in s.entries):
            s.next_logits = s.entries[-1].last_logits

    # ------------------------------------------------------------------ the pass
    def _plan(self, continuing: list[Sequence]) -> tuple[Pass[Any], list[tuple[int, Any]], list[int]]:
        """The step's pass: a row for each continuing sequence's newest token, then prompt rows
        for the sequences still waiting on pieces, primaries first, up to `prefill_tokens`
        (a piece runs in the same pass as the one before it only once that one completes in
        it). Also: which rows give logits, to whom (a sequence, or a piece completing), and
        which rows are primaries'."""
        for entry in [e for e in self._pending if e.refs == 0]:  # nobody waits on it any more
            del self._pending[entry]
            self.cache.drop(entry)
        batch: Pass[Any] = Pass()
        logits_of: list[tuple[int, Any]] = []
        primary_rows: list[int] = []
        for s in continuing:
            assert s.own is not None
            s.own.grow(s.own.length + 1)
            row = batch.add([*s.segments(), s.own], s.own.length, [s.ids[-1]])
            logits_of.append((row, s))
            if s.req.priority == PRIMARY:
                primary_rows.append(row)
        budget = self.config.prefill_tokens
        completing = 0
        scheduled: dict[Entry, int] = {}  # pending entries' rows done once this pass has run
        waiting = sorted((s for s in self._running if not s.prefilled), key=lambda s: (s.req.priority, s.seq))
        for s in waiting:
            for i, entry in enumerate(s.entries):
                done = scheduled.get(entry, self._pending.get(entry))
                if done is None or done == entry.tokens:
                    continue  # computed, or completing in this pass
                if budget == 0 or completing == self.config.max_running:
                    break
                take = min(entry.tokens - done, budget)
                first = batch.add(s.segments()[: i + 1], done, entry.ids[done : done + take])
                if s.req.priority == PRIMARY:
                    primary_rows.extend(range(first, first + take))
                budget -= take
                scheduled[entry] = done + take
                if done + take < entry.tokens:
                    break  # its rest, and the pieces after it, in a later pass
                logits_of.append((first + take - 1, entry))
                completing += 1
        self._pending.update(scheduled)
        return batch, logits_of, primary_rows

    def _absorb(self, logits: torch.Tensor, logits_of: list[tuple[int, Any]]) -> None:
        """The pass's logits to the sequences that decoded and the pieces it completed."""
        completed = False
        for (_, owner), row in zip(logits_of, logits, strict=True):
            if isinstance(owner, Entry):
                owner.last_logits = row.clone()  # a view would keep the pass's logits alive
                del self._pending[owner]
                completed = True
            else:
                owner.next_logits = row
        if completed:
            for s in self._running:
                if not s.prefilled:
                    self._ready(s)
