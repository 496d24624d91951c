"""Text embedders for ETS's semantic clustering.

ETS embeds each candidate's last step with a SentenceTransformer model; nothing here may
download weights, so the default is a cheap deterministic embedder: hashed character
trigram counts, L2-normalised. Identical texts map to identical vectors (cosine distance 0)
and unrelated texts to nearly orthogonal ones. Any callable `list[str] -> ndarray[n, d]`
can be passed instead.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["Embedder", "trigram_embedder"]

Embedder = Callable[[Sequence[str]], np.ndarray]


def trigram_embedder(texts: Sequence[str], dim: int = 256) -> np.ndarray:
    out = np.zeros((len(texts), dim))  # [n, dim]
    for row, text in enumerate(texts):
        padded = f"  {text.lower()}  "
        for i in range(len(padded) - 2):
            h = int.from_bytes(hashlib.blake2b(padded[i : i + 3].encode(), digest_size=4).digest(), "little")
            out[row, h % dim] += 1.0
        norm = np.linalg.norm(out[row])
        if norm > 0:
            out[row] /= norm
    return out
