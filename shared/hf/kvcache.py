"""A prefix cache of prompt KV, keyed by token prefix, one entry per prompt piece.

A prompt is pieces (the head with the question, then one per step on the path; see
`spex.shared.content.prompts`), so a child's prompt is its parent's plus one piece. An entry
holds the KV of one piece computed on top of its parent entry, and the logits after its last
token. Its key is the token ids of every piece from the first to it, so two requests with the
same prefix share entries whoever computed them first.

Each piece is always computed the same way — its tokens in one forward pass over exactly
the KV of the pieces before it — so an entry's tensors do not depend on which request, or
which batch, computed it: the basis of the engine's deterministic mode. Unreferenced entries
without children are evicted least recently used first.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["KV", "Entry", "PrefixCache"]

KV = list[tuple[Any, Any]]  # per layer: (keys, values), each [1, kv_heads, tokens, head_dim]


@dataclass(eq=False)
class Entry:
    ids: tuple[int, ...]  # this piece's tokens
    parent: Entry | None
    kv: KV  # this piece's KV only
    last_logits: Any  # [vocab] after the piece's last token
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

    def insert(self, parent: Entry | None, ids: Sequence[int], kv: KV, last_logits: Any) -> Entry:
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
            self.total_tokens -= victim.tokens
            self.evictable_tokens -= victim.tokens
            freed += victim.tokens
            if parent is not None and not parent.children and parent.pinned == 0:
                heapq.heappush(heap, (parent.last_used, id(parent), parent))  # a leaf now
        return freed

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
