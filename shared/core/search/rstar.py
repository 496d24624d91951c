"""rStar-MCTS (`microsoft/rStar@rStar-mutualreasoning:run_src/MCTS_backbone.py`), with a PRM.

One rollout = select → expand → simulate → backpropagate, to a terminal node:

- *Select/simulate*: from the root, at each node with child slots not yet generated, pick one
  of them uniformly at random (rStar picks a random unexplored child first, `#L120`) and
  generate it; at a node whose `branch` children all exist, take the UCT-best child,
  ``Q/N + c·sqrt(ln N_parent / N)``, c = 2 (`#L181-190`).
- A node is terminal when it answers, or at `max_depth` (5).
- *Backpropagate*: the terminal's reward (its PRM score, as SPEX runs rStar; 0 for a
  terminal without an answer) is added to Q, and 1 to N, on every node of the path (`#L155-160`).

Children are generated one per selection, so a rollout waits on each step in turn: this is
the depth-first reward barrier the paper describes (a GPU batch of one). Random picks are
derived from (seed, query, node, rollout). The answer is the majority vote over every
solution node in the tree (`eval_src/do_eval.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

from spex.shared.core.ids import derived_int
from spex.shared.core.search.base import (
    Need,
    Program,
    SearchAlgorithm,
    SearchConfig,
    SpecView,
    apply_params,
    register,
)
from spex.shared.core.search.mcts import argmax_tiebreak, uct_rstar
from spex.shared.core.tree import Node, Tree

__all__ = ["Rstar", "RstarParams"]


@dataclass(frozen=True)
class RstarParams:
    exploration: float = 2.0  # mcts_exploration_weight, constant schedule
    max_depth: int = 5  # max_depth_allowed
    branch: int = 3  # one-step-thought samples per node (num_a1_steps)


@register
class Rstar(SearchAlgorithm):
    name = "rstar"
    family = "dfs"
    default_selection = "majority"

    def __init__(self, tree: Tree, config: SearchConfig) -> None:
        super().__init__(tree, config)
        self.params: RstarParams = apply_params(RstarParams(), config.params)  # type: ignore[assignment]
        self.visits: dict[str, int] = {}  # N per node id
        self.value: dict[str, float] = {}  # Q (summed reward) per node id
        self.rollout = 0  # the rollout in progress
        self.path: list[Node] = [tree.root]  # its path so far
        self._tag: dict[str, int] = {}  # speculative node -> the simulated rollout that made it

    def is_leaf(self, node: Node) -> bool:
        return node.terminal or node.depth >= self.params.max_depth

    def choose(
        self, node: Node, rollout: int, kids: list[Node], visits: dict[str, int], value: dict[str, float]
    ) -> tuple[int | None, Node | None]:
        """One selection step below `node` given its existing children `kids`: a random free
        slot to generate (first), or else the UCT-best child. Pure: the search and its
        speculative simulation both call it, on the real or on copied statistics."""
        have = {c.index for c in kids}
        free = [i for i in range(self.params.branch) if i not in have]
        if free:
            return free[derived_int(len(free), self.tree.seed, self.tree.query_id, node.id, rollout)], None
        n_parent, c = visits.get(node.id, 0), self.params.exploration

        def uct(child: Node) -> float:
            return uct_rstar(value.get(child.id, 0.0), visits.get(child.id, 0), n_parent, c)

        return None, argmax_tiebreak(kids, uct, self.tree.seed, self.tree.query_id, node.id, rollout, "uct")

    def step(self, node: Node, rollout: int) -> tuple[Node, bool]:
        """The next node of rollout `rollout` below `node`; True if it must be generated."""
        slot, child = self.choose(node, rollout, node.kids(), self.visits, self.value)
        if slot is not None:
            return self.tree.child(node, slot), True
        assert child is not None
        return child, False

    def backpropagate(self, path: list[Node], reward: float) -> None:
        _add_visit(self.visits, self.value, path, reward)

    def run(self) -> Program:
        solutions: list[Node] = []
        for rollout in range(self.config.target):
            node, path = self.tree.root, [self.tree.root]
            self.rollout, self.path = rollout, path
            while not self.is_leaf(node):
                node, new = self.step(node, rollout)
                if new:
                    yield Need([node], scored=False)
                path.append(node)
            reward = 0.0
            if node.terminal:
                yield Need([node], scored=True)
                reward = node.reward or 0.0
                if node not in solutions:
                    solutions.append(node)
            self.backpropagate(path, reward)
        self.rollout = self.config.target
        return solutions

    def predict(self, view: SpecView, k: int) -> list[Node]:
        """Simulate the next rollouts on a copy of the statistics (paper Algorithm 1):
        the rollout in progress counts as one visit; each simulated rollout descends with
        `choose`, through speculative nodes already generated, and stops at the first node
        that does not exist yet (a prediction, which then counts as visited), at a node in
        flight (skipped), or at a leaf, whose reward is folded in when known."""
        visits, value = dict(self.visits), dict(self.value)
        _add_visit(visits, value, self.path, 0.0)
        out: list[Node] = []
        for rollout in range(self.rollout + 1, self.config.target):
            if len(out) >= k:
                break
            node, path = self.tree.root, [self.tree.root]
            while True:
                if self.is_leaf(node):
                    reward = (node.reward or 0.0) if node.terminal and node.scored else 0.0
                    _add_visit(visits, value, path, reward)
                    break
                kids = self._kids(view, node, rollout)
                slot, child = self.choose(node, rollout, kids, visits, value)
                nxt = view.child(node, slot) if slot is not None else child
                assert nxt is not None
                self._tag.setdefault(nxt.id, rollout)
                path.append(nxt)
                if nxt.generated:
                    node = nxt
                    continue
                if not view.busy(nxt):
                    out.append(nxt)
                _add_visit(visits, value, path, 0.0)
                break
        return out

    def spec_distance(self, node: Node) -> int:
        """Rollouts between the one in progress and the simulated one that predicted `node`."""
        return self._tag.get(node.id, self.rollout) - self.rollout

    def _kids(self, view: SpecView, node: Node, rollout: int) -> list[Node]:
        """Children that exist when rollout `rollout` reaches `node`: the tree's, plus the
        speculative ones an earlier simulated rollout created."""
        kids = node.kids()
        have = {c.index for c in kids}
        for i in range(self.params.branch):
            if i not in have:
                h = view.child(node, i)
                if h.parent is not None and self._tag.get(h.id, rollout) < rollout:
                    kids.append(h)
        return kids


def _add_visit(visits: dict[str, int], value: dict[str, float], path: list[Node], reward: float) -> None:
    for node in path:
        visits[node.id] = visits.get(node.id, 0) + 1
        value[node.id] = value.get(node.id, 0.0) + reward
