"""Self-consistency with PRM pruning: a search written as a SPEX plug-in, against `spex.search`
alone.

N samples of a solution grow one step a round. The PRM scores every step; a sample whose step
scores below `threshold` is dropped, one that gives an answer is done, the rest grow again —
up to `max_steps` rounds. The answer is the majority of the samples' answers (self-consistency),
from the samples the reward model did not prune.

Load it without packaging, from this folder:

    PYTHONPATH=examples/searches SPEX_SEARCH_PLUGINS=pruned_self_consistency spex searches

or packaged, by an entry point in the package's pyproject.toml:

    [project.entry-points."spex.searches"]
    pruned_sc = "pruned_self_consistency:PrunedSelfConsistency"

then ask for it as for any search: `spex bench --algorithm pruned_sc --target 8`, or
`{"algorithm": "pruned_sc", "target": 8, "params": {"threshold": 0.4}}` over HTTP.
"""

from __future__ import annotations

from dataclasses import dataclass

from spex.search import (
    Need,
    Node,
    Program,
    SearchAlgorithm,
    SearchConfig,
    SpecView,
    Tree,
    apply_params,
    register,
)


@dataclass(frozen=True)
class PrunedParams:
    threshold: float = 0.3  # a step the PRM scores below this drops its sample
    max_steps: int = 12  # rounds before the samples still growing are given up


@register
class PrunedSelfConsistency(SearchAlgorithm):
    name = "pruned_sc"
    family = "bfs"  # grows level by level: the synthetic workload's breadth-first step lengths
    default_selection = "majority"
    parameters = PrunedParams

    def __init__(self, tree: Tree, config: SearchConfig) -> None:
        super().__init__(tree, config)
        self.params: PrunedParams = apply_params(PrunedParams(), config.params)
        if not 0.0 <= self.params.threshold <= 1.0:
            raise ValueError("threshold must be from 0 to 1")
        self.round: list[Node] = []  # the steps being generated and scored

    def keeps(self, step: Node) -> bool:
        """A scored step its sample goes on from."""
        return not step.terminal and (step.reward or 0.0) >= self.params.threshold

    def run(self) -> Program:
        samples = [self.tree.child(self.tree.root, i) for i in range(self.config.target)]
        answered: list[Node] = []
        for _ in range(self.params.max_steps):
            if not samples:
                break
            self.round = samples
            yield Need(samples)  # generated and scored: the round's reward barrier
            answered += [s for s in samples if s.terminal]
            samples = [self.tree.child(s, 0) for s in samples if self.keeps(s)]
        self.round = []
        return answered

    # Optional: what speculation may generate while the round waits. A sample whose step is
    # already scored and kept certainly grows its first child next round.
    def predict(self, view: SpecView, k: int) -> list[Node]:
        ahead = [view.child(s, 0) for s in self.round if s.scored and self.keeps(s)]
        return [n for n in ahead if not n.generated and not view.busy(n)][:k]

    def spec_likelihood(self, node: Node) -> float:
        return 1.0

    def spec_alive(self, node: Node) -> bool:
        return node.parent is not None and any(s.id == node.parent.id for s in self.round)
