"""The look-ahead predictor: speculation derived for any search, from the search itself.

A search is a program (`spex.shared.core.search.base`), and a Python generator cannot be
copied, so the search is *replayed*: a fresh instance of its class, over a shadow tree with
the real tree's query id and seed (the same node ids, the same derived random draws), is run
from the start. Every node it asks for is filled in from what the query knows — the real
tree's nodes and the speculative cache's generated handles — until it reaches what is not
known yet; from there on each unknown result is *guessed*:

- a pending reward is drawn from what the node's siblings and parent scored;
- a generation in flight, or not issued, is copied from a known peer (a sibling, else a node
  of the same depth, else its parent: its length, whether it ended in an answer, its reward).

Each draw follows the shadow search some way past its first guess (`LookaheadParams`), and
records the nodes it asks for that could be generated now: neither generated nor in flight,
with a generated parent. Ranked by how many draws ask for them, these are the prediction; the fraction of
draws that ask is the prior the cost-aware controller prices (`roofline.admission`). A draw's
guesses are derived from (seed, query, node, draw), so equal runs predict equally.

Lossless by construction: the real search never sees the shadow's guesses; speculation only
decides what to generate ahead, and the machine serves results by node identity.

A replay runs the search's whole history again, once per draw, so it costs the search's own
work times the draws: it is remembered until the query learns something (`SpecView.events`).
"""

from __future__ import annotations

from dataclasses import dataclass

from spex.shared.core.lookahead_replay import Bounds, Draw, Guesser, Known, Memo, ShadowTree, replay
from spex.shared.core.search.base import SearchAlgorithm, SpecView
from spex.shared.core.tree import Node, Tree

__all__ = ["LookaheadParams", "LookaheadPredictor"]

UNKNOWN_PRIOR = 0.25  # a node no replay asked for (the machine asks only for what was offered)


@dataclass(frozen=True)
class LookaheadParams:
    draws: int = 4  # guessed futures per prediction
    # A draw for the prediction stops once it has offered `max_candidates` nodes, followed the
    # search `max_steps` requests past its first guess, or `max_idle` requests in a row out of
    # reach (every node a guess's child: nothing there can be offered; a breadth-first search
    # never comes back, so one such request ends it); one for `spec_alive` runs to the
    # search's end, or to `max_guessed` guessed nodes (the work bound).
    max_candidates: int = 32
    max_steps: int = 32
    max_idle: int = 6
    max_guessed: int = 4096


class LookaheadPredictor:
    """A `Predictor` for any `SearchAlgorithm`, by replaying it ahead under guessed results."""

    def __init__(self, algorithm: SearchAlgorithm, params: LookaheadParams | None = None) -> None:
        if params is not None and params.draws < 1:
            raise ValueError(f"draws: at least 1, not {params.draws}")
        self.algorithm = algorithm
        self.params = params or LookaheadParams()
        self._view: SpecView | None = None
        self._version = -1  # the view's version the prediction is of
        self._ranked: list[Node] = []
        self._likely: dict[str, float] = {}
        self._distance: dict[str, int] = {}
        self._short: list[Draw] = []  # the prediction's draws
        self._long: list[Draw] | None = None  # the same draws run to the end (`spec_alive`)
        self._memo = Memo(limit=4 * self.params.max_guessed)  # what replays name again and again
        self.predictions = 0  # states of the query predicted (each `draws` replays, and maybe as many more)
        self.replays = 0  # draws replayed

    # ------------------------------------------------------------------ the Predictor protocol
    def predict(self, view: SpecView, k: int) -> list[Node]:
        self._refresh(view)
        out = [n for n in self._ranked if not n.generated and not view.busy(n)]
        return out[:k]

    def spec_alive(self, node: Node) -> bool:
        """A speculative node lives while the search may still ask for it (`_verdict`), or
        while a draw stopped at the work bound before the search's end. The prediction's
        draws answer first; where they cannot tell, the same draws run on to the end."""
        if self._view is None:
            return True  # nothing predicted yet, so nothing to judge by
        self._refresh(self._view)
        verdict = _verdict(self._short, node, self.algorithm.tree)
        if verdict is None:
            if self._long is None:
                self._long = self._draws(self._view, short=False)
            verdict = _verdict(self._long, node, self.algorithm.tree)
        return verdict is not False

    def spec_distance(self, node: Node) -> int:
        """The search's requests between the one it waits on and the one that asks for `node`
        (1: the next), the nearest over the draws."""
        return self._distance.get(node.id, 1)

    def spec_likelihood(self, node: Node) -> float:
        """The fraction of draws that ask for `node`."""
        return self._likely.get(node.id, UNKNOWN_PRIOR)

    # ------------------------------------------------------------------ the replays
    def _refresh(self, view: SpecView) -> None:
        if view is self._view and view.events == self._version:
            return
        self._view, self._version = view, view.events
        self.predictions += 1
        self._memo.trim()
        self._short, self._long = self._draws(view, short=True), None
        self._rank(self._short)

    def _draws(self, view: SpecView, short: bool) -> list[Draw]:
        known = Known(self.algorithm.tree)
        self.replays += self.params.draws
        return [self._draw(view, known, d, short) for d in range(self.params.draws)]

    def _rank(self, draws: list[Draw]) -> None:
        count: dict[str, int] = {}
        place: dict[str, float] = {}
        ahead: dict[str, int] = {}
        node_of: dict[str, Node] = {}
        for draw in draws:
            for i, (node, steps) in enumerate(draw.offers):
                count[node.id] = count.get(node.id, 0) + 1
                place[node.id] = place.get(node.id, 0.0) + i
                ahead[node.id] = min(steps, ahead.get(node.id, steps))
                node_of[node.id] = node
        n = len(draws)
        # Most draws first; among equals, the one asked for sooner (its mean place).
        order = sorted(count, key=lambda c: (-count[c], place[c] / count[c]))
        self._ranked = [node_of[c] for c in order]
        self._likely = {c: count[c] / n for c in order}
        self._distance = ahead

    def _draw(self, view: SpecView, known: Known, draw: int, short: bool) -> Draw:
        """One guessed future: the search replayed from its start over a shadow tree."""
        tree, p = self.algorithm.tree, self.params
        search = type(self.algorithm)(ShadowTree(tree, self._memo), self.algorithm.config)
        first_step = max(1, self.algorithm.config.max_step_tokens // 2)
        guesser = Guesser(known, self._memo, tree.seed, tree.query_id, draw, first_step)
        bounds = Bounds(p.max_candidates, p.max_steps, p.max_idle, p.max_guessed)
        return replay(search, view, guesser, bounds, short)


def _verdict(draws: list[Draw], node: Node, tree: Tree) -> bool | None:
    """Whether the search may still ask for speculative `node` (True), cannot (False), or the
    draws cannot tell (None). It may while some draw asks for it, or asks, past its first
    guess, for a node as shallow as a new child of `node`'s nearest tree ancestor: that
    ancestor may still get children. A search that only asks deeper nodes than that to its
    end in every draw has left the ancestor for good (a level search once it decided the
    ancestor's width; a depth-first one in its last rollout, below it)."""
    if any(node.id in d.asked for d in draws):
        return True
    anc = node.parent
    while anc is not None and anc.id not in tree.nodes:
        anc = anc.parent
    reach = (anc.depth if anc is not None else -1) + 1
    if any(d.shallowest is not None and d.shallowest <= reach for d in draws):
        return True
    return False if all(d.complete for d in draws) else None
