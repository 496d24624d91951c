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

from spex.shared.core.search.base import (
    Need,
    Program,
    SearchAlgorithm,
    SearchConfig,
    SpecView,
    apply_params,
    register,
)
from spex.shared.core.tree import Node, Tree

__all__ = ["Rebase", "RebaseParams", "ceil_softmax_widths"]


@dataclass(frozen=True)
class RebaseParams:
    softmax_temperature: float = 0.2  # T_b (hype-parameters/rebase.yaml)
    max_depth: int = 25  # the deepest level grown
    max_tokens: int = 1024  # cumulative generated tokens on a path
    # Speculation (SPEX `bfs_async.py`): provisional width = ceil(scale · finished candidates),
    # looking `spec_lookahead` levels ahead, shallow levels first.
    spec_scale: float = 1.2  # speculation: provisional width per finished candidate
    spec_lookahead: int = 3  # speculation: levels looked ahead


def ceil_softmax_widths(rewards: Sequence[float], width: int, temperature: float) -> list[int]:
    """Widths k_i (in the input order) by REBASE's sequential-ceil softmax.

    Exact arithmetic over the float exponentials, so the last candidate takes exactly what is
    left and Σ k_i == width whatever the rounding. Each float is m · 2^-p exactly; scaled by
    the largest 2^p they become integers, and the sequence of ceilings is computed on those —
    the same numbers as rational arithmetic, without its gcd at every step (tested against a
    brute-force re-derivation in Fractions)."""
    if width < 0:
        raise ValueError("width must be non-negative")
    if not rewards:
        return []
    top = max(rewards)
    ratios = [math.exp((r - top) / temperature).as_integer_ratio() for r in rewards]  # shift: same ratios
    scale = max(d for _, d in ratios)  # a power of two: every denominator divides it
    e = [n * (scale // d) for n, d in ratios]
    order = sorted(range(len(rewards)), key=lambda i: (-rewards[i], i))
    remaining_w, remaining_s = width, sum(e)
    widths = [0] * len(rewards)
    for i in order:
        if remaining_w <= 0 or remaining_s <= 0:
            break
        k = -(-remaining_w * e[i] // remaining_s)  # ceil of an exact quotient
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
        self.pending: list[Node] = []  # the level being generated
        self.pending_remaining = 0  # the width budget that level was given
        self._likely: dict[str, float] = {}  # predicted node -> its prior (`spec_likelihood`)

    def make_params(self, config: SearchConfig) -> RebaseParams:
        return apply_params(RebaseParams(), config.params)  # type: ignore[return-value]

    def widths(self, candidates: list[Node], remaining: int) -> list[int]:
        rewards = [n.reward or 0.0 for n in candidates]
        return ceil_softmax_widths(rewards, remaining, self.params.softmax_temperature)

    def finished(self, node: Node) -> bool:
        return node.terminal or node.cum_tokens >= self.params.max_tokens

    def run(self) -> Program:
        remaining, level, solutions = self.config.target, [self.tree.root], []
        # One pass more than there are levels to grow: the last level grown is examined too (its
        # terminals are solutions; its unfinished nodes are not grown further).
        for depth in range(self.params.max_depth + 1):
            candidates = []
            for node in level:
                if node.parent is not None and self.finished(node):
                    remaining -= 1
                    if node.terminal:
                        solutions.append(node)
                else:
                    candidates.append(node)
            if remaining <= 0 or not candidates or depth == self.params.max_depth:
                break
            children: list[Node] = []
            for node, k in zip(candidates, self.widths(candidates, remaining), strict=True):
                children.extend(self.tree.child(node, i) for i in range(k))
            self.pending, self.pending_remaining = children, remaining
            yield Need(children, scored=True)
            level = children
        self.pending = []
        return solutions

    def predict(self, view: SpecView, k: int) -> list[Node]:
        """Expand the finished-and-scored nodes of the pending level early, with provisional
        widths from the algorithm's own policy (paper §4.2 BFS; `bfs_async.py` `spec_all`):
        width budget ceil(spec_scale · |finished candidates|), split by `widths`; then the
        same over the speculative children already scored, `spec_lookahead` levels deep."""
        out: list[Node] = []
        frontier, remaining = self.pending, self.pending_remaining
        for level in range(self.params.spec_lookahead):
            done = [n for n in frontier if n.generated and n.scored]
            candidates = [n for n in done if not self.finished(n)]
            remaining -= len(done) - len(candidates)
            if remaining <= 0 or not candidates:
                break
            total = min(remaining, math.ceil(self.params.spec_scale * len(candidates)))
            nxt: list[Node] = []
            for node, k_i in zip(candidates, self.widths(candidates, total), strict=True):
                for i in range(k_i):
                    child = view.child(node, i)
                    # The share the provisional width gives child i: a parent's first children
                    # keep their place unless its width shrinks below them; a level further
                    # ahead halves it.
                    self._likely[child.id] = (k_i - i) / (k_i + 1) * 0.5**level
                    nxt.append(child)
            # Likeliest first: child 0 of every parent before child 1 of any, best-scored
            # parents first (a parent keeps its first children whenever its width stays > 0).
            nxt.sort(key=lambda n: (n.index, -(n.parent.reward or 0.0) if n.parent else 0.0))
            out.extend(n for n in nxt if not n.generated and not view.busy(n))
            if len(out) >= k:
                break
            frontier = nxt
        return out[:k]

    def spec_likelihood(self, node: Node) -> float:
        return self._likely.get(node.id, 0.25)

    @classmethod
    def spec_saving(cls, sharing: int) -> float:
        """A level waits on its slowest node, so a hit shortens it only when the level's
        speculation covers that node too: all but certain for a query alone on its engine
        (its next level is a few nodes), less the more queries share the engine's room. The
        rule, 1/√sharing, is fitted, not derived: counted whole at any load, the throughput
        objective filled the simulated A6000 past the point where ETS-16 at B=16 ran slower
        than without speculation; counted half at any load, it left REBASE-4 alone on a CPU
        engine far below what whole gave."""
        return 1.0 / math.sqrt(max(1, sharing))

    def spec_alive(self, node: Node) -> bool:
        """A speculative node lives while its nearest tree ancestor's children are undecided:
        that ancestor is in the pending level (or deeper, as a speculative chain)."""
        if not self.pending:
            return False
        anc = node.parent
        while anc is not None and anc.id not in self.tree.nodes:
            anc = anc.parent
        return anc is not None and anc.depth >= self.pending[0].depth


@register
class Rebase(LevelSearch):
    name = "rebase"
    parameters = RebaseParams
