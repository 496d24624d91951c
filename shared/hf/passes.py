"""The in-process engine's prompts and its forward pass: each prompt placed in the prefix cache
(`kvcache`) piece by piece — the pieces found there referenced, the rest new entries to
compute — and each step's pass planned (a row for each continuing sequence's newest token,
then prompt rows, primaries' first, up to `prefill_tokens`) and its logits handed out.

`engine.HFEngine` owns one `PromptPlanner` and hands it the sequences it runs; the planner owns
the pieces' token ids and the pieces being computed, over the engine's prefix cache and runner.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedTokenizerBase

from spex.proto.messages import PRIMARY
from spex.shared.hf.attention import KV, Pass
from spex.shared.hf.kvcache import Entry, PrefixCache
from spex.shared.hf.llama import LlamaRunner
from spex.shared.hf.sequence import Sequence

__all__ = ["PromptPlanner"]


class PromptPlanner:
    """Prompts in the prefix cache, and the pass of each step: at most `prefill_tokens` prompt
    rows and `max_running` pieces completing in one."""

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        cache: PrefixCache,
        runner: LlamaRunner,
        prefill_tokens: int,
        max_running: int,
    ) -> None:
        self.tokenizer, self.cache, self.runner = tokenizer, cache, runner
        self.prefill_tokens, self.max_running = prefill_tokens, max_running
        self._piece_ids: dict[str, tuple[int, ...]] = {}
        self.pending: dict[Entry, int] = {}  # prompt pieces being computed: rows done

    @staticmethod
    def own_tokens(s: Sequence) -> int:
        """What a sequence's own segment holds: every token it may make, and one more."""
        return max(s.req.max_new_tokens, s.req.output_tokens) + 1

    # ------------------------------------------------------------------ prompts in the cache
    def ids(self, piece: str) -> tuple[int, ...]:
        ids = self._piece_ids.get(piece)
        if ids is None:
            ids = tuple(self.tokenizer.encode(piece, add_special_tokens=False))
            if len(self._piece_ids) > 100_000:
                self._piece_ids.clear()
            self._piece_ids[piece] = ids
        return ids

    def found(self, s: Sequence) -> list[Entry]:
        """The longest run of the prompt's first pieces the cache holds (computed or not)."""
        found: list[Entry] = []
        for ids in s.pieces:
            entry = self.cache.lookup(found[-1] if found else None, ids)
            if entry is None:
                break
            found.append(entry)
        return found

    def place(self, s: Sequence, found: list[Entry]) -> None:
        """The prompt's entries: `found` (locked), then a new one for each piece after them."""
        entries = list(found)
        for ids in s.pieces[len(found) :]:
            segment = self.runner.new_segment(len(ids))
            segment.length = len(ids)  # what a later piece or token attends to, once computed
            entry = self.cache.insert(entries[-1] if entries else None, ids, segment, None)
            self.pending[entry] = 0
            self.cache.lock([entry])
            entries.append(entry)
        s.entries = entries
        s.own = self.runner.new_segment(self.own_tokens(s))  # its pages taken with its prompt's
        s.cached_tokens = sum(e.tokens for e in found)

    def ready(self, s: Sequence) -> None:
        """A sequence whose every piece is computed decodes from its last piece's logits."""
        if s.next_logits is None and all(e.last_logits is not None for e in s.entries):
            s.next_logits = s.entries[-1].last_logits

    # ------------------------------------------------------------------ the pass
    def drop_pending(self) -> None:
        """Forget the pieces being computed (after a failed step): half computed, perhaps,
        they are never found again."""
        for entry in self.pending:
            self.cache.drop(entry)
        self.pending.clear()

    def plan(
        self, continuing: list[Sequence], running: list[Sequence]
    ) -> tuple[Pass[KV], list[tuple[int, Sequence | Entry]], list[int]]:
        """The step's pass: a row for each continuing sequence's newest token, then prompt rows
        for the sequences still waiting on pieces, primaries first, up to `prefill_tokens`
        (a piece runs in the same pass as the one before it only once that one completes in
        it). Also: which rows give logits, to whom (a sequence, or a piece completing), and
        which rows are primaries'. `running`: every sequence admitted."""
        for entry in [e for e in self.pending if e.refs == 0]:  # nobody waits on it any more
            del self.pending[entry]
            self.cache.drop(entry)
        batch: Pass[KV] = Pass()
        logits_of: list[tuple[int, Sequence | Entry]] = []
        primary_rows: list[int] = []
        for s in continuing:
            assert s.own is not None
            s.own.grow(s.own.length + 1)
            row = batch.add([*s.segments(), s.own], s.own.length, [s.ids[-1]])
            logits_of.append((row, s))
            if s.req.priority == PRIMARY:
                primary_rows.append(row)
        budget = self.prefill_tokens
        completing = 0
        scheduled: dict[Entry, int] = {}  # pending entries' rows done once this pass has run
        waiting = sorted((s for s in running if not s.prefilled), key=lambda s: (s.req.priority, s.seq))
        for s in waiting:
            for i, entry in enumerate(s.entries):
                done = scheduled.get(entry, self.pending.get(entry))
                if done is None or done == entry.tokens:
                    continue  # computed, or completing in this pass
                if budget == 0 or completing == self.max_running:
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
        self.pending.update(scheduled)
        return batch, logits_of, primary_rows

    def absorb(
        self, logits: torch.Tensor, logits_of: list[tuple[int, Sequence | Entry]], running: list[Sequence]
    ) -> None:
        """The pass's logits to the sequences that decoded and the pieces it completed."""
        completed = False
        for (_, owner), row in zip(logits_of, logits, strict=True):
            if isinstance(owner, Entry):
                owner.last_logits = row.clone()  # a view would keep the pass's logits alive
                del self.pending[owner]
                completed = True
            else:
                owner.next_logits = row
        if completed:
            for s in running:
                if not s.prefilled:
                    self.ready(s)
