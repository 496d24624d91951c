"""Benchmark results: the DESIGN §7 metrics, the results file, and the summary table."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from shared.ids import digest
from shared.vtime import BenchResult

__all__ = ["WALL_CLOCK_FIELDS", "summarize", "write_json"]

WALL_CLOCK_FIELDS = ("wall_s", "sim_speed")  # the only fields that differ between equal runs


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else 0.0


def summarize(res: BenchResult) -> dict[str, Any]:
    cfg, recs = res.config, res.records
    latencies = [r.latency_s for r in recs]
    gen = res.gen
    first = [f for w, f, _ in res.level_batches if w >= 8]
    last = [lst for w, _, lst in res.level_batches if w >= 8]
    out: dict[str, Any] = {
        "mode": "baseline",
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
        "tokens_generated": sum(r.tokens for r in recs),
        "nodes_generated": sum(r.nodes for r in recs),
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
        "trees_digest": digest(*(r.digest for r in recs)),
        "wall_s": res.wall_s,
        "sim_speed": res.makespan_s / res.wall_s if res.wall_s else 0.0,
        "knobs": asdict(cfg.knobs),
        "params": dict(cfg.params),
        "answers": {r.query_id: r.answer for r in recs},
    }
    return out


def write_json(summary: dict[str, Any], path: str | Path) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
