"""Best-of-N, as search-and-learn runs it (`huggingface/search-and-learn:
src/sal/search/best_of_n.py`; defaults `src/sal/config.py#L52-60`).

N whole solutions are sampled in one call, each up to `max_tokens` (`#L42-61`), and only then
does the PRM score them, every step of each (`#L84-87`). In a step tree a whole solution is a
chain: solution i starts at the question's child i and goes on, each step the first child of
the one before, to its end (`sal.to_the_end`: an answer, the end of text, an empty step, or
`max_tokens` spent). The chains go on independently — nothing waits for a reward, nor for
another chain's step — and are scored as they come; the search ends when every step is
scored. The answer is chosen among the N solutions by the selection asked for, each weighing
its path's aggregated score (`#L89-90` picks the best).

There is no reward barrier here, so nothing to speculate past: the search predicts nothing and
runs with SPEX as it runs without.
"""

from __future__ import annotations

from dataclasses import dataclass

from spex.shared.core.search.base import Program, SearchAlgorithm, SearchConfig, apply_params, register
from spex.shared.core.search.sal import check_aggregation, path_score, to_the_end
from spex.shared.core.tree import Node, Tree

__all__ = ["BestOfN", "BestOfNParams"]


@dataclass(frozen=True)
class BestOfNParams:
    agg_strategy: str = "last"  # last, min or prod: a solution's weight (config.py#L60)
    max_tokens: int = 2048  # what one solution may spend (config.py#L59)


@register
class BestOfN(SearchAlgorithm):
    name = "best_of_n"
    family = "bfs"  # whole solutions, steps of the breadth-first searches' lengths
    default_selection = "weighted"
    parameters = BestOfNParams

    def __init__(self, tree: Tree, config: SearchConfig) -> None:
        super().__init__(tree, config)
        p: BestOfNParams = apply_params(BestOfNParams(), config.params)
        check_aggregation(p.agg_strategy)
        if p.max_tokens < 1:
            raise ValueError("max_tokens must be at least 1")
        self.params = p

    def answer_weight(self, node: Node) -> float:
        return path_score(node, self.params.agg_strategy)

    def run(self) -> Program:
        starts = [self.tree.child(self.tree.root, i) for i in range(self.config.target)]
        return (yield from to_the_end(starts, self.tree, self.params.max_tokens))
