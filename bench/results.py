"""Benchmark results: the metrics of a run (`RunSummary`, summarized from a `BenchResult`) and
the results file. A run's record is typed, its fields the results file's keys; `to_json`
gives the dict that is written. Two runs side by side are `comparison`'s.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypedDict

import numpy as np

from spex.bench.vtime import BenchConfig, BenchResult
from spex.shared.core.ids import digest

if TYPE_CHECKING:
    from spex.shared.engine.api import Engine

__all__ = ["WALL_CLOCK_FIELDS", "RunSummary", "bootstrap_ci95", "ratio", "summarize", "write_json"]

WALL_CLOCK_FIELDS = ("wall_s", "sim_speed")  # the only fields that differ between equal runs


class DistanceHits(TypedDict):
    """The speculative jobs issued at one distance from the frontier, and those adopted."""

    issued: int
    adopted: int
    hit_rate: float | None  # None: none issued


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
    knobs: dict[str, float]  # the synthetic workload's (`WorkloadKnobs`)
    params: dict[str, float | str]
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
    hit_rate_by_distance: dict[str, DistanceHits]
    cancel_latency_p50_s: float | None
    spec_pool_peak: int
    slack_end: list[float]  # each worker's TPOT slack at the end (the governor's, or the fixed one)
    # Worker 0's governor over the run: [time s, slack, speculative jobs admitted, TPOT growth
    # of the last window closed, windows closed, what bound the admission ("slack", "rate",
    # "limit", "demand")] each time one of the first three or the bound moved (`bench.governor`).
    governor_trace: list[list[float | str | None]]
    # The primaries' steps as the engines counted them for the governor (`EngineStats`): how
    # many, their growth over the same steps without speculation, and the parts of it the
    # speculative decode rows and prompt rows cost (engines that tell them apart); {} when no
    # engine counted any.
    primary_steps: dict[str, float]
    server: dict[str, object]  # a live server's own account of itself (version, model, flags); {} in process
    # What the governor held primary TPOT growth to (None: a fixed slack, no budget, or the
    # throughput objective, which holds none)
    tpot_target: float | None
    objective: str  # what speculation was admitted for: "slo" or "throughput"
    profile_file: str | None  # the measured step curve it budgeted by (None: the catalog's or static)
    # --- wall clock (the only fields that differ between equal runs)
    wall_s: float
    sim_speed: float
    # --- what chose the speculative work: a predictor's name (`speculation.PREDICTORS`: the
    # search's own hooks, the look-ahead, or auto), or "oracle" (the baseline's final trees:
    # the bound of lossless speculation, `bench.oracle`)
    predictor: str = "auto"
    # --- kept for comparisons, not written: query id -> node id -> reward
    rewards: dict[str, dict[str, float]] = field(default_factory=dict, repr=False)

    def to_json(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "rewards"}


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else 0.0


def ratio(num: float, den: float, empty: float) -> float:
    """`num` over `den`; `empty` when `den` is 0."""
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
        accuracy=ratio(sum(r.correct for r in recs), len(recs), 0.0),
        accuracy_ci95=bootstrap_ci95([float(r.correct) for r in recs], cfg.seed),
        answers={r.query_id: r.answer for r in recs},
        trees_digest=digest(*(r.digest for r in recs)),
        early_stopped_queries=sum(r.early_stopped for r in recs),
        tokens_generated=tree_tokens,
        nodes_generated=sum(r.nodes for r in recs),
        tokens_all=res.tokens_all,
        tokens_wasted=res.tokens_all - tree_tokens,
        compute_amplification=ratio(res.tokens_all, tree_tokens, 1.0),
        latency_p50_s=_pct(latencies, 50),
        latency_p99_s=_pct(latencies, 99),
        latencies_s={r.query_id: r.latency_s for r in recs},
        starved_rounds=res.starved_rounds,
        share_rounds=res.share_rounds,
        critical_path_s_per_query={k: v / len(recs) for k, v in asdict(res.critical_path).items()},
        step_tokens_p50=_pct(steps, 50),
        step_tokens_p90=_pct(steps, 90),
        step_tokens_max=int(max(steps, default=0)),
        steps_capped_fraction=ratio(sum(r.capped_steps for r in recs), len(steps), 0.0),
        mean_batch=ratio(sum(g.stats.batch_time for g in gens), sum(g.stats.decode_s for g in gens), 0.0),
        utilization=float(np.mean([g.utilization(span) for g in gens])),
        gpu_busy_fraction=ratio(sum(g.stats.busy_s for g in gens), span * len(gens), 0.0),
        prefix_cache_hit_rate=ratio(
            sum(g.stats.cached_tokens for g in gens), sum(g.stats.prompt_tokens for g in gens), 0.0
        ),
        primary_tpot_ms=float(np.mean(res.tpots_s)) * 1e3 if res.tpots_s else 0.0,
        peak_kv_tokens=max(g.stats.peak_kv_tokens for g in gens),
        kv_capacity_tokens=sum(g.capacity_tokens for g in gens),
        retractions=sum(g.stats.retractions for g in gens),
        reward_busy_fraction=ratio(res.prm.stats.busy_s, span, 0.0) if res.prm else 0.0,
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
        primary_steps=_primary_steps(gens),
        server=_server(res.gen),
        tpot_target=cfg.tpot_target if _governed(cfg) else None,
        objective=cfg.objective,
        profile_file=cfg.profile_file,
        wall_s=res.wall_s,
        predictor=cfg.predictor,
        sim_speed=ratio(span, res.wall_s, 0.0),
        rewards={r.query_id: r.rewards for r in recs},
    )


def _primary_steps(gens: list[Engine]) -> dict[str, float]:
    """The engines' account of their primaries' steps: count, growth, and the growth's parts."""
    steps = sum(g.stats.primary_steps for g in gens)
    alone = sum(g.stats.primary_alone_s for g in gens)
    if not steps or alone <= 0:
        return {}
    return {
        "steps": steps,
        "growth": round(sum(g.stats.primary_step_s for g in gens) / alone - 1, 4),
        "spec_decode": round(sum(g.stats.primary_spec_decode_s for g in gens) / alone, 4),
        "spec_prompt": round(sum(g.stats.primary_spec_prompt_s for g in gens) / alone, 4),
    }


def _model_name(res: BenchResult) -> str:
    """A real engine's model: its directory's name, or what the server says it serves."""
    if res.config.model:
        return Path(res.config.model).name
    return Path(str(_server(res.gen).get("model", "?"))).name


def _server(gen: Engine) -> dict[str, object]:
    """What a live server says of itself (version, model, flags); {} for an engine in process."""
    from spex.bench.vtime.wallclock import WallEngine  # the engine a live server's runs go through

    return gen.server_info if isinstance(gen, WallEngine) else {}


class Recorded(Protocol):
    """A result that writes itself as JSON (a run's summary, a comparison, a repeated one)."""

    def to_json(self) -> dict[str, object]: ...


def write_json(
    record: Recorded | dict[str, object],
    path: str | Path,
    run: dict[str, object] | None = None,
) -> None:
    """The results file; `run`: how it was made (the command line, the version, every
    setting), kept under "run" so two runs that differ anywhere are told apart."""
    data = record if isinstance(record, dict) else record.to_json()
    if run is not None:
        data = {**data, "run": run}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
