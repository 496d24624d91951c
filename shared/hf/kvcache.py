"""A prefix cache of prompt KV, keyed by token prefix, one entry per prompt piece.

A prompt is pieces (the head with the question, then one per step on the path; see
`spex.shared.content.prompts`), so a child's prompt is its parent's plus one piece. An entry
holds the KV of one piece computed on top of its parent entry, and the logits after its last
token. Its key is the token ids of every piece from the first to it, so two requests with the
same prefix share entries whoever computed them first.

Each piece is always computed the same way — each of its tokens attending over exactly the KV
of the pieces before it and its own earlier tokens — so an entry's tensors do not depend on
which request, or which pass, computed it: the basis of the engine's deterministic mode.
Sequences attend to an entry where it lies (never a copy), and an entry is inserted before it
is computed, so a second request for the same piece waits for it instead of computing it
again. Unreferenced entries without children are evicted least recently used first; an entry
that leaves the cache (evicted or dropped) releases its KV (`kv.release()`: its pages go back
to the engine's pool).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from spex.shared.hf.attention import KV

__all__ = ["Entry", "PrefixCache"]


@dataclass(eq=False)
class Entry:
    ids: tuple[int, ...]  # this piece's tokens
    parent: Entry | None
    kv: KV  # this piece's KV only (a `attention.Segment` or a `paged.PagedSegment`)
    last_logits: torch.Tensor | None  # [vocab] after the piece's last token (None while it is computed)
    children: dict[tuple[int, ...], Entry] = field(default_factory=dict)
    refs: int = 0
    last_used: int = 0
    pinned: int = 0  # entries in this subtree (itself included) that a request references

    @property
    def tokens(self) -> int:
        return len(self.ids)


class PrefixCache:
    """Entries by prefix. What eviction could free (`evictable_tokens`: entries with nothing
    referenced in their subtree) is kept up to date as entries are locked and unlocked, by
    walking up from the entry: a step reads it without walking the tree."""

    def __init__(self) -> None:
        self._roots: dict[tuple[int, ...], Entry] = {}
        self.total_tokens = 0
        self.evictable_tokens = 0
        self._clock = 0

    def lookup(self, parent: Entry | None, ids: Sequence[int]) -> Entry | None:
        children = self._roots if parent is None else parent.children
        entry = children.get(tuple(ids))
        if entry is not None:
            self._touch(entry)
        return entry

    def insert(
        self, parent: Entry | None, ids: Sequence[int], kv: KV, last_logits: torch.Tensor | None
    ) -> Entry:
        entry = Entry(tuple(ids), parent, kv, last_logits)
        (self._roots if parent is None else parent.children)[entry.ids] = entry
        self.total_tokens += entry.tokens
        self.evictable_tokens += entry.tokens  # a new leaf, referenced by nobody yet
        self._touch(entry)
        return entry

    def lock(self, entries: Sequence[Entry]) -> None:
        for e in entries:
            e.refs += 1
            if e.refs == 1:
                self._pin(e, +1)

    def unlock(self, entries: Sequence[Entry]) -> None:
        for e in entries:
            e.refs -= 1
            if e.refs == 0:
                self._pin(e, -1)
            self._touch(e)

    def evict(self, tokens: int) -> int:
        """Drop unreferenced leaves, least recently used first, until `tokens` are free (or
        nothing more can go); returns how many tokens were dropped."""
        heap = [(e.last_used, id(e), e) for e in self._all() if e.pinned == 0 and not e.children]
        heapq.heapify(heap)
        freed = 0
        while freed < tokens and heap:
            _, _, victim = heapq.heappop(heap)
            parent = victim.parent
            (self._roots if parent is None else parent.children).pop(victim.ids)
            victim.kv.release()
            self.total_tokens -= victim.tokens
            self.evictable_tokens -= victim.tokens
            freed += victim.tokens
            if parent is not None and not parent.children and parent.pinned == 0:
                heapq.heappush(heap, (parent.last_used, id(parent), parent))  # a leaf now
        return freed

    def drop(self, entry: Entry) -> int:
        """Remove an unreferenced entry and everything below it, if the cache still holds it
        (a piece whose computing nobody waits for any more); returns the tokens dropped."""
        assert entry.pinned == 0, "a referenced entry is never dropped"
        siblings = self._roots if entry.parent is None else entry.parent.children
        if siblings.get(entry.ids) is not entry:
            return 0
        del siblings[entry.ids]
        dropped, stack = 0, [entry]
        while stack:
            e = stack.pop()
            e.kv.release()
            dropped += e.tokens
            stack.extend(e.children.values())
            e.children = {}  # gone: a later drop of one of them finds it out of the cache
        self.total_tokens -= dropped
        self.evictable_tokens -= dropped
        return dropped

    def _pin(self, entry: Entry, delta: int) -> None:
        """`entry` became referenced (+1) or unreferenced (-1): so did its ancestors' subtrees."""
        e: Entry | None = entry
        while e is not None:
            was = e.pinned
            e.pinned += delta
            if was == 0 and e.pinned > 0:
                self.evictable_tokens -= e.tokens
            elif was > 0 and e.pinned == 0:
                self.evictable_tokens += e.tokens
            e = e.parent

    def _touch(self, entry: Entry) -> None:
        self._clock += 1
        entry.last_used = self._clock

    def _all(self) -> list[Entry]:
        out, stack = [], list(self._roots.values())
        while stack:
            e = stack.pop()
            out.append(e)
            stack.extend(e.children.values())
        return out
