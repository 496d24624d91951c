"""Deterministic identities, seeds and random draws.

Every node of a search tree has an identity derived from its parent's identity, its child
index and its action, so the same node always has the same id and sampling seed whatever
order work happens in. Every random choice the search makes is derived the same way from
(seed, query, node, rollout) instead of being drawn from a shared RNG stream: that is what
lets speculation precompute the search's future work without changing it.
"""

from __future__ import annotations

import hashlib
import struct

__all__ = ["root_id", "child_id", "node_seed", "derived_uniform", "derived_int", "digest"]

_ID_BYTES = 8  # 64-bit ids, printed as 16 hex characters


def _hash(*parts: object) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        b = str(part).encode()
        h.update(struct.pack("<I", len(b)))
        h.update(b)
    return h.digest()


def root_id(query_id: str) -> str:
    """Id of a query's root node (the question)."""
    return _hash("root", query_id)[:_ID_BYTES].hex()


def child_id(parent_id: str, index: int, action: str) -> str:
    """Id of child `index` of `parent_id` produced by `action`."""
    return _hash("child", parent_id, index, action)[:_ID_BYTES].hex()


def node_seed(seed: int, node_id: str) -> int:
    """Per-node sampling seed (a 31-bit int, as engines such as SGLang accept)."""
    return int.from_bytes(_hash("seed", seed, node_id)[:4], "little") & 0x7FFFFFFF


def derived_uniform(*key: object) -> float:
    """A uniform draw in [0, 1) that depends only on `key`."""
    return int.from_bytes(_hash("u", *key)[:7], "little") / float(1 << 56)


def derived_int(n: int, *key: object) -> int:
    """A uniform integer in [0, n) that depends only on `key`."""
    if n <= 0:
        raise ValueError("n must be positive")
    return min(int(derived_uniform(*key) * n), n - 1)


def digest(*parts: object) -> str:
    """Stable hex digest of `parts` (used for trees_digest)."""
    return _hash("digest", *parts).hex()
