"""`spex bench`: the virtual-time benchmark on the simulated GPU, the in-process engine or a
live server; the grid; the distributed and affinity benchmarks — run, tabled and recorded
(its flags are `bench_args.py`; `spex profile` is in `profile.py`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from spex.bench.comparison import Repeated, compare
from spex.bench.pairs import compare_pairs
from spex.bench.results import RunSummary, summarize, write_json
from spex.bench.vtime import BenchConfig, BenchResult, EngineFailed, run_bench
from spex.cli.bench_args import bench_config
from spex.cli.version import spex_version
from spex.shared.core.machine import QueryMachine
from spex.shared.core.speculation import PredictorFactory
from spex.shared.roofline.hardware import list_profiles
from spex.shared.runtime.settings import without_password
from spex.shared.sim.workload import knob_table

__all__ = ["bench_command", "run_record"]


def bench_command(args: argparse.Namespace, console: Console) -> int:
    if args.list_profiles:
        return _list_profiles(console)
    if args.list_knobs:
        return _list_knobs(console)
    if args.grid:
        from spex.bench.grid import run_grid

        return run_grid(args.grid_questions, args.grid_out, args.seed, console)
    cfg = bench_config(args)
    cfg.validate()
    if args.affinity_bench:
        from spex.bench.affinity import run_affinity

        workers = max(2, args.workers)
        scale = 0.01 if args.time_scale is None else args.time_scale
        out = run_affinity(cfg, workers, args.distributed, scale, args.grid_out, console)
        write_json(out, args.json, run_record(args))
        return 0
    if args.distributed:
        from spex.bench.distributed import run_distributed

        write_json(run_distributed(cfg, args.time_scale, console), args.json, run_record(args))
        return 0
    if args.repeats < 1 or (args.repeats > 1 and args.mode != "compare"):
        raise ValueError(f"--repeats: at least 1, and more only with --mode compare, not {args.repeats}")
    if args.oracle and args.mode != "compare":
        raise ValueError("--oracle: the bound is a comparison (--mode compare)")
    if args.oracle and args.predictor != "auto":
        raise ValueError("--oracle: the bound replaces the predictor; drop --predictor")
    try:
        return _bench(cfg, args, console)
    except EngineFailed as exc:
        print(f"spex: error: {exc}", file=sys.stderr)
        return 1


def _bench(cfg: BenchConfig, args: argparse.Namespace, console: Console) -> int:
    if args.mode != "compare":
        summary = summarize(_run(cfg, console, args.quiet))
        write_json(summary, args.json, run_record(args))
        summaries = [summary]
    else:
        repeated = _compare(cfg, args.repeats, console, args.quiet, args.oracle)
        last = repeated.pairs[-1]
        write_json(repeated if args.repeats > 1 else last, args.json, run_record(args))
        summaries = [last.baseline, last.spex]
    if not args.quiet:
        console.print(_summary_table(summaries))
        if args.repeats > 1:
            console.print(_repeats_line(repeated))
        console.print(f"results: {args.json}")
    return 0


def _compare(cfg: BenchConfig, repeats: int, console: Console, quiet: bool, oracle: bool = False) -> Repeated:
    def run(
        c: BenchConfig,
        on_finish: Callable[[QueryMachine], None] | None = None,
        predictor: PredictorFactory | None = None,
    ) -> BenchResult:
        return _run(c, console, quiet, on_finish, predictor)

    return compare_pairs(cfg, repeats, run, oracle)


def _repeats_line(repeated: Repeated) -> str:
    out = repeated.to_json()
    (s_lo, s_hi), (t_lo, t_hi) = out["speedup_ci95"], out["tpot_ratio_ci95"]
    return (
        f"{out['repeats']} interleaved pairs: speedup {out['speedup']:.2f}× "
        f"(95% interval {s_lo:.2f}–{s_hi:.2f}), "
        f"primary TPOT ×{out['tpot_ratio']:.2f} ({t_lo:.2f}–{t_hi:.2f}); "
        f"every run the same trees: {'yes' if out['trees_identical'] else 'no'}"
    )


def _list_profiles(console: Console) -> int:
    from spex.shared.roofline.capacity import spare_concurrency

    caption = "batch-1 step and k_total (+10%) at ctx 512"
    table = Table("profile", "KV tokens", "step ms", "k_total", caption=caption)
    for p in list_profiles():
        knee = 1 + spare_concurrency(p, 1, 512, 512, 0.10)
        table.add_row(p.name, f"{p.kv_capacity_tokens:,}", f"{p.decode_step_s(1, 512) * 1e3:.1f}", str(knee))
    console.print(table)
    return 0


def _list_knobs(console: Console) -> int:
    table = Table("knob", "default", "meaning")
    for name, value, doc in knob_table():
        table.add_row(name, str(value), doc)
    console.print(table)
    return 0


def _run(
    cfg: BenchConfig,
    console: Console,
    quiet: bool,
    on_finish: Callable[[QueryMachine], None] | None = None,
    predictor: PredictorFactory | None = None,
) -> BenchResult:
    if quiet:
        return run_bench(cfg, on_finish, predictor)
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        label = f"{cfg.mode} {cfg.algorithm}-{cfg.target} B={cfg.batch_size}"
        task = progress.add_task(label, total=cfg.questions)

        def finished(machine: QueryMachine) -> None:
            progress.advance(task)
            if on_finish is not None:
                on_finish(machine)

        return run_bench(cfg, finished, predictor)


ROWS: list[tuple[str, str, str]] = [
    ("throughput (questions/min)", "throughput_qpm", "{:.2f}"),
    ("accuracy", "accuracy", "{:.3f}"),
    ("accuracy, 95% interval", "accuracy_ci95", "{0[0]:.3f}–{0[1]:.3f}"),
    ("latency p50 (s)", "latency_p50_s", "{:.1f}"),
    ("latency p99 (s)", "latency_p99_s", "{:.1f}"),
    ("tokens in final trees", "tokens_generated", "{:,}"),
    ("tokens generated in all", "tokens_all", "{:,}"),
    ("mean running batch", "mean_batch", "{:.2f}"),
    ("utilization (of roofline)", "utilization", "{:.3f}"),
    ("prefix-cache hit rate", "prefix_cache_hit_rate", "{:.3f}"),
    ("primary TPOT (ms)", "primary_tpot_ms", "{:.1f}"),
    ("peak KV (tokens)", "peak_kv_tokens", "{:,}"),
    ("speculative hit rate", "hit_rate", "{:.3f}"),
    ("speculative consumption rate", "consumption_rate", "{:.3f}"),
    ("cancel latency p50 (s)", "cancel_latency_p50_s", "{:.3f}"),
    ("makespan on the engine's clock (s)", "makespan_s", "{:.1f}"),
    ("wall time (s)", "wall_s", "{:.2f}"),
    ("step tokens p50 / p90", "step_tokens_p50", "{:.0f}"),
    ("steps at the token cap", "steps_capped_fraction", "{:.3f}"),
    ("trees digest", "trees_digest", "{}"),
]


def _summary_table(summaries: list[RunSummary]) -> Table:
    s = summaries[-1]
    title = f"{s.algorithm}-{s.target}, B={s.batch_size}, {s.questions} questions, {s.profile}"
    table = Table("metric", *(x.mode for x in summaries), title=title)
    for label, key, fmt in ROWS:
        values = [getattr(x, key) for x in summaries]
        cells = [fmt.format(v) if v is not None else "—" for v in values]
        if key == "step_tokens_p50":
            cells = [f"{x.step_tokens_p50:.0f} / {x.step_tokens_p90:.0f}" for x in summaries]
        if any(c != "—" for c in cells):
            table.add_row(label, *cells)
    if s.level_batch_first_quarter is not None:
        cells = [f"{x.level_batch_first_quarter:.1f} / {x.level_batch_last_quarter:.1f}" for x in summaries]
        table.add_row("BFS level batch, first / last quarter", *cells)
    if len(summaries) == 2:
        both = compare(*summaries)
        table.add_section()
        table.add_row("speedup", "", f"{both.speedup:.2f}×")
        table.add_row("compute amplification", "", f"{both.compute_amplification:.2f}")
        table.add_row(
            "trees and answers identical", "", "yes" if both.trees_identical and both.same_answers else "no"
        )
        diff = both.max_reward_difference
        table.add_row("largest reward difference", "", "—" if diff is None else f"{diff:.1e}")
        table.add_row("lossless", "", "yes" if both.lossless else "no")
    return table


def run_record(args: argparse.Namespace) -> dict[str, Any]:
    """How a results file was made: the command line as typed, SPEX's version, and every
    setting the bench ran with (each flag's value, defaults included)."""
    settings = {k: v for k, v in sorted(vars(args).items()) if _plain(v)}
    command = ["spex", *(without_password(a) if "://" in a else a for a in sys.argv[1:])]
    for key, value in settings.items():
        if isinstance(value, str) and "://" in value:
            settings[key] = without_password(value)  # a URL's credentials are not the run's
    return {"command": command, "version": spex_version(), "settings": settings}


def _plain(value: object) -> bool:
    if isinstance(value, list | tuple):
        return all(_plain(v) for v in value)
    return isinstance(value, str | int | float | bool | None)
