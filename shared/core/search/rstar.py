"""rStar-MCTS (`microsoft/rStar@rStar-mutualreasoning:run_src/MCTS_backbone.py`), with a PRM.

One rollout = select → expand → simulate → backpropagate, to a terminal node:

- *Select*: from the root, while a node is expanded, take the UCT-best child,
  ``Q/N + c·sqrt(ln N_parent / N)``, c = 2; an unvisited child scores 999 (`#L181-190`), so
  an expanded node's unvisited children are tried first, one picked uniformly at random
  (`#L120`).
- *Expand/simulate*: a node reached without children is expanded — **all** its `branch`
  children are generated in one go, as the reference runs every allowed action of a node
  together and the SPEX artifact issues `mcts_wid` requests per expansion — and the rollout
  goes on from one of them (`#L150`), to a terminal node.
- A node is terminal when it answers, or at `max_depth` (5).
- *Backpropagate*: the terminal's reward (its PRM score, as SPEX runs rStar; 0 for a
  terminal without an answer) is added to Q, and 1 to N, on every node of the path (`#L155-160`).

`branch` is 4, the artifact's `mcts_wid` (rStar's own `num_a1_steps` is 3: `--param
branch=3`). A rollout still waits on each expansion in turn — the depth-first reward barrier
the paper describes — but the GPU decodes a node's children together. Random picks are
derived from (seed, query, node, rollout). The answer is the majority vote over every
solution node in the tree (`eval_src/do_eval.py`).
"""

from __future__ import annotations

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
from spex.shared.core.search.mcts import argmax_tiebreak, uct_rstar
from spex.shared.core.tree import Node, Tree

__all__ = ["Rstar", "RstarParams"]


@dataclass(frozen=True)
class RstarParams:
    exploration: float = 2.0  # mcts_exploration_weight, constant schedule
    max_depth: int = 5  # max_depth_allowed
    branch: int = 4  # children per expansion (the artifact's mcts_wid; rStar's num_a1_steps is 3)


@register
class Rstar(SearchAlgorithm):
    name = "rstar"
    family = "dfs"
    default_selection = "majority"
    parameters = RstarParams

    def __init__(self, tree: Tree, config: SearchConfig) -> None:
        super().__init__(tree, config)
        self.params: RstarParams = apply_params(RstarParams(), config.params)  # type: ignore[assignment]
        self.visits: dict[str, int] = {}  # N per node id
        self.value: dict[str, float] = {}  # Q (summed reward) per node id
        self.rollout = 0  # the rollout in progress
        self.path: list[Node] = [tree.root]  # its path so far
        self._tag: dict[str, int] = {}  # speculative node -> the simulated rollout that made it

    @property
    def rollouts_done(self) -> int:
        return self.rollout

    def is_leaf(self, node: Node) -> bool:
        return node.terminal or node.depth >= self.params.max_depth

    def select(
        self, node: Node, rollout: int, kids: list[Node], visits: dict[str, int], value: dict[str, float]
    ) -> Node:
        """The UCT-best of an expanded node's children (unvisited first, ties at random). Pure:
        the search and its speculative simulation both call it, on the real or on copied
        statistics."""
        n_parent, c = visits.get(node.id, 0), self.params.exploration

        def uct(child: Node) -> float:
            return uct_rstar(value.get(child.id, 0.0), visits.get(child.id, 0), n_parent, c)

        return argmax_tiebreak(kids, uct, self.tree.seed, self.tree.query_id, node.id, rollout, "uct")

    def backpropagate(self, path: list[Node], reward: float) -> None:
        _add_visit(self.visits, self.value, path, reward)

    def run(self) -> Program:
        solutions: list[Node] = []
        branch = self.params.branch
        for rollout in range(self.config.target):
            node, path = self.tree.root, [self.tree.root]
            self.rollout, self.path = rollout, path
            while not self.is_leaf(node):
                if len(node.kids()) < branch:  # expand: every child in one go
                    yield Need([self.tree.child(node, i) for i in range(branch)], scored=False)
                node = self.select(node, rollout, node.kids(), self.visits, self.value)
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
        """Simulate the next rollouts on a copy of the statistics (paper Algorithm 1): the
        rollout in progress counts as one visit; each simulated rollout descends with
        `select` through expansions already generated (the tree's or speculative), and stops
        at the first node not yet expanded — its missing children are the prediction, and the
        path counts as visited — at an expansion in flight or already predicted (skipped), or
        at a leaf, whose reward is folded in when known."""
        visits, value = dict(self.visits), dict(self.value)
        _add_visit(visits, value, self.path, 0.0)
        out: list[Node] = []
        planned: set[str] = set()
        branch = self.params.branch
        for rollout in range(self.rollout + 1, self.config.target):
            if len(out) >= k:
                break
            node, path = self.tree.root, [self.tree.root]
            while True:
                if self.is_leaf(node):
                    reward = (node.reward or 0.0) if node.terminal and node.scored else 0.0
                    _add_visit(visits, value, path, reward)
                    break
                kids = [view.child(node, i) for i in range(branch)]
                if all(c.generated for c in kids):
                    node = self.select(node, rollout, kids, visits, value)
                    path.append(node)
                    continue
                for c in kids:
                    if self._tag.get(c.id, -1) <= self.rollout:  # unseen, or seen by a rollout now past
                        self._tag[c.id] = rollout
                    if not c.generated and not view.busy(c) and c.id not in planned and len(out) < k:
                        out.append(c)
                        planned.add(c.id)
                _add_visit(visits, value, path, 0.0)
                break
        return out

    def spec_distance(self, node: Node) -> int:
        """Rollouts between the one in progress and the simulated one that predicted `node`."""
        return self._tag.get(node.id, self.rollout) - self.rollout


def _add_visit(visits: dict[str, int], value: dict[str, float], path: list[Node], reward: float) -> None:
    for node in path:
        visits[node.id] = visits.get(node.id, 0) + 1
        value[node.id] = value.get(node.id, 0.0) + reward
