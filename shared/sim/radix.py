"""A radix prefix cache over prompt segments, with capacity accounting and LRU eviction.

A prompt in a tree search is the question followed by the steps on the path to a node, so
prompts are keyed by *segments* (one per node: its id and token count) instead of raw token
ids: a child's prompt extends its parent's, exactly the sharing SGLang's RadixAttention finds
token by token. A segment may be cached partially (an aborted request leaves the tokens it
computed); matching stops inside such a segment.

Entries referenced by a running request are locked (`ref > 0`); only unlocked leaves are
evicted, least recently used first (SGLang's default `--radix-eviction-policy lru`), ties in
creation order. Candidates wait in a heap that is kept as entries change (a lazy heap: an
entry is pushed again whenever it is touched, and stale pushes are skipped when popped), so
an eviction costs O(log n) per entry freed rather than a walk of the whole cache.
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
    uid: int = 0  # creation order: the LRU tie-break
    version: int = 0  # bumped on every touch; a heap entry of an older version is stale


class RadixCache:
    def __init__(self) -> None:
        self.root = RadixNode("", 0, None)
        self.total_tokens = 0  # tokens held by every entry
        self.locked_tokens = 0  # tokens held by entries with ref > 0
        self._seq = 0  # creation counter (RadixNode.uid)
        self._heap: list[tuple[float, int, int, RadixNode]] = []  # (last access, uid, version, node)
        self._live = 0  # entries in the cache (to know when the heap is mostly stale)

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
            self._touch(child)
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
                self._seq += 1
                self._live += 1
                child = RadixNode(seg_id, 0, node, uid=self._seq)
                node.children[seg_id] = child
            if child.tokens < tokens:
                grow = tokens - child.tokens
                child.tokens = tokens
                self.total_tokens += grow
                if child.ref > 0:
                    self.locked_tokens += grow
            child.last_access_s = now_s
            self._touch(child)
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
            self._touch(n)

    def evict(self, tokens: int) -> int:
        """Evict unlocked leaves, least recently used first, until `tokens` are freed."""
        freed = 0
        while freed < tokens and self._heap:  # (`_touch` may rebuild the heap: never hold it)
            _, _, version, leaf = heapq.heappop(self._heap)
            if version != leaf.version or leaf.ref or leaf.children or leaf.parent is None:
                continue  # stale: touched, locked, grown or evicted since it was pushed
            parent = leaf.parent
            del parent.children[leaf.seg_id]
            leaf.parent = None
            self._live -= 1
            freed += leaf.tokens
            self.total_tokens -= leaf.tokens
            if parent is not self.root:
                self._touch(parent)  # a leaf now, if nothing else holds it
        return freed

    def _touch(self, node: RadixNode) -> None:
        """`node` changed: queue it for eviction if it is an unlocked leaf now."""
        node.version += 1
        if node.ref == 0 and not node.children:
            heapq.heappush(self._heap, (node.last_access_s, node.uid, node.version, node))
            if len(self._heap) > 4 * self._live + 1024:
                self._rebuild()

    def _rebuild(self) -> None:
        """Drop the stale heap entries: one entry per unlocked leaf."""
        heap, stack = [], list(self.root.children.values())
        while stack:
            n = stack.pop()
            if n.children:
                stack.extend(n.children.values())
            elif n.ref == 0:
                heap.append((n.last_access_s, n.uid, n.version, n))
        heapq.heapify(heap)
        self._heap = heap
