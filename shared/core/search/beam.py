"""Beam search with a PRM, as search-and-learn runs it (`huggingface/search-and-learn:
src/sal/search/beam_search.py`; defaults `src/sal/config.py#L52-69`).

N beams (the target) start at the question. Each iteration (`#L65-174`):

1. *Duplication* (`#L71-84`): when the active beams are not N, the list of active beams is
   repeated `N // len + 1` times and cut to N, so each survivor is copied in turn — with N/M
   survivors, M copies each (M the beam width).
2. Every active beam grows one step (`#L95-114`): a copy of a beam is a child of the beam's
   last step, the k-th copy its child k. The last iteration generates each beam to the end
   instead (`#L86-93`; `sal.to_the_end`).
3. A beam whose step ends its path (an answer, the end of text, an empty step: `#L125-131`)
   is completed and set aside.
4. The PRM scores every path; a path's score aggregates its steps' (`last`, `min` or `prod`,
   `#L135-143`).
5. Optionally, beams whose whole text repeats an earlier beam's are dropped (`filter_duplicates`,
   `#L155-165`).
6. The N/M best remaining beams by that score stay active, the rest are pruned (`#L167-174`):
   `np.argsort(scores)[-(N // M):]`. Ties go as a stable ascending sort leaves them — the later
   beam in the list is kept — which is what numpy's argsort does on up to 16 scores (an
   insertion sort); a vectorised sort on a longer list may order ties otherwise, and the
   reference depends on it nowhere else.
7. The search stops when no beam is active, or after `num_iterations`.

The completed beams, the first N (or the N best with `sort_completed`, `#L176-184`), repeated
to N when fewer (`#L186-195`), are the solutions; the answer is chosen among them by the
selection asked for, each weighing its path's aggregated score (`#L211-217` picks the best).

Deliberate differences: the reference keeps every beam when N < M (its `[-0:]`), which is
refused here; with no completed beam at all it fails, where this returns no answer. Its
`lookahead` (greedy steps scored ahead of a candidate, default 0) is not taken.
"""

from __future__ import annotations

from collections import Counter
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

__all__ = ["BeamParams", "BeamSearch", "keep_best"]


@dataclass(frozen=True)
class BeamParams:
    beam_width: int = 4  # M (config.py#L63)
    num_iterations: int = 40  # rounds; the last generates to the end (config.py#L64)
    agg_strategy: str = "last"  # last, min or prod (config.py#L60)
    filter_duplicates: bool = False  # config.py#L68 (its recipes set it)
    sort_completed: bool = False  # config.py#L69
    max_tokens: int = 2048  # what the last round's generation to the end may spend (config.py#L59)
    spec_lookahead: int = 2  # rounds speculation looks ahead


def keep_best(scores: list[float], keep: int) -> list[int]:
    """Positions of the `keep` best scores, in list order: the last `keep` of a stable
    ascending sort (`np.argsort(scores)[-keep:]`, ties to the later position)."""
    order = sorted(range(len(scores)), key=lambda i: scores[i])
    return sorted(order[-keep:]) if keep > 0 else []


def _beats(a: tuple[int, float], b: tuple[int, float]) -> bool:
    """Candidate a (position, score) is ranked above b by `keep_best`."""
    return a[1] > b[1] or (a[1] == b[1] and a[0] > b[0])


@register
class BeamSearch(LevelSynchronous):
    name = "beam"
    parameters = BeamParams

    def __init__(self, tree: Tree, config: SearchConfig) -> None:
        super().__init__(tree, config)
        p: BeamParams = apply_params(BeamParams(), config.params)
        check_aggregation(p.agg_strategy)
        if p.beam_width < 1 or p.num_iterations < 1 or p.max_tokens < 1 or p.spec_lookahead < 0:
            raise ValueError("beam_width, num_iterations and max_tokens must be at least 1")
        if config.target < p.beam_width:
            raise ValueError(f"the target N ({config.target}) must be at least beam_width M ({p.beam_width})")
        self.params = p
        self.keep = config.target // p.beam_width  # beams that stay active each round
        self.round = 0

    def answer_weight(self, node: Node) -> float:
        return path_score(node, self.params.agg_strategy)

    def run(self) -> Program:
        p, n = self.params, self.config.target
        active: list[Node] = [self.tree.root] * n
        completed: list[Node] = []
        for i in range(p.num_iterations):
            self.round = i
            if len(active) != n:
                active = (active * (n // len(active) + 1))[:n]
            level = self._grow(active)
            if i == p.num_iterations - 1:
                self.pending = []
                completed.extend((yield from to_the_end(level, self.tree, p.max_tokens)))
                break
            self.pending = level
            yield Need(level, scored=True)
            completed.extend(b for b in level if ends(b))
            active = [b for b in level if not ends(b)]
            if not active:
                break
            if p.filter_duplicates:
                firsts: dict[str, Node] = {}
                for b in active:
                    firsts.setdefault("".join(s.text for s in b.path()), b)
                active = list(firsts.values())
            scores = [path_score(b, p.agg_strategy) for b in active]
            active = [active[i] for i in keep_best(scores, self.keep)]
        self.pending = []
        if p.sort_completed:
            completed = sorted(completed, key=self.answer_weight, reverse=True)
        completed = completed[:n]
        if completed and len(completed) != n:
            completed = (completed * (n // len(completed) + 1))[:n]
        return completed

    def _grow(self, beams: list[Node]) -> list[Node]:
        """One step for each beam in the list: the k-th copy of a beam grows its child k."""
        copies: Counter[str] = Counter()
        level = []
        for beam in beams:
            level.append(self.tree.child(beam, copies[beam.id]))
            copies[beam.id] += 1
        return level

    def predict(self, view: SpecView, k: int) -> list[Node]:
        """The likely survivors of the pending round, grown early (`LevelSearch.predict` does
        the same for REBASE): a scored beam stays active unless `keep` others beat it, and
        each rival still unscored beats it as often as the scored ones do (`sal.survival`); a
        likely survivor's M children are asked for next, each as likely as it survives. Then
        the same over the speculative children already scored, `spec_lookahead` rounds on,
        never past the last round's first steps."""
        p, n = self.params, self.config.target
        likely: list[tuple[Node, float]] = []
        frontier = [(b, 1.0) for b in self.pending]
        for ahead in range(p.spec_lookahead):
            if not frontier or self.round + ahead + 1 >= p.num_iterations:
                break
            known = [(b, q) for b, q in frontier if b.generated and b.scored]
            ranked = [(i, path_score(b, p.agg_strategy)) for i, (b, _) in enumerate(known)]
            grown: list[tuple[Node, float]] = []
            copies = n // self.keep
            for i, (beam, q) in enumerate(known):
                if ends(beam):
                    continue
                rivals = [r for r in ranked if r[0] != i and not ends(known[r[0]][0])]
                beaten = sum(1 for r in rivals if _beats(r, ranked[i]))
                alive = q * survival(beaten, len(rivals), n - len(known), self.keep)
                grown.extend((view.child(beam, j), alive) for j in range(copies))
            # The next round's list: first copies of every survivor, then second copies, ...
            grown.sort(key=lambda pair: pair[0].index)
            likely.extend(grown)
            frontier = grown
        return self.offer(view, likely, k)
