"""`spex bench --affinity`: several generator workers, a query's jobs routed by prefix
affinity or not, side by side on the same workload and seeds — in virtual time, and (with
`--distributed`) through the real services with one simulated engine per generator process.

Reports per side: throughput, the generators' prefix-cache hit rate (cached / prompt tokens),
the mean decode batch, and whether the trees equal the single-worker run's (routing must not
change a search). Writes a results file and a plot.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from spex.bench.distributed import drive
from spex.bench.results import summarize
from spex.bench.vtime import BenchConfig, run_bench
from spex.proto.names import Partitions
from spex.services.launcher import up
from spex.shared.runtime.connect import redis_client
from spex.shared.runtime.settings import Settings
from spex.shared.runtime.workers import WorkerRegistry

__all__ = ["run_affinity"]


def run_affinity(
    cfg: BenchConfig, workers: int, distributed: bool, time_scale: float, out_dir: str, console: Console
) -> dict[str, Any]:
    single = summarize(run_bench(replace(cfg, workers=1)))
    out: dict[str, Any] = {
        "algorithm": cfg.algorithm,
        "target": cfg.target,
        "batch_size": cfg.batch_size,
        "questions": cfg.questions,
        "mode": cfg.mode,
        "seed": cfg.seed,
        "workers": workers,
        "single_worker": {
            "throughput_qpm": single.throughput_qpm,
            "prefix_cache_hit_rate": single.prefix_cache_hit_rate,
        },
    }
    for affinity in (True, False):
        side = "on" if affinity else "off"
        vt = summarize(run_bench(replace(cfg, workers=workers, affinity=affinity)))
        out[side] = {
            "virtual_time": {
                "throughput_qpm": vt.throughput_qpm,
                "prefix_cache_hit_rate": vt.prefix_cache_hit_rate,
                "mean_batch": vt.mean_batch,
                "trees_equal_single_worker": vt.trees_digest == single.trees_digest,
            }
        }
        if distributed:
            settings = Settings(time_scale=time_scale, affinity=affinity)
            with up(settings, generators=workers) as live:
                run = asyncio.run(drive(live, cfg, cfg.mode))
                hit_rate, per_worker = asyncio.run(_hit_rate(live))
            expected = {r.query_id: r.digest for r in run_bench(replace(cfg, workers=1)).records}
            answers = run["answers"]
            out[side]["distributed"] = {
                "throughput_qpm": cfg.questions / (run["wall_s"] / time_scale) * 60,
                "prefix_cache_hit_rate": hit_rate,
                "jobs_per_worker": per_worker,
                "trees_equal_single_worker": all(
                    a is not None and a.tree_digest == expected[q] for q, a in answers.items()
                ),
                "time_scale": time_scale,
            }
    for kind in ("virtual_time", "distributed"):
        if kind in out["on"]:
            on, off = out["on"][kind], out["off"][kind]
            out[f"{kind}_throughput_on_over_off"] = on["throughput_qpm"] / off["throughput_qpm"]
    _print(out, console)
    _plot(out, Path(out_dir))
    return out


async def _hit_rate(live: Settings) -> tuple[float, dict[str, int]]:
    """The generators' prefix-cache hit rate (cached / prompt tokens, all workers), from their
    load reports."""
    r = redis_client(live)
    try:
        loads = list((await WorkerRegistry(r, Partitions(live.partitions)).live()).values())
    finally:
        await r.aclose()
    prompt = sum(w.prompt_tokens for w in loads)
    rate = sum(w.cached_tokens for w in loads) / prompt if prompt else 0.0
    return rate, {w.worker: w.jobs_done for w in sorted(loads, key=lambda w: w.worker)}


def _print(out: dict[str, Any], console: Console) -> None:
    table = Table(
        "",
        "throughput q/min",
        "prefix-cache hit rate",
        "trees = 1 worker",
        title=f"{out['workers']} workers, affinity on/off: {out['algorithm']}-{out['target']}, "
        f"B={out['batch_size']}, {out['questions']} questions, {out['mode']}",
    )
    for kind in ("virtual_time", "distributed"):
        for side in ("on", "off"):
            row = out[side].get(kind)
            if row is not None:
                table.add_row(
                    f"{kind} {side}",
                    f"{row['throughput_qpm']:.2f}",
                    f"{row['prefix_cache_hit_rate']:.3f}",
                    str(row["trees_equal_single_worker"]),
                )
    console.print(table)


def _plot(out: dict[str, Any], out_dir: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = [k for k in ("virtual_time", "distributed") if k in out["on"]]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    metrics = (("prefix_cache_hit_rate", "prefix-cache hit rate"), ("throughput_qpm", "questions / min"))
    for ax, (metric, label) in zip(axes, metrics, strict=True):
        x = range(len(kinds))
        ax.bar([i - 0.2 for i in x], [out["on"][k][metric] for k in kinds], 0.4, label="affinity on")
        ax.bar([i + 0.2 for i in x], [out["off"][k][metric] for k in kinds], 0.4, label="affinity off")
        ax.set_xticks(list(x), [k.replace("_", " ") for k in kinds])
        ax.set_ylabel(label)
    axes[0].legend(loc="lower right")
    cell = f"{out['algorithm']}-{out['target']}, B={out['batch_size']}, {out['mode']}"
    fig.suptitle(f"{out['workers']} workers: {cell}")
    fig.tight_layout()
    out_dir.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_dir / "affinity.png", dpi=120)
    plt.close(fig)
