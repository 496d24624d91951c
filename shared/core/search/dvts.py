"""DVTS, diverse verifier tree search, as search-and-learn runs it (`huggingface/search-and-learn:
src/sal/search/diverse_verifier_tree_search.py`; defaults `src/sal/config.py#L52-75`).

N/M independent subtrees (`config.py#L72-75`: N must be a multiple of the beam width M), each
started at the question (`#L45-62`). Each iteration, every subtree still going (`#L64-68`):

1. grows M candidate steps from its last step (`#L96-99`) — subtree k's first candidates are
   the question's children kM … kM+M−1, later ones its last step's children 0 … M−1; the last
   iteration generates each candidate to the end instead (`#L70-77`; `sal.to_the_end`);
2. the PRM scores every candidate's path, aggregated `last`, `min` or `prod`, and the subtree
   takes the best candidate, the first of equal ones (`np.argmax`, `#L117-126`);
3. a subtree whose chosen step ends its path (the end of text, an empty step, `#L127-132`, or
   a boxed answer, `#L134-137`) stops.

All subtrees grow in one round and wait for it together, as the reference's one sampling call
and one PRM call an iteration do. The solutions are the M candidates of each subtree's last
round (`#L139-159`), N in all; the answer is chosen among them by the selection asked for, each
weighing its path's aggregated score (`#L176-185` picks the best). The reference's `lookahead`
(greedy steps scored ahead of a candidate, default 0) is not taken.
"""

from __future__ import annotations

from dataclasses import dataclass

from spex.shared.core.search.base import Need, Program, SearchConfig, SpecView, apply_params, register
from spex.shared.core.search.sal import (
    LevelSynchronous,
    check_aggregation,
    ends,
    path_score,
    survival,
    to_the_end,
)
from spex.shared.core.tree import Node, Tree

__all__ = ["Dvts", "DvtsParams", "first_best"]


@dataclass(frozen=True)
class DvtsParams:
    beam_width: int = 4  # M: candidates a subtree grows each round (config.py#L63)
    num_iterations: int = 40  # rounds; the last generates to the end (config.py#L64)
    agg_strategy: str = "last"  # last, min or prod (config.py#L60)
    max_tokens: int = 2048  # what the last round's generation to the end may spend (#L36, #L74)
    spec_lookahead: int = 3  # rounds speculation looks ahead


def first_best(scores: list[float]) -> int:
    """The position of the best score, the first of equal ones (`np.argmax`)."""
    return max(range(len(scores)), key=lambda i: (scores[i], -i))


@register
class Dvts(LevelSynchronous):
    name = "dvts"
    parameters = DvtsParams

    def __init__(self, tree: Tree, config: SearchConfig) -> None:
        super().__init__(tree, config)
        p: DvtsParams = apply_params(DvtsParams(), config.params)
        check_aggregation(p.agg_strategy)
        if p.beam_width < 1 or p.num_iterations < 1 or p.max_tokens < 1 or p.spec_lookahead < 0:
            raise ValueError("beam_width, num_iterations and max_tokens must be at least 1")
        if config.target % p.beam_width:
            raise ValueError(
                f"the target N ({config.target}) must be a multiple of beam_width M ({p.beam_width})"
            )
        self.params = p
        self.subtrees = config.target // p.beam_width
        self.round = 0
        self.groups: list[list[Node]] = []  # the pending round's candidates, subtree by subtree

    def answer_weight(self, node: Node) -> float:
        return path_score(node, self.params.agg_strategy)

    def candidates(self, subtree: int, tip: Node) -> list[Node]:
        """The M steps subtree `subtree` grows from its last step `tip`."""
        m = self.params.beam_width
        first = subtree * m if tip is self.tree.root else 0
        return [self.tree.child(tip, first + j) for j in range(m)]

    def run(self) -> Program:
        p = self.params
        tips = [self.tree.root] * self.subtrees
        going = list(range(self.subtrees))
        last_round: list[list[Node]] = [[] for _ in range(self.subtrees)]
        for i in range(p.num_iterations):
            self.round = i
            if not going:
                break
            groups = [self.candidates(t, tips[t]) for t in going]
            level = [c for group in groups for c in group]
            if i == p.num_iterations - 1:
                self.pending, self.groups = [], []
                ends_of = yield from to_the_end(level, self.tree, p.max_tokens)
                m = p.beam_width
                groups = [ends_of[g * m : (g + 1) * m] for g in range(len(going))]
            else:
                self.pending, self.groups = level, groups
                yield Need(level, scored=True)
            for t, group in zip(going, groups, strict=True):
                last_round[t] = group
                tips[t] = group[first_best([path_score(c, p.agg_strategy) for c in group])]
            going = [t for t in going if not ends(tips[t])]
        self.pending, self.groups = [], []
        return [c for group in last_round for c in group]

    def predict(self, view: SpecView, k: int) -> list[Node]:
        """Each subtree's likely choice, grown early: a scored candidate is chosen unless a
        sibling beats it, and each sibling still unscored beats it as often as the scored ones
        do (`sal.survival` with one kept); once all M are scored the choice is certain, and its
        M children are what the subtree asks for next. Then the same among the speculative
        children already scored, `spec_lookahead` rounds on, never past the last round's
        first steps."""
        p, m = self.params, self.params.beam_width
        likely: list[tuple[Node, float]] = []
        frontier = [(group, 1.0) for group in self.groups]
        for ahead in range(p.spec_lookahead):
            if not frontier or self.round + ahead + 1 >= p.num_iterations:
                break
            grown: list[tuple[list[Node], float]] = []
            for group, q in frontier:
                scored = [(i, c) for i, c in enumerate(group) if c.generated and c.scored]
                known = [(i, path_score(c, p.agg_strategy)) for i, c in scored]
                for i, score in known:
                    chosen = group[i]
                    if ends(chosen):
                        continue
                    beaten = sum(1 for j, s in known if j != i and (s > score or (s == score and j < i)))
                    odds = q * survival(beaten, len(known) - 1, m - len(known), 1)
                    kids = [view.child(chosen, j) for j in range(m)]
                    likely.extend((kid, odds) for kid in kids)
                    grown.append((kids, odds))
            frontier = grown
        return self.offer(view, likely, k)
