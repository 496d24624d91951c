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

from collections.abc import Callable
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
from spex.shared.core.search.mcts import argmax_tiebreak, uct_rest
from spex.shared.core.tree import ROLLOUT, Node, Tree

__all__ = ["Rest", "RestParams"]


@dataclass(frozen=True)
class RestParams:
    exploration: float = 0.4  # c of V + c·sqrt(2·ln N_parent / N_child) (evaluate.py)
    inf: float = 0.8  # the bonus of an unvisited child (evaluate.py)
    alpha: float = 0.5  # the rollout's share of a child's value (MCTS_Task)
    branch: int = 3  # children per expansion (MCTS_Task)
    roll_forward_steps: int = 2  # greedy rollout steps after an expansion (evaluate.py)
    max_depth: int = 10  # the deepest step
    end_gate: float = 0.0  # reference 0.9; 0 = never stop early


@register
class Rest(SearchAlgorithm):
    name = "rest"
    family = "dfs"
    default_selection = "weighted"
    parameters = RestParams

    def __init__(self, tree: Tree, config: SearchConfig) -> None:
        super().__init__(tree, config)
        self.params: RestParams = apply_params(RestParams(), config.params)  # type: ignore[assignment]
        self.visits: dict[str, int] = {}
        self.value: dict[str, float] = {}
        self.expanded: set[str] = set()
        self.round = 0  # the round in progress
        self.current: Node | None = None  # the node it selected
        self._tag: dict[str, int] = {}  # speculative node -> the simulated round that wanted it

    @property
    def rollouts_done(self) -> int:
        return self.round

    def select(
        self,
        round_: int,
        visits: dict[str, int] | None = None,
        value: dict[str, float] | None = None,
        expanded: set[str] | None = None,
        kids: Callable[[Node], list[Node]] = Node.kids,
    ) -> Node:
        """Descend while fully expanded, by V + c·sqrt(2·ln N_parent / N) (V + inf unvisited).
        Pure in its arguments: the speculative simulation passes copies and its own kids."""
        visits = self.visits if visits is None else visits
        value = self.value if value is None else value
        expanded = self.expanded if expanded is None else expanded
        p = self.params
        node = self.tree.root
        while node.id in expanded and kids(node):
            n_parent = visits.get(node.id, 0)

            def score(c: Node, n_parent: int = n_parent) -> float:
                return uct_rest(value.get(c.id, 0.0), visits.get(c.id, 0), n_parent, p.exploration, p.inf)

            key = (self.tree.seed, self.tree.query_id, node.id, round_, "select")
            node = argmax_tiebreak(kids(node), score, *key)
        return node

    def backpropagate(
        self,
        node: Node | None,
        visits: dict[str, int] | None = None,
        value: dict[str, float] | None = None,
        expanded: set[str] | None = None,
        kids: Callable[[Node], list[Node]] = Node.kids,
    ) -> None:
        visits = self.visits if visits is None else visits
        value = self.value if value is None else value
        expanded = self.expanded if expanded is None else expanded
        while node is not None:
            visits[node.id] = visits.get(node.id, 0) + 1
            if node.id in expanded:
                children = kids(node)
                total = sum(visits.get(c.id, 0) for c in children)
                if total:
                    value[node.id] = sum(value.get(c.id, 0.0) * visits.get(c.id, 0) for c in children) / total
            node = node.parent

    def run(self) -> Program:
        p, solutions = self.params, []
        for round_ in range(self.config.target):
            node = self.select(round_)
            self.round, self.current = round_, node
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
                best = self.best_child(kids, self.value)
                if not best.terminal:
                    yield from self.simulate(best, solutions)
            self.backpropagate(node)
        self.round, self.current = self.config.target, None
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

    def spec_distance(self, node: Node) -> int:
        """Rounds between the one in progress and the simulated one that predicted `node`."""
        return self._tag.get(node.id, self.round) - self.round

    def best_child(self, kids: list[Node], value: dict[str, float]) -> Node:
        return max(kids, key=lambda k: (value.get(k.id, 0.0), -k.index))

    def predict(self, view: SpecView, k: int) -> list[Node]:
        """The round in progress: once some new children are scored, the greedy lookahead of
        the best of them. Later rounds: selection simulated on copies of the statistics (the
        round in progress counts as a visit), predicting the selected node's children, and,
        once those are scored, its lookahead; a round whose children are not yet known ends
        the simulation, since the next selection depends on their values."""
        p, out = self.params, []

        sim_round = self.round

        def want(n: Node) -> None:
            if not n.generated and not view.busy(n) and n not in out:
                self._tag.setdefault(n.id, sim_round)
                out.append(n)

        cur = self.current
        if cur is None:
            return []
        kids_now = [c for c in cur.kids() if c.scored]
        if cur.id not in self.expanded and kids_now:
            best = self.best_child(kids_now, {c.id: c.reward or 0.0 for c in kids_now})
            self._lookahead(view, best, want)
        visits, value, expanded = dict(self.visits), dict(self.value), set(self.expanded)
        sim_kids: dict[str, list[Node]] = {}

        def kids(n: Node) -> list[Node]:
            return n.kids() or sim_kids.get(n.id, [])

        self.backpropagate(cur, visits, value, expanded, kids)
        for round_ in range(self.round + 1, self.config.target):
            if len(out) >= k:
                break
            sim_round = round_
            node = self.select(round_, visits, value, expanded, kids)
            if node.terminal or node.depth >= p.max_depth:
                self.backpropagate(node, visits, value, expanded, kids)
                continue
            new = [view.child(node, i) for i in range(p.branch)]
            for c in new:
                want(c)
            if not all(c.scored for c in new):
                break
            expanded.add(node.id)
            sim_kids[node.id] = new
            for c in new:
                value[c.id] = c.reward or 0.0
            best = self.best_child(new, value)
            if not best.terminal:
                known, best_seen = self._lookahead(view, best, want)
                if not known:
                    break
                if best_seen is not None:
                    value[best.id] = (1 - p.alpha) * value[best.id] + p.alpha * best_seen
                    visits[best.id] = visits.get(best.id, 0) + 1
            self.backpropagate(node, visits, value, expanded, kids)
        return out[:k]

    def _lookahead(
        self, view: SpecView, start: Node, want: Callable[[Node], None]
    ) -> tuple[bool, float | None]:
        """Walk the known part of `start`'s greedy lookahead; ask for its first unknown step.
        Returns (whole lookahead known, best value seen), as `simulate` would compute it."""
        best_seen, node = None, start
        for _ in range(self.params.roll_forward_steps):
            if node.depth >= self.params.max_depth:
                break
            node = view.child(node, 0, ROLLOUT)
            if not node.scored:
                want(node)
                return False, None
            reward = node.reward or 0.0
            best_seen = reward if best_seen is None else max(best_seen, reward)
            if node.terminal:
                break
        return True, best_seen
