"""What search-and-learn's three searches share (`huggingface/search-and-learn`, `src/sal/`).

- A path's score aggregates the PRM's score of each of its steps, `last`, `min` or `prod`
  (`utils/score.py#L33-43`, the strategy `config.py#L60` names). The PRM scores a whole
  completion, one score a step (`models/reward_models.py#L104-138`); a step's reward here is
  that score, so a path's scores are its nodes' rewards, root's child first.
- A solution generated *to the end*: one sampling call with no step delimiter, up to
  `max_tokens` (2048, `config.py#L59`). A step tree holds it as a chain of steps, each the first
  child of the one before, ended by an answer, the model's end of text, an empty step, or the
  `max_tokens` the chain may spend. Chains go on independently (`Need.wait="any"`) and are
  scored at the end, as one sampling call of many completions is.
- The level-synchronous skeleton beam search and DVTS share: the level being generated and
  the likelihood that a scored candidate survives a cut its unscored rivals still take part in
  (their predictors).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal, get_args

from spex.shared.core.search.base import Need, Program, SearchAlgorithm, SearchConfig, SpecView
from spex.shared.core.tree import Node, Tree

__all__ = [
    "AGGREGATIONS",
    "Aggregation",
    "LevelSynchronous",
    "aggregate",
    "check_aggregation",
    "ends",
    "path_score",
    "survival",
    "to_the_end",
]

Aggregation = Literal["last", "min", "prod"]
AGGREGATIONS: tuple[Aggregation, ...] = get_args(Aggregation)
LEAST_LIKELY = 0.02  # a prediction less likely than this is not offered


def aggregate(scores: Sequence[float], how: str) -> float:
    """search-and-learn's `aggregate_scores` (`utils/score.py#L33-43`)."""
    if how == "min":
        return min(scores)
    if how == "prod":
        return math.prod(scores)
    if how == "last":
        return scores[-1]
    raise ValueError(f"agg_strategy must be one of {', '.join(AGGREGATIONS)}, not {how!r}")


def check_aggregation(how: str) -> None:
    if how not in AGGREGATIONS:
        raise ValueError(f"agg_strategy must be one of {', '.join(AGGREGATIONS)}, not {how!r}")


def path_score(node: Node, how: str) -> float:
    """The aggregate of the rewards of the steps from the root's child down to `node`."""
    return aggregate([n.reward or 0.0 for n in node.path()], how)


def ends(node: Node) -> bool:
    """A generated step after which its path has nothing more: an answer or the end of text
    (`Node.terminal`), or an empty step (`beam_search.py#L125-131`)."""
    return node.terminal or node.tokens == 0


def to_the_end(starts: Sequence[Node], tree: Tree, max_tokens: int) -> Program:
    """Generate each of `starts` and its path on to its end, then wait for every step's score;
    returns each chain's last step, in the order of `starts`. A chain ends at `ends`, or once
    it has spent `max_tokens` (the one sampling call's cap)."""
    tips, spent_from = list(starts), [s.parent.cum_tokens if s.parent else 0 for s in starts]
    every = list(starts)
    while True:
        going = [i for i, tip in enumerate(tips) if not tip.generated]
        if not going:
            break
        yield Need([tips[i] for i in going], scored=False, wait="any")
        for i in going:
            tip = tips[i]
            if tip.generated and not ends(tip) and tip.cum_tokens - spent_from[i] < max_tokens:
                tips[i] = tree.child(tip, 0)
                every.append(tips[i])
    yield Need(every, scored=True)
    return tips


def survival(beaten_by: int, scored: int, unscored: int, keep: int) -> float:
    """The probability that a scored candidate is among the `keep` best of its cut, when
    `beaten_by` of the `scored` other scored candidates beat it and `unscored` are still to be
    scored. Scores arrive in an order that says nothing of them (a step's length), so the
    candidates are exchangeable: where the unscored fall among the scored is a Pólya urn, and
    the chance that j of them beat it is C(r+j, j)·C(k−r−1+u−j, u−j) / C(k+u, u), with r =
    `beaten_by`, k the scored counting it, u = `unscored`."""
    if beaten_by >= keep:
        return 0.0
    if unscored <= 0:
        return 1.0
    r, k, u = beaten_by, scored + 1, unscored
    ways = math.comb(k + u, u)
    return (
        sum(
            math.comb(r + j, j) * math.comb(k - r - 1 + u - j, u - j) for j in range(min(u, keep - 1 - r) + 1)
        )
        / ways
    )


class LevelSynchronous(SearchAlgorithm):
    """A search that grows every branch one step a round and waits for the whole round (the
    reference's one sampling call and one PRM call an iteration): beam search and DVTS.

    Predictions live while the level they grow from is undecided, as REBASE's do; `predict`
    records each predicted node's likelihood for `spec_likelihood`."""

    family = "bfs"
    default_selection = "weighted"

    def __init__(self, tree: Tree, config: SearchConfig) -> None:
        super().__init__(tree, config)
        self.pending: list[Node] = []  # the round being generated (empty while it ends a chain)
        self._likely: dict[str, float] = {}  # predicted node -> its prior

    def spec_likelihood(self, node: Node) -> float:
        return self._likely.get(node.id, 0.0)

    @classmethod
    def spec_saving(cls, sharing: int) -> float:
        """A round waits on its slowest node, as a REBASE level does (`LevelSearch.spec_saving`)."""
        return 1.0 / math.sqrt(max(1, sharing))

    def spec_alive(self, node: Node) -> bool:
        """A speculative node lives while its nearest tree ancestor is in the pending round or
        deeper (a speculative chain under it)."""
        if not self.pending:
            return False
        anc = node.parent
        while anc is not None and anc.id not in self.tree.nodes:
            anc = anc.parent
        return anc is not None and anc.depth >= self.pending[0].depth

    def offer(self, view: SpecView, likely: list[tuple[Node, float]], k: int) -> list[Node]:
        """The likeliest `k` of (node, likelihood) pairs that are neither generated nor in
        flight, recording each one's likelihood; a node given twice keeps the larger."""
        best: dict[str, tuple[Node, float]] = {}
        for node, p in likely:
            if p >= LEAST_LIKELY and p > best.get(node.id, (node, -1.0))[1]:
                best[node.id] = (node, p)
        ranked = sorted(best.values(), key=lambda pair: (-pair[1], pair[0].depth, pair[0].index))
        out = []
        for node, p in ranked:
            self._likely[node.id] = p
            if not node.generated and not view.busy(node):
                out.append(node)
                if len(out) >= k:
                    break
        return out
