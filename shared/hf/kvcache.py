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

    @property
    def tokens(self) -> int:
        return len(self.ids)


class PrefixCache:
    def __init__(self) -> None:
        self._roots: dict[tuple[int, ...], Entry] = {}
        self.total_tokens = 0
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
        self._touch(entry)
        return entry

    def lock(self, entries: Sequence[Entry]) -> None:
        for e in entries:
            e.refs += 1

    def unlock(self, entries: Sequence[Entry]) -> None:
        for e in entries:
            e.refs -= 1
            self._touch(e)

    @property
    def evictable_tokens(self) -> int:
        """Tokens of the entries no request references, nor any entry below them."""

        def free(e: Entry) -> tuple[bool, int]:
            below = [free(c) for c in e.children.values()]
            tokens = sum(t for _, t in below)
            if e.refs == 0 and all(ok for ok, _ in below):
                return True, tokens + e.tokens
            return False, tokens

        return sum(free(e)[1] for e in self._roots.values())

    def evict(self, tokens: int) -> int:
        """Drop unreferenced leaves, least recently used first, until `tokens` are free (or
        nothing more can go); returns how many tokens were dropped."""
        freed = 0
        while freed < tokens:
            leaves = [e for e in self._all() if e.refs == 0 and not e.children]
            if not leaves:
                break
            victim = min(leaves, key=lambda e: e.last_used)
            (self._roots if victim.parent is None else victim.parent.children).pop(victim.ids)
            self.total_tokens -= victim.tokens
            freed += victim.tokens
        return freed

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
