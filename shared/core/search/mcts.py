"""Statistics and selection rules shared by the MCTS family."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from spex.shared.core.ids import derived_int
from spex.shared.core.tree import Node

__all__ = ["argmax_tiebreak", "uct_rstar", "uct_rest"]

UNVISITED_UCT = 999.0  # rStar: an unvisited child scores 999 (MCTS_backbone.py#L181-190)


def uct_rstar(q: float, n: int, n_parent: int, c: float) -> float:
    """rStar's UCT: Q/N + c·sqrt(ln N_parent / N)."""
    if n == 0:
        return UNVISITED_UCT
    return q / n + c * math.sqrt(math.log(max(n_parent, 1)) / n)


def uct_rest(v: float, n: int, n_parent: int, c: float, inf: float) -> float:
    """ReST-MCTS*'s score: V + c·sqrt(2·ln N_parent / N), or V + inf when unvisited."""
    if n == 0:
        return v + inf
    return v + c * math.sqrt(2.0 * math.log(max(n_parent, 1)) / n)


def argmax_tiebreak(items: Sequence[Node], score: Callable[[Node], float], *key: object) -> Node:
    """The best item; ties broken by a draw derived from `key` (never a shared RNG)."""
    scores = [score(n) for n in items]
    best = max(scores)
    tied = [n for n, s in zip(items, scores, strict=True) if s >= best - 1e-12]
    return tied[derived_int(len(tied), *key)] if len(tied) > 1 else tied[0]
