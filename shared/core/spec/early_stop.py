"""T3 — adaptive early termination (paper Eq. 3–4 as its released code applies them).

Answers found so far are grouped by equivalence; c1 and c2 are the summed weights (last-step
rewards) of the leading and runner-up groups. With n answers and a target of N, stop the whole
search when n ≥ t and

    c1 − c2 > α · (N − n) · avg(w_2nd)

i.e. even if every answer still to come went to the runner-up at its average weight (scaled by
α), the lead would hold. With no runner-up, avg(w_2nd) is the mean weight of all answers. The
released code's extra median-confidence gate is not in the paper and is off by default
(`median_gate`). T3 changes what the search explores, so it is off by default.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from spex.shared.core.search.answers import normalize_answer
from spex.shared.core.tree import Node

__all__ = ["EarlyStop", "should_stop"]


@dataclass(frozen=True)
class EarlyStop:
    enabled: bool = False
    alpha: float = 0.5  # the paper's α
    min_answers: int | None = None  # t; None: ceil(N / 4), the released BFS driver's check
    median_gate: float | None = None  # the released code's median(w_1st) > θ; None = off

    def threshold(self, target: int) -> int:
        return self.min_answers if self.min_answers is not None else max(1, math.ceil(target / 4))


def should_stop(answers: Sequence[Node], target: int, rule: EarlyStop) -> str | None:
    """The leading answer if the search should stop now, else None."""
    n = len(answers)
    if n < rule.threshold(target):
        return None
    groups: dict[str, list[float]] = {}
    first: dict[str, str] = {}
    for node in answers:
        assert node.answer is not None
        key = normalize_answer(node.answer)
        groups.setdefault(key, []).append(node.reward or 0.0)
        first.setdefault(key, node.answer)
    ranked = sorted(groups, key=lambda k: (-sum(groups[k]), list(groups).index(k)))
    lead = groups[ranked[0]]
    c1 = sum(lead)
    if len(ranked) > 1:
        second = groups[ranked[1]]
        c2, avg_w2 = sum(second), sum(second) / len(second)
    else:
        c2, avg_w2 = 0.0, sum(lead) / len(lead)
    if c1 - c2 <= rule.alpha * max(0, target - n) * avg_w2:
        return None
    if rule.median_gate is not None and statistics.median(lead) <= rule.median_gate:
        return None
    return first[ranked[0]]
