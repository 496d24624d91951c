"""Benchmark results: the DESIGN §7 metrics, the results file, and the summary table."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from shared.ids import digest
from shared.vtime import BenchResult

__all__ = ["WALL_CLOCK_FIELDS", "compare", "summarize", "write_json"]

WALL_CLOCK_FIELDS = ("wall_s", "sim_speed")  # the only fields that differ between equal runs


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else 0.0


def summarize(res: BenchResult) -> dict[str, Any]:
    cfg, recs = res.config, res.records
    latencies = [r.latency_s for r in recs]
    gen = res.gen
    first = [f for w, f, _ in res.level_batches if w >= 8]
    last = [lst for w, _, lst in res.level_batches if w >= 8]
    tree_tokens = sum(r.tokens for r in recs)
    spec = res.spec
    out: dict[str, Any] = {
        "mode": cfg.mode,
        "t1": cfg.mode == "spex" and cfg.t1,
        "t2": cfg.mode == "spex" and cfg.t2,
        "early_stop": cfg.early_stop.enabled,
        "algorithm": cfg.algorithm,
        "target": cfg.target,
        "batch_size": cfg.batch_size,
        "questions": len(recs),
        "seed": cfg.seed,
        "profile": cfg.profile,
        "reward_profile": cfg.reward_profile_name if cfg.reward == "prm" else None,
        "reward": cfg.reward,
        "throughput_qpm": len(recs) / res.makespan_s * 60 if res.makespan_s else 0.0,
        "makespan_s": res.makespan_s,
        "accuracy": sum(r.correct for r in recs) / len(recs) if recs else 0.0,
        "tokens_generated": tree_tokens,
        "nodes_generated": sum(r.nodes for r in recs),
        "tokens_all": res.tokens_all,
        "tokens_wasted": res.tokens_all - tree_tokens,
        "compute_amplification": res.tokens_all / tree_tokens if tree_tokens else 1.0,
        "latency_p50_s": _pct(latencies, 50),
        "latency_p99_s": _pct(latencies, 99),
        "mean_batch": gen.stats.mean_batch,
        "utilization": gen.utilization(res.makespan_s),
        "gpu_busy_fraction": gen.stats.busy_s / res.makespan_s if res.makespan_s else 0.0,
        "prefix_cache_hit_rate": gen.stats.cache_hit_rate,
        "primary_tpot_ms": float(np.mean(res.tpots_s)) * 1e3 if res.tpots_s else 0.0,
        "peak_kv_tokens": gen.stats.peak_kv_tokens,
        "kv_capacity_tokens": gen.capacity_tokens,
        "retractions": gen.stats.retractions,
        "reward_busy_fraction": res.prm.stats.busy_s / res.makespan_s if res.prm and res.makespan_s else 0.0,
        "level_batch_first_quarter": float(np.mean(first)) if first else None,
        "level_batch_last_quarter": float(np.mean(last)) if last else None,
        "spec_issued": spec.issued,
        "spec_adopted": spec.adopted,
        "spec_cancelled": spec.cancelled,
        "spec_evicted": spec.evicted,
        "hit_rate": spec.adopted / spec.issued if spec.issued else None,
        "consumption_rate": spec.tokens_consumed / res.spec_tokens if res.spec_tokens else None,
        "hit_rate_by_distance": {
            str(d): {"issued": n, "adopted": a, "hit_rate": a / n if n else None}
            for d, (n, a) in sorted(spec.by_distance.items())
        },
        "cancel_latency_p50_s": _pct(res.cancel_latencies_s, 50) if res.cancel_latencies_s else None,
        "spec_pool_peak": res.pool_peak,
        "critical_path_s_per_query": {k: v / len(recs) for k, v in asdict(res.critical_path).items()},
        "early_stopped_queries": sum(r.early_stopped for r in recs),
        "trees_digest": digest(*(r.digest for r in recs)),
        "wall_s": res.wall_s,
        "sim_speed": res.makespan_s / res.wall_s if res.wall_s else 0.0,
        "knobs": asdict(cfg.knobs),
        "params": dict(cfg.params),
        "answers": {r.query_id: r.answer for r in recs},
    }
    return out


def compare(base: dict[str, Any], spex: dict[str, Any]) -> dict[str, Any]:
    """One results record for a baseline and a SPEX run of the same workload and seeds."""
    same_answers = base["answers"] == spex["answers"]
    out = {
        "mode": "compare",
        "algorithm": spex["algorithm"],
        "target": spex["target"],
        "batch_size": spex["batch_size"],
        "questions": spex["questions"],
        "seed": spex["seed"],
        "profile": spex["profile"],
        "t1": spex["t1"],
        "t2": spex["t2"],
        "early_stop": spex["early_stop"],
        "speedup": spex["throughput_qpm"] / base["throughput_qpm"] if base["throughput_qpm"] else 0.0,
        "lossless": base["trees_digest"] == spex["trees_digest"] and same_answers,
        "same_answers": same_answers,
        "accuracy_baseline": base["accuracy"],
        "accuracy_spex": spex["accuracy"],
        "throughput_qpm_baseline": base["throughput_qpm"],
        "throughput_qpm_spex": spex["throughput_qpm"],
        "hit_rate": spex["hit_rate"],
        "consumption_rate": spex["consumption_rate"],
        "tokens_wasted": spex["tokens_all"] - base["tokens_all"],
        "compute_amplification": spex["tokens_all"] / base["tokens_all"] if base["tokens_all"] else 1.0,
        "cancel_latency_p50_s": spex["cancel_latency_p50_s"],
        "primary_tpot_ms": spex["primary_tpot_ms"],
        "primary_tpot_ms_baseline": base["primary_tpot_ms"],
        "tpot_ratio": spex["primary_tpot_ms"] / base["primary_tpot_ms"] if base["primary_tpot_ms"] else 1.0,
        "peak_kv_tokens": spex["peak_kv_tokens"],
        "peak_kv_tokens_baseline": base["peak_kv_tokens"],
        "latency_p50_s": spex["latency_p50_s"],
        "latency_p99_s": spex["latency_p99_s"],
        "latency_p50_s_baseline": base["latency_p50_s"],
        "latency_p99_s_baseline": base["latency_p99_s"],
        "trees_digest": spex["trees_digest"],
        "trees_digest_baseline": base["trees_digest"],
        "wall_s": base["wall_s"] + spex["wall_s"],
        "baseline": base,
        "spex": spex,
    }
    return out


def write_json(summary: dict[str, Any], path: str | Path) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
