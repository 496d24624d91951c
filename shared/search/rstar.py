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

from shared.ids import derived_int
from shared.search.base import Need, Program, SearchAlgorithm, SearchConfig, apply_params, register
from shared.search.mcts import argmax_tiebreak, uct_rstar
from shared.tree import Node, Tree

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

    def is_leaf(self, node: Node) -> bool:
        return node.terminal or node.depth >= self.params.max_depth

    def unfilled(self, node: Node) -> list[int]:
        have = {c.index for c in node.kids()}
        return [i for i in range(self.params.branch) if i not in have]

    def uct(self, node: Node) -> float:
        parent = node.parent
        assert parent is not None
        return uct_rstar(
            self.value.get(node.id, 0.0),
            self.visits.get(node.id, 0),
            self.visits.get(parent.id, 0),
            self.params.exploration,
        )

    def step(self, node: Node, rollout: int) -> tuple[Node, bool]:
        """The next node of rollout `rollout` below `node`; True if it must be generated."""
        free = self.unfilled(node)
        if free:
            pick = free[derived_int(len(free), self.tree.seed, self.tree.query_id, node.id, rollout)]
            return self.tree.child(node, pick), True
        key = (self.tree.seed, self.tree.query_id, node.id, rollout, "uct")
        return argmax_tiebreak(node.kids(), self.uct, *key), False

    def backpropagate(self, path: list[Node], reward: float) -> None:
        for node in path:
            self.visits[node.id] = self.visits.get(node.id, 0) + 1
            self.value[node.id] = self.value.get(node.id, 0.0) + reward

    def run(self) -> Program:
        solutions: list[Node] = []
        for rollout in range(self.config.target):
            node, path = self.tree.root, [self.tree.root]
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
        return solutions
