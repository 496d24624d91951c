"""A radix prefix cache over prompt segments, with capacity accounting and LRU eviction.

A prompt in a tree search is the question followed by the steps on the path to a node, so
prompts are keyed by *segments* (one per node: its id and token count) instead of raw token
ids: a child's prompt extends its parent's, exactly the sharing SGLang's RadixAttention finds
token by token. A segment may be cached partially (an aborted request leaves the tokens it
computed); matching stops inside such a segment.

Entries referenced by a running request are locked (`ref > 0`); only unlocked leaves are
evicted, least recently used first (SGLang's default `--radix-eviction-policy lru`).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

from spex.shared.core.commands import Segment

__all__ = ["RadixCache", "RadixNode", "Segment"]


@dataclass(eq=False)
class RadixNode:
    seg_id: str
    tokens: int
    parent: RadixNode | None
    children: dict[str, RadixNode] = field(default_factory=dict)
    ref: int = 0
    last_access_s: float = 0.0


class RadixCache:
    def __init__(self) -> None:
        self.root = RadixNode("", 0, None)
        self.total_tokens = 0  # tokens held by every entry
        self.locked_tokens = 0  # tokens held by entries with ref > 0
        self._seq = 0  # tie-breaker for the eviction heap

    @property
    def evictable_tokens(self) -> int:
        # A lock holds every entry on its path, so an entry with ref == 0 has no locked
        # descendant: every unlocked token can eventually be evicted leaf-first.
        return self.total_tokens - self.locked_tokens

    def match(self, prompt: Sequence[Segment], now_s: float) -> tuple[int, list[RadixNode]]:
        """Longest cached prefix of `prompt`: (tokens matched, entries on the matched path)."""
        node, matched, path = self.root, 0, []
        for seg_id, tokens in prompt:
            child = node.children.get(seg_id)
            if child is None:
                break
            child.last_access_s = now_s
            path.append(child)
            matched += min(tokens, child.tokens)
            if child.tokens < tokens:
                break
            node = child
        return matched, path

    def insert(self, prompt: Sequence[Segment], now_s: float) -> list[RadixNode]:
        """Make every segment of `prompt` cached in full; returns the entries on its path.

        The caller accounts for the new tokens (they must fit in the pool first)."""
        node, path = self.root, []
        for seg_id, tokens in prompt:
            child = node.children.get(seg_id)
            if child is None:
                child = RadixNode(seg_id, 0, node)
                node.children[seg_id] = child
            if child.tokens < tokens:
                grow = tokens - child.tokens
                child.tokens = tokens
                self.total_tokens += grow
                if child.ref > 0:
                    self.locked_tokens += grow
            child.last_access_s = now_s
            path.append(child)
            node = child
        return path

    def new_tokens(self, prompt: Sequence[Segment]) -> int:
        """Tokens that `insert(prompt)` would add."""
        node, added = self.root, 0
        for seg_id, tokens in prompt:
            child = node.children.get(seg_id) if node is not None else None
            added += tokens - min(tokens, child.tokens) if child else tokens
            node = child  # type: ignore[assignment]
        return added

    def lock(self, path: Sequence[RadixNode]) -> None:
        for n in path:
            if n.ref == 0:
                self.locked_tokens += n.tokens
            n.ref += 1

    def unlock(self, path: Sequence[RadixNode], now_s: float) -> None:
        for n in path:
            n.ref -= 1
            n.last_access_s = now_s
            if n.ref == 0:
                self.locked_tokens -= n.tokens
            assert n.ref >= 0, "unbalanced radix unlock"

    def evict(self, tokens: int) -> int:
        """Evict unlocked leaves, least recently used first, until `tokens` are freed."""
        heap: list[tuple[float, int, RadixNode]] = []
        for leaf in self._unlocked_leaves():
            heap.append((leaf.last_access_s, self._next(), leaf))
        heapq.heapify(heap)
        freed = 0
        while freed < tokens and heap:
            _, _, leaf = heapq.heappop(heap)
            parent = leaf.parent
            assert parent is not None
            del parent.children[leaf.seg_id]
            freed += leaf.tokens
            self.total_tokens -= leaf.tokens
            if parent is not self.root and parent.ref == 0 and not parent.children:
                heapq.heappush(heap, (parent.last_access_s, self._next(), parent))
        return freed

    def _unlocked_leaves(self) -> list[RadixNode]:
        out, stack = [], list(self.root.children.values())
        while stack:
            n = stack.pop()
            if n.children:
                stack.extend(n.children.values())
            elif n.ref == 0:
                out.append(n)
        return out

    def _next(self) -> int:
        self._seq += 1
        return self._seq
