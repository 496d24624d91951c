"""REBASE: reward-balanced search (Wu et al. 2024; `thu-wyz/inference_scaling:rebase.py`).

Level by level: every finished node (an answer, or the cumulative token cap reached) consumes
one unit of the width budget N; the remaining budget is split over the candidates by the
sequential-ceil softmax of their last-step rewards (`rebase.py#L123-142`):

    sort candidates by reward, descending;  e_i = exp(r_i / T_b);  S = Σ e_i;  W = remaining
    for each i in that order:  k_i = ceil(W · e_i / S);  W -= k_i;  S -= e_i

so Σ k_i = remaining exactly and the search returns at most N answers. The token cap is
cumulative over the path (ETS's fix, `ETS rebase.py#L64`): REBASE's own per-step count never
binds, which we take for a bug rather than a behaviour to copy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from shared.search.base import Need, Program, SearchAlgorithm, SearchConfig, apply_params, register
from shared.tree import Node, Tree

__all__ = ["Rebase", "RebaseParams", "ceil_softmax_widths"]


@dataclass(frozen=True)
class RebaseParams:
    softmax_temperature: float = 0.2  # T_b (hype-parameters/rebase.yaml)
    max_depth: int = 25
    max_tokens: int = 1024  # cumulative generated tokens on a path


def ceil_softmax_widths(rewards: Sequence[float], width: int, temperature: float) -> list[int]:
    """Widths k_i (in the input order) by REBASE's sequential-ceil softmax.

    Exact rational arithmetic over the float exponentials, so the last candidate takes
    exactly what is left and Σ k_i == width whatever the rounding."""
    if width < 0:
        raise ValueError("width must be non-negative")
    if not rewards:
        return []
    top = max(rewards)
    e = [Fraction(math.exp((r - top) / temperature)) for r in rewards]  # shift: same ratios
    order = sorted(range(len(rewards)), key=lambda i: (-rewards[i], i))
    remaining_w, remaining_s = Fraction(width), sum(e, Fraction(0))
    widths = [0] * len(rewards)
    for i in order:
        if remaining_w <= 0 or remaining_s <= 0:
            break
        k = math.ceil(remaining_w * e[i] / remaining_s)
        widths[i] = k
        remaining_w -= k
        remaining_s -= e[i]
    return widths


class LevelSearch(SearchAlgorithm):
    """Depth-synchronous search shared by REBASE and ETS; subclasses choose the widths."""

    family = "bfs"
    default_selection = "weighted"  # scripts/evaluate.sh: weighted majority, last-step weight

    def __init__(self, tree: Tree, config: SearchConfig) -> None:
        super().__init__(tree, config)
        self.params = self.make_params(config)

    def make_params(self, config: SearchConfig) -> RebaseParams:
        return apply_params(RebaseParams(), config.params)  # type: ignore[return-value]

    def widths(self, candidates: list[Node], remaining: int) -> list[int]:
        rewards = [n.reward or 0.0 for n in candidates]
        return ceil_softmax_widths(rewards, remaining, self.params.softmax_temperature)

    def finished(self, node: Node) -> bool:
        return node.terminal or node.cum_tokens >= self.params.max_tokens

    def run(self) -> Program:
        remaining, level, solutions = self.config.target, [self.tree.root], []
        for _depth in range(self.params.max_depth):
            candidates = []
            for node in level:
                if node.parent is not None and self.finished(node):
                    remaining -= 1
                    if node.terminal:
                        solutions.append(node)
                else:
                    candidates.append(node)
            if remaining <= 0 or not candidates:
                break
            children: list[Node] = []
            for node, k in zip(candidates, self.widths(candidates, remaining), strict=True):
                children.extend(self.tree.child(node, i) for i in range(k))
            yield Need(children, scored=True)
            level = children
        return solutions

    # --- used by speculation (issue 3) and tests: the level policy without side effects
    def level_widths(self, candidates: list[Node], remaining: int) -> list[int]:
        return self.widths(candidates, remaining)


@register
class Rebase(LevelSearch):
    name = "rebase"
