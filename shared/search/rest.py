"""ReST-MCTS* (`THUDM/ReST-MCTS:MCTS/mcts.py`, `MCTS/task.py`), value-guided MCTS.

One round (`executeRound`):

1. *Select*: while a node is fully expanded, move to its best child by
   ``V + c·sqrt(2·ln N_parent / N_child)`` (``V + inf`` when unvisited), ties at random.
2. *Expand* (unless the node answers or is at `max_depth`): `branch` proposals, generated
   together; each child's V is its reward. The node is now fully expanded.
3. *Simulate*: from the best new child, a greedy rollout of `roll_forward_steps` single
   proposals (stopping at an answer); ``V_child ← (1−α)·V_child + α·max V_rollout`` and
   ``N_child += 1`` (`#L150-157`). Rollout steps are nodes of their own action, not children.
4. *Backpropagate* from the selected node to the root: ``N += 1``; a fully expanded node takes
   the visit-weighted value of its children, ``V = Σ V_c·N_c / Σ N_c`` (`#L213-221`).

Defaults are the `evaluate.py` CLI's (c = 0.4, two rollout steps, inf = 0.8), with α = 0.5
and branch 3 from `MCTS_Task`. `target` is the number of rounds (the paper's ReST-5/10).
The reference also stops as soon as a selected node has V ≥ end_gate (0.9); that cuts the
search to a single answer, so it is off by default here (`end_gate` = 0 disables it) and the
answer is the reward-weighted vote over the answers found (`weighted_verify`).
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.search.base import Need, Program, SearchAlgorithm, SearchConfig, apply_params, register
from shared.search.mcts import argmax_tiebreak, uct_rest
from shared.tree import ROLLOUT, Node, Tree

__all__ = ["Rest", "RestParams"]


@dataclass(frozen=True)
class RestParams:
    exploration: float = 0.4
    inf: float = 0.8
    alpha: float = 0.5
    branch: int = 3
    roll_forward_steps: int = 2
    max_depth: int = 10
    end_gate: float = 0.0  # reference 0.9; 0 = never stop early


@register
class Rest(SearchAlgorithm):
    name = "rest"
    family = "dfs"
    default_selection = "weighted"

    def __init__(self, tree: Tree, config: SearchConfig) -> None:
        super().__init__(tree, config)
        self.params: RestParams = apply_params(RestParams(), config.params)  # type: ignore[assignment]
        self.visits: dict[str, int] = {}
        self.value: dict[str, float] = {}
        self.expanded: set[str] = set()

    def score(self, node: Node) -> float:
        parent = node.parent
        assert parent is not None
        return uct_rest(
            self.value.get(node.id, 0.0),
            self.visits.get(node.id, 0),
            self.visits.get(parent.id, 0),
            self.params.exploration,
            self.params.inf,
        )

    def select(self, round_: int) -> Node:
        node = self.tree.root
        while node.id in self.expanded and node.kids():
            key = (self.tree.seed, self.tree.query_id, node.id, round_, "select")
            node = argmax_tiebreak(node.kids(), self.score, *key)
        return node

    def backpropagate(self, node: Node | None) -> None:
        while node is not None:
            self.visits[node.id] = self.visits.get(node.id, 0) + 1
            if node.id in self.expanded:
                kids = node.kids()
                total = sum(self.visits.get(c.id, 0) for c in kids)
                if total:
                    self.value[node.id] = (
                        sum(self.value.get(c.id, 0.0) * self.visits.get(c.id, 0) for c in kids) / total
                    )
            node = node.parent

    def run(self) -> Program:
        p, solutions = self.params, []
        for round_ in range(self.config.target):
            node = self.select(round_)
            if p.end_gate and self.value.get(node.id, 0.0) >= p.end_gate and node.parent is not None:
                break
            if not node.terminal and node.depth < p.max_depth:
                kids = [self.tree.child(node, i) for i in range(p.branch)]
                yield Need(kids, scored=True)
                self.expanded.add(node.id)
                for kid in kids:
                    self.value[kid.id] = kid.reward or 0.0
                    if kid.terminal:
                        solutions.append(kid)
                best = max(kids, key=lambda k: (self.value[k.id], -k.index))
                if not best.terminal:
                    yield from self.simulate(best, solutions)
            self.backpropagate(node)
        return solutions

    def simulate(self, start: Node, solutions: list[Node]) -> Program:
        """Greedy lookahead from `start`; blends the best value seen into V(start)."""
        best_seen, node = None, start
        for _ in range(self.params.roll_forward_steps):
            if node.depth >= self.params.max_depth:
                break
            node = self.tree.child(node, 0, ROLLOUT)
            yield Need([node], scored=True)
            reward = node.reward or 0.0
            best_seen = reward if best_seen is None else max(best_seen, reward)
            if node.terminal:
                solutions.append(node)
                break
        if best_seen is not None:
            a = self.params.alpha
            self.value[start.id] = (1 - a) * self.value[start.id] + a * best_seen
            self.visits[start.id] = self.visits.get(start.id, 0) + 1
        return []
