"""A baseline and a SPEX run of the same workload side by side (`Comparison`), and a compare run
as repeated pairs (`Repeated`) quoted with intervals.

Two runs' trees are identical when their structure, every node's text, token count, answer
and finish reason agree (`trees_digest`). Rewards are compared apart: a real model's rewards
differ in their last bits between batch shapes (~1e-7 for log-probability means in float32),
which is not a different search. A comparison reports the largest difference of a node's
reward between the runs, and counts as lossless when the trees and answers are identical and
that difference is within `REWARD_TOLERANCE`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from spex.bench.results import RunSummary, ratio

__all__ = [
    "REWARD_TOLERANCE",
    "Comparison",
    "Repeated",
    "compare",
    "max_reward_difference",
    "pair_records",
    "ratio_ci95",
]

REWARD_TOLERANCE = 1e-4  # rewards this close are the same reward (see the module docstring)


@dataclass(frozen=True)
class Comparison:
    """A baseline and a SPEX run of the same workload and seeds, side by side."""

    algorithm: str
    target: int
    batch_size: int
    questions: int
    seed: int
    profile: str
    t1: bool
    t2: bool
    early_stop: bool
    speedup: float
    lossless: bool  # identical trees and answers, rewards within REWARD_TOLERANCE
    trees_identical: bool
    max_reward_difference: float | None  # over the nodes both runs scored (None: none)
    same_answers: bool
    accuracy_baseline: float
    accuracy_spex: float
    accuracy_ci95_baseline: tuple[float, float]
    accuracy_ci95_spex: tuple[float, float]
    throughput_qpm_baseline: float
    throughput_qpm_spex: float
    hit_rate: float | None
    consumption_rate: float | None
    tokens_wasted: int  # beyond the baseline's
    compute_amplification: float
    cancel_latency_p50_s: float | None
    primary_tpot_ms: float
    primary_tpot_ms_baseline: float
    tpot_ratio: float
    peak_kv_tokens: int
    peak_kv_tokens_baseline: int
    latency_p50_s: float
    latency_p99_s: float
    latency_p50_s_baseline: float
    latency_p99_s_baseline: float
    # Each query's latency against its own in the baseline: the largest ratio, and how many
    # queries took more than 10% longer (None: no query in both runs).
    worst_query_slowdown: float | None
    queries_over_10pct_slower: int
    trees_digest: str
    trees_digest_baseline: str
    wall_s: float
    baseline: RunSummary
    spex: RunSummary

    def to_json(self) -> dict[str, object]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out.update(mode="compare", baseline=self.baseline.to_json(), spex=self.spex.to_json())
        return out


def max_reward_difference(base: RunSummary, spex: RunSummary) -> float | None:
    """The largest difference of one node's reward between two runs, over the nodes both
    scored (None: none)."""
    diffs = [
        abs(reward - spex.rewards[qid][node])
        for qid, rewards in base.rewards.items()
        if qid in spex.rewards
        for node, reward in rewards.items()
        if node in spex.rewards[qid]
    ]
    return max(diffs, default=None)


def compare(base: RunSummary, spex: RunSummary) -> Comparison:
    """One results record for a baseline and a SPEX run of the same workload and seeds."""
    same_answers = base.answers == spex.answers
    # A node scored in one run only is a different search, whatever its digest says.
    same_scored = {q: set(r) for q, r in base.rewards.items()} == {q: set(r) for q, r in spex.rewards.items()}
    identical = base.trees_digest == spex.trees_digest and same_scored
    reward_diff = max_reward_difference(base, spex)
    slowdowns = [
        t / base.latencies_s[q] for q, t in spex.latencies_s.items() if base.latencies_s.get(q, 0.0) > 0
    ]
    return Comparison(
        algorithm=spex.algorithm,
        target=spex.target,
        batch_size=spex.batch_size,
        questions=spex.questions,
        seed=spex.seed,
        profile=spex.profile,
        t1=spex.t1,
        t2=spex.t2,
        early_stop=spex.early_stop,
        speedup=ratio(spex.throughput_qpm, base.throughput_qpm, 0.0),
        lossless=identical and same_answers and (reward_diff or 0.0) <= REWARD_TOLERANCE,
        trees_identical=identical,
        max_reward_difference=reward_diff,
        same_answers=same_answers,
        accuracy_baseline=base.accuracy,
        accuracy_spex=spex.accuracy,
        accuracy_ci95_baseline=base.accuracy_ci95,
        accuracy_ci95_spex=spex.accuracy_ci95,
        throughput_qpm_baseline=base.throughput_qpm,
        throughput_qpm_spex=spex.throughput_qpm,
        hit_rate=spex.hit_rate,
        consumption_rate=spex.consumption_rate,
        tokens_wasted=spex.tokens_all - base.tokens_all,
        compute_amplification=ratio(spex.tokens_all, base.tokens_all, 1.0),
        cancel_latency_p50_s=spex.cancel_latency_p50_s,
        primary_tpot_ms=spex.primary_tpot_ms,
        primary_tpot_ms_baseline=base.primary_tpot_ms,
        tpot_ratio=ratio(spex.primary_tpot_ms, base.primary_tpot_ms, 1.0),
        peak_kv_tokens=spex.peak_kv_tokens,
        peak_kv_tokens_baseline=base.peak_kv_tokens,
        latency_p50_s=spex.latency_p50_s,
        latency_p99_s=spex.latency_p99_s,
        latency_p50_s_baseline=base.latency_p50_s,
        latency_p99_s_baseline=base.latency_p99_s,
        worst_query_slowdown=max(slowdowns, default=None),
        queries_over_10pct_slower=sum(1 for x in slowdowns if x > 1.10),
        trees_digest=spex.trees_digest,
        trees_digest_baseline=base.trees_digest,
        wall_s=base.wall_s + spex.wall_s,
        baseline=base,
        spex=spex,
    )


# Student's t at 97.5% by degrees of freedom, 1 to 30; past 30 the normal's 1.96 (4% narrow
# at 31 degrees, less beyond).
T_975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def ratio_ci95(ratios: list[float]) -> tuple[float, float, float]:
    """The geometric mean of ratios and its 95% t-interval (over their logarithms): how a
    speedup measured in repeated pairs is quoted. One ratio gives it as its own interval."""
    if not ratios or min(ratios) <= 0:
        raise ValueError(f"ratios: positive ones are needed for a geometric mean, not {ratios}")
    logs = np.log(np.asarray(ratios, dtype=float))
    mean = float(logs.mean())
    if len(logs) < 2:
        return (float(np.exp(mean)),) * 3
    t = T_975[len(logs) - 2] if len(logs) - 1 <= len(T_975) else 1.96
    half = t * float(logs.std(ddof=1)) / np.sqrt(len(logs))
    return float(np.exp(mean)), float(np.exp(mean - half)), float(np.exp(mean + half))


@dataclass(frozen=True)
class Repeated:
    """A compare run as repeated pairs of baseline and SPEX, each pair run back to back on the
    same workload and seeds, the order alternating (baseline first in the first pair), so a
    machine that speeds up or slows down during the run weighs on both sides alike."""

    pairs: list[Comparison]
    orders: list[str]  # "baseline-first" | "spex-first", per pair

    def to_json(self) -> dict[str, Any]:
        """What was run, the figures over all the pairs (the speedup and TPOT ratio as geometric
        means with 95% intervals, means of the rest, identity over every run), and each pair's
        whole record under `pairs`."""
        speedup, s_lo, s_hi = ratio_ci95([p.speedup for p in self.pairs])
        tpot, t_lo, t_hi = ratio_ci95([p.tpot_ratio for p in self.pairs])
        digests = {p.trees_digest for p in self.pairs} | {p.trees_digest_baseline for p in self.pairs}
        same = len(digests) == 1
        first = self.pairs[0]
        hits = [p.hit_rate for p in self.pairs if p.hit_rate is not None]
        diffs = [p.max_reward_difference for p in self.pairs if p.max_reward_difference is not None]
        out = {name: getattr(first, name) for name in RUN_FIELDS}
        out.update(
            mode="compare",
            repeats=len(self.pairs),
            speedup=speedup,
            speedup_ci95=(s_lo, s_hi),
            tpot_ratio=tpot,
            tpot_ratio_ci95=(t_lo, t_hi),
            trees_identical=all(p.trees_identical for p in self.pairs) and same,
            lossless=all(p.lossless for p in self.pairs) and same,
            same_answers=all(p.same_answers for p in self.pairs),
            max_reward_difference=max(diffs, default=None),
            accuracy_baseline=float(np.mean([p.accuracy_baseline for p in self.pairs])),
            accuracy_spex=float(np.mean([p.accuracy_spex for p in self.pairs])),
            hit_rate=float(np.mean(hits)) if hits else None,
            compute_amplification=float(np.mean([p.compute_amplification for p in self.pairs])),
            wall_s=sum(p.wall_s for p in self.pairs),
            pairs=[p.to_json() | {"order": order} for p, order in zip(self.pairs, self.orders, strict=True)],
        )
        return out


# What a repeated record takes from its first pair: what was run, the same in every pair.
RUN_FIELDS = ("algorithm", "target", "batch_size", "questions", "seed", "profile", "t1", "t2", "early_stop")


def pair_records(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The baseline-and-SPEX records of a results file, in order: each pair's of a repeated
    compare (files from before pairs kept their runs hold only the one record), else the file's
    own (a compare, or a single run)."""
    pairs = report.get("pairs")
    if pairs and all("spex" in p for p in pairs):
        return list(pairs)
    return [report]
