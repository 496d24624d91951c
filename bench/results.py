"""Benchmark results: the metrics of a run (`RunSummary`), the side-by-side record
of a baseline and a SPEX run of the same workload (`Comparison`), and the results file.

Both are typed records whose fields are the results file's keys; `to_json` gives the dict
that is written.

Two runs' trees are identical when their structure, every node's text, token count, answer
and finish reason agree (`trees_digest`). Rewards are compared apart: a real model's rewards
differ in their last bits between batch shapes (~1e-7 for log-probability means in float32),
which is not a different search. A comparison reports the largest difference of a node's
reward between the runs, and counts as lossless when the trees and answers are identical and
that difference is within `REWARD_TOLERANCE`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from spex.bench.vtime import BenchConfig, BenchResult
from spex.shared.core.ids import digest

__all__ = [
    "REWARD_TOLERANCE",
    "Repeated",
    "WALL_CLOCK_FIELDS",
    "Comparison",
    "RunSummary",
    "bootstrap_ci95",
    "compare",
    "pair_records",
    "ratio_ci95",
    "summarize",
    "write_json",
]

WALL_CLOCK_FIELDS = ("wall_s", "sim_speed")  # the only fields that differ between equal runs
REWARD_TOLERANCE = 1e-4  # rewards this close are the same reward (see the module docstring)


@dataclass(frozen=True)
class RunSummary:
    # --- what ran
    mode: str
    t1: bool
    t2: bool
    early_stop: bool
    algorithm: str
    target: int
    batch_size: int
    questions: int
    seed: int
    profile: str
    reward_profile: str | None  # None with the logprob reward (no PRM engine)
    reward: str
    knobs: dict[str, Any]
    params: dict[str, float]
    # --- the searches
    throughput_qpm: float
    makespan_s: float
    accuracy: float
    accuracy_ci95: tuple[float, float]  # percentile bootstrap over the questions (seeded)
    answers: dict[str, str | None]  # query id -> answer
    trees_digest: str  # structure, texts, tokens and answers; rewards apart (`rewards`)
    early_stopped_queries: int
    tokens_generated: int  # tokens of the final trees
    nodes_generated: int
    tokens_all: int  # every token generated, cancelled speculation included
    tokens_wasted: int
    compute_amplification: float
    latency_p50_s: float
    latency_p99_s: float
    latencies_s: dict[str, float]  # query id -> its latency (admission to answer)
    # T2's starvation count: budget rounds in which a query that could speculate got no share
    # while another got more than one branch, over the rounds queries could speculate in.
    starved_rounds: int
    share_rounds: int
    critical_path_s_per_query: dict[str, float]
    step_tokens_p50: float  # the steps of the final trees
    step_tokens_p90: float
    step_tokens_max: int
    steps_capped_fraction: float  # steps that ended at the token cap
    # --- the engines
    mean_batch: float
    utilization: float
    gpu_busy_fraction: float
    prefix_cache_hit_rate: float
    primary_tpot_ms: float
    peak_kv_tokens: int
    kv_capacity_tokens: int
    retractions: int
    reward_busy_fraction: float
    level_batch_first_quarter: float | None  # BFS at B=1 only
    level_batch_last_quarter: float | None
    # --- speculation
    spec_issued: int
    spec_adopted: int
    spec_cancelled: int
    spec_evicted: int
    hit_rate: float | None
    consumption_rate: float | None
    hit_rate_by_distance: dict[str, dict[str, Any]]
    cancel_latency_p50_s: float | None
    spec_pool_peak: int
    slack_end: list[float]  # each worker's TPOT slack at the end (the governor's, or the fixed one)
    # Worker 0's governor over the run: [time s, slack, speculative jobs admitted, TPOT growth
    # of the last window closed, windows closed, what bound the admission ("slack", "rate",
    # "limit", "demand")] each time one of the first three or the bound moved (`bench.governor`).
    governor_trace: list[list[float | str | None]]
    server: dict[str, Any]  # a live server's own account of itself (version, model, flags); {} in process
    # What the governor held primary TPOT growth to (None: a fixed slack, no budget, or the
    # throughput objective, which holds none)
    tpot_target: float | None
    objective: str  # what speculation was admitted for: "slo" or "throughput"
    profile_file: str | None  # the measured step curve it budgeted by (None: the catalog's or static)
    # --- wall clock (the only fields that differ between equal runs)
    wall_s: float
    sim_speed: float
    # --- what chose the speculative work: the search's own predictor, or "oracle" (the
    # baseline's final trees: the bound of lossless speculation, `bench.oracle`)
    predictor: str = "search"
    # --- kept for comparisons, not written: query id -> node id -> reward
    rewards: dict[str, dict[str, float]] = field(default_factory=dict, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "rewards"}


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

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out.update(mode="compare", baseline=self.baseline.to_json(), spex=self.spex.to_json())
        return out


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else 0.0


def _ratio(num: float, den: float, empty: float) -> float:
    return num / den if den else empty


BOOTSTRAP_RESAMPLES = 10_000


def bootstrap_ci95(values: list[float], seed: int) -> tuple[float, float]:
    """The 95% percentile-bootstrap interval of the mean of `values` (resampled with a
    generator seeded by `seed`, so equal runs write equal intervals); (0, 0) for none."""
    if not values:
        return (0.0, 0.0)
    data = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, len(data), size=(BOOTSTRAP_RESAMPLES, len(data)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return (float(low), float(high))


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def _governed(cfg: BenchConfig) -> bool:
    """The governor held primary TPOT to the target: the slo objective, steered, budgeted."""
    return cfg.tpot_slack is None and cfg.tpot_budget and cfg.objective == "slo"


def summarize(res: BenchResult) -> RunSummary:
    cfg, recs, gens, spec, span = res.config, res.records, res.gens, res.spec, res.makespan_s
    latencies = [r.latency_s for r in recs]
    steps = [float(t) for r in recs for t in r.step_tokens]
    tree_tokens = sum(r.tokens for r in recs)
    wide = [(first, last) for width, first, last in res.level_batches if width >= 8]
    return RunSummary(
        mode=cfg.mode,
        t1=cfg.mode == "spex" and cfg.t1,
        t2=cfg.mode == "spex" and cfg.t2,
        early_stop=cfg.early_stop.enabled,
        algorithm=",".join(f"{a}-{t}" for a, t in cfg.mix) if cfg.mix else cfg.algorithm,
        target=cfg.target,
        batch_size=cfg.batch_size,
        questions=len(recs),
        seed=cfg.seed,
        profile=cfg.sim_profile().name if cfg.backend == "sim" else f"{_model_name(res)}@{cfg.backend}",
        reward_profile=cfg.reward_profile_name if cfg.reward == "prm" else None,
        reward=cfg.reward,
        knobs=asdict(cfg.knobs),
        params=dict(cfg.params),
        throughput_qpm=len(recs) / span * 60 if span else 0.0,
        makespan_s=span,
        accuracy=_ratio(sum(r.correct for r in recs), len(recs), 0.0),
        accuracy_ci95=bootstrap_ci95([float(r.correct) for r in recs], cfg.seed),
        answers={r.query_id: r.answer for r in recs},
        trees_digest=digest(*(r.digest for r in recs)),
        early_stopped_queries=sum(r.early_stopped for r in recs),
        tokens_generated=tree_tokens,
        nodes_generated=sum(r.nodes for r in recs),
        tokens_all=res.tokens_all,
        tokens_wasted=res.tokens_all - tree_tokens,
        compute_amplification=_ratio(res.tokens_all, tree_tokens, 1.0),
        latency_p50_s=_pct(latencies, 50),
        latency_p99_s=_pct(latencies, 99),
        latencies_s={r.query_id: r.latency_s for r in recs},
        starved_rounds=res.starved_rounds,
        share_rounds=res.share_rounds,
        critical_path_s_per_query={k: v / len(recs) for k, v in asdict(res.critical_path).items()},
        step_tokens_p50=_pct(steps, 50),
        step_tokens_p90=_pct(steps, 90),
        step_tokens_max=int(max(steps, default=0)),
        steps_capped_fraction=_ratio(sum(r.capped_steps for r in recs), len(steps), 0.0),
        mean_batch=_ratio(sum(g.stats.batch_time for g in gens), sum(g.stats.decode_s for g in gens), 0.0),
        utilization=float(np.mean([g.utilization(span) for g in gens])),
        gpu_busy_fraction=_ratio(sum(g.stats.busy_s for g in gens), span * len(gens), 0.0),
        prefix_cache_hit_rate=_ratio(
            sum(g.stats.cached_tokens for g in gens), sum(g.stats.prompt_tokens for g in gens), 0.0
        ),
        primary_tpot_ms=float(np.mean(res.tpots_s)) * 1e3 if res.tpots_s else 0.0,
        peak_kv_tokens=max(g.stats.peak_kv_tokens for g in gens),
        kv_capacity_tokens=sum(g.capacity_tokens for g in gens),
        retractions=sum(g.stats.retractions for g in gens),
        reward_busy_fraction=_ratio(res.prm.stats.busy_s, span, 0.0) if res.prm else 0.0,
        level_batch_first_quarter=_mean([first for first, _ in wide]),
        level_batch_last_quarter=_mean([last for _, last in wide]),
        spec_issued=spec.issued,
        spec_adopted=spec.adopted,
        spec_cancelled=spec.cancelled,
        spec_evicted=spec.evicted,
        hit_rate=spec.adopted / spec.issued if spec.issued else None,
        consumption_rate=spec.tokens_consumed / res.spec_tokens if res.spec_tokens else None,
        hit_rate_by_distance={
            str(d): {"issued": n, "adopted": a, "hit_rate": a / n if n else None}
            for d, (n, a) in sorted(spec.by_distance.items())
        },
        cancel_latency_p50_s=_pct(res.cancel_latencies_s, 50) if res.cancel_latencies_s else None,
        spec_pool_peak=res.pool_peak,
        slack_end=[round(s, 4) for s in res.slack],
        governor_trace=[
            [round(t, 3), round(slack, 4), pool, None if g is None else round(g, 4), windows, bound]
            for t, slack, pool, g, windows, bound in res.governor
        ],
        server=dict(getattr(res.gen, "server_info", {})),
        tpot_target=cfg.tpot_target if _governed(cfg) else None,
        objective=cfg.objective,
        profile_file=cfg.profile_file,
        wall_s=res.wall_s,
        sim_speed=_ratio(span, res.wall_s, 0.0),
        rewards={r.query_id: r.rewards for r in recs},
    )


def _model_name(res: BenchResult) -> str:
    """A real engine's model: its directory's name, or what the server says it serves."""
    if res.config.model:
        return Path(res.config.model).name
    return Path(str(getattr(res.gen, "server_info", {}).get("model", "?"))).name


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
        speedup=_ratio(spex.throughput_qpm, base.throughput_qpm, 0.0),
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
        compute_amplification=_ratio(spex.tokens_all, base.tokens_all, 1.0),
        cancel_latency_p50_s=spex.cancel_latency_p50_s,
        primary_tpot_ms=spex.primary_tpot_ms,
        primary_tpot_ms_baseline=base.primary_tpot_ms,
        tpot_ratio=_ratio(spex.primary_tpot_ms, base.primary_tpot_ms, 1.0),
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


def write_json(
    record: RunSummary | Comparison | Repeated | dict[str, Any],
    path: str | Path,
    run: dict[str, Any] | None = None,
) -> None:
    """The results file; `run`: how it was made (the command line, the version, every
    setting), kept under "run" so two runs that differ anywhere are told apart."""
    data = record if isinstance(record, dict) else record.to_json()
    if run is not None:
        data = {**data, "run": run}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
