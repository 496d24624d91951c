"""T3 — adaptive early termination, as the SPEX artifact applies the paper's Eq. 3–4.

Answers found so far are grouped by equivalence; c1 and c2 are the summed weights of the
leading and runner-up groups. With n answers and a target of N, stop the whole search once
the search has gone far enough and

    c1 − c2 > α · (N − n) · avg(w_2nd)

i.e. even if every answer still to come went to the runner-up at its average weight (scaled by
α), the lead would hold. As the artifact (`bfs_async.py`, `dfs_async.py`) runs it:

- an answer's weight is the *minimum* step reward on its path (`--weight_func min`), counted
  once every step of the path is scored;
- "far enough" is more than N/4 answers for breadth-first searches (`#leaves > width/4`) and
  more than half the rollouts done for depth-first ones (`i_path > num_path/2`);
- with no runner-up, avg(w_2nd) is 0: a single answer group stops the search at once.

The project's earlier variant (last-step weight, at least ⌈N/4⌉ answers for every search, the
leader's mean weight standing in for a missing runner-up) is `EarlyStop.project()`. The
artifact's median-confidence gate (median(w_1st) > 0.9/0.95) is not in the paper and is off
unless `median_gate` is set. T3 changes what the search explores, so it is off by default.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from spex.shared.core.search.answers import Equivalence, Votes
from spex.shared.core.tree import Node

__all__ = ["EarlyStop", "answer_weight", "should_stop"]

WEIGHTS = ("min", "last")
RUNNER_UP = ("zero", "leader")
THRESHOLDS = ("artifact", "quarter")


@dataclass(frozen=True)
class EarlyStop:
    """Adaptive early termination (T3), the rule of this module's docstring: off unless
    `enabled`. It changes what the search explores, and so may change its answer.

    Attributes:
        enabled: Stop a search once its leading answer cannot be overturned.
        alpha: The margin's scale α.
        min_answers: Stop only after this many answers (`None`: the search family's rule, more
            than N/4 answers breadth-first or N/2 rollouts depth-first).
        median_gate: The released code's gate, median(w_1st) > θ (`None`: off, as the paper).
        weight: An answer's weight: `"min"`, its path's lowest step reward, or `"last"`, its own.
        runner_up: avg(w_2nd) with no runner-up: `"zero"` or the `"leader"`'s mean weight.
        threshold: How far a search must have gone: `"artifact"` (the family's rule) or
            `"quarter"` (at least ⌈N/4⌉ answers, any search).
    """

    enabled: bool = False
    alpha: float = 0.5  # the paper's α (the artifact's DFS default; its BFS script runs 1.0)
    min_answers: int | None = None  # t as a count of answers; None: the family's rule (above)
    median_gate: float | None = None  # the artifact's median(w_1st) > θ; None = off
    weight: str = "min"  # "min": the path's lowest step reward; "last": the answer step's
    runner_up: str = "zero"  # avg(w_2nd) with no runner-up: "zero" or the "leader"'s mean
    threshold: str = "artifact"  # "artifact": > N/4 answers (BFS), > N/2 rollouts (DFS);
    # "quarter": at least ⌈N/4⌉ answers, any search

    def __post_init__(self) -> None:
        if self.weight not in WEIGHTS:
            raise ValueError(f"early_stop weight: must be one of {', '.join(WEIGHTS)}, not {self.weight!r}")
        if self.runner_up not in RUNNER_UP:
            raise ValueError(
                f"early_stop runner_up: must be one of {', '.join(RUNNER_UP)}, not {self.runner_up!r}"
            )
        if self.threshold not in THRESHOLDS:
            raise ValueError(
                f"early_stop threshold: must be one of {', '.join(THRESHOLDS)}, not {self.threshold!r}"
            )

    @classmethod
    def project(cls, alpha: float = 0.5) -> EarlyStop:
        """The rule this project ran before it followed the artifact."""
        return cls(True, alpha, weight="last", runner_up="leader", threshold="quarter")

    def far_enough(self, family: str, answers: int, rollouts_done: int | None, target: int) -> bool:
        if self.min_answers is not None:
            return answers >= self.min_answers
        if self.threshold == "quarter":
            return answers >= max(1, -(-target // 4))
        if family == "dfs" and rollouts_done is not None:
            return rollouts_done > target / 2
        return answers > target / 4


def answer_weight(node: Node, weight: str) -> float | None:
    """An answer's weight, or None while a step of its path is not scored yet."""
    if weight == "last":
        return node.reward
    rewards = [n.reward for n in node.path() if n.parent is not None]
    if any(r is None for r in rewards):
        return None
    return min(rewards)  # type: ignore[type-var]


def should_stop(
    answers: Sequence[Node],
    target: int,
    rule: EarlyStop,
    family: str = "bfs",
    rollouts_done: int | None = None,
    same: Equivalence | None = None,
) -> str | None:
    """The leading answer if the search should stop now, else None. `answers` are the
    terminal nodes found so far; those whose weight is not known yet are not counted."""
    weighted = [(n, w) for n in answers if (w := answer_weight(n, rule.weight)) is not None]
    n = len(weighted)
    if n == 0 or not rule.far_enough(family, n, rollouts_done, target):
        return None
    votes = Votes(same)
    for node, w in weighted:
        assert node.answer is not None
        votes.add(node.answer, w)
    groups, first = votes.groups, votes.spelling
    ranked = sorted(groups, key=lambda k: (-sum(groups[k]), list(groups).index(k)))
    lead = groups[ranked[0]]
    c1 = sum(lead)
    if len(ranked) > 1:
        second = groups[ranked[1]]
        c2, avg_w2 = sum(second), sum(second) / len(second)
    else:
        c2, avg_w2 = 0.0, (0.0 if rule.runner_up == "zero" else sum(lead) / len(lead))
    if c1 - c2 <= rule.alpha * max(0, target - n) * avg_w2:
        return None
    if rule.median_gate is not None and statistics.median(lead) <= rule.median_gate:
        return None
    return first[ranked[0]]
