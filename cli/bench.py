"""`spex bench`: the virtual-time benchmark on the simulated GPU, the in-process engine or a
live server; the grid; the distributed and affinity benchmarks (`spex profile` is in
`profile.py`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from spex.bench.pairs import compare_pairs
from spex.bench.results import Repeated, RunSummary, compare, summarize, write_json
from spex.bench.vtime import BenchConfig, BenchResult, EngineFailed, run_bench
from spex.bench.vtime.config import SCHEDULINGS
from spex.cli.version import spex_version
from spex.proto import ALGORITHMS, CONTENTS, MODES, SPLITS
from spex.shared.content.prompts import DEFAULT_SPLIT, DEFAULT_TEMPERATURE
from spex.shared.core.machine import REWARDS, QueryMachine
from spex.shared.core.search.answers import SELECTIONS
from spex.shared.core.search.base import preset_params
from spex.shared.core.spec.early_stop import EarlyStop
from spex.shared.core.speculation import PredictorFactory, algorithm_predictor
from spex.shared.engine.api import ENGINES
from spex.shared.roofline.admission import OBJECTIVES
from spex.shared.roofline.hardware import list_profiles
from spex.shared.runtime.settings import without_password
from spex.shared.sim.workload import WorkloadKnobs, knob_table, load_knobs

__all__ = ["add_bench_parser", "parse_mix", "bench_command"]

DEFAULT_JSON = "results/bench.json"


def add_bench_parser(sub: argparse._SubParsersAction) -> None:
    b = sub.add_parser("bench", help="run the virtual-time benchmark")
    _workload_args(b)
    _speculation_args(b)
    _driver_args(b)
    _engine_args(b)


def _workload_args(b: argparse.ArgumentParser) -> None:
    """The search, the questions, the hardware and the workload."""
    b.add_argument("--algorithm", choices=ALGORITHMS, default="rebase")
    b.add_argument("--target", type=int, default=16, help="REBASE/ETS width or MCTS rollouts")
    b.add_argument("--batch-size", type=int, default=1, help="questions in flight")
    b.add_argument("--questions", type=int, default=16)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--profile", default="Llemma-7B@A6000", help="MODEL@GPU of the generator")
    b.add_argument("--reward-profile", default=None, help="MODEL@GPU of the PRM (default Llemma-7B@same GPU)")
    b.add_argument("--reward", choices=list(REWARDS), default="prm")
    b.add_argument("--answer-selection", choices=list(SELECTIONS), default=None)
    b.add_argument("--workload", default=None, help="TOML file of workload knobs")
    b.add_argument("--set", action="append", default=[], metavar="KNOB=VALUE", help="override a knob")
    b.add_argument("--param", action="append", default=[], metavar="NAME=VALUE", help="algorithm parameter")
    b.add_argument("--preset", default=None, help="named algorithm parameters (ets: ets-16, ets-64, ets-256)")
    b.add_argument(
        "--mix", default=None, metavar="ALGO-N,...", help="a mixed workload: each question runs one of these"
    )
    b.add_argument("--json", default=DEFAULT_JSON, help=f"results file (default {DEFAULT_JSON})")


def _speculation_args(b: argparse.ArgumentParser) -> None:
    """SPEX's switches: T1, T2, T3 and what holds speculation back."""
    b.add_argument("--mode", choices=[*MODES, "compare"], default="baseline")
    b.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="compare: pairs of baseline and SPEX, interleaved (the speedup's 95%% interval over them)",
    )
    b.add_argument(
        "--oracle",
        action="store_true",
        help="compare: SPEX speculates the baseline's final trees (the bound of lossless speculation)",
    )
    b.add_argument("--no-t1", action="store_true", help="no intra-query speculation")
    b.add_argument("--no-t2", action="store_true", help="even speculative shares instead of T2's softmax")
    b.add_argument("--early-stop", action="store_true", help="T3: stop a search once its answer is settled")
    b.add_argument("--early-stop-alpha", type=float, default=0.5, help="T3 margin scale α")
    b.add_argument("--early-stop-min", type=int, default=None, help="T3 minimum answers t")
    b.add_argument("--early-stop-weight", choices=["min", "last"], default="min", help="T3 answer weight")
    b.add_argument(
        "--early-stop-runner-up", choices=["zero", "leader"], default="zero", help="T3 avg(w_2nd) alone"
    )
    b.add_argument(
        "--early-stop-threshold", choices=["artifact", "quarter"], default="artifact", help="T3 progress rule"
    )
    b.add_argument("--early-stop-median", type=float, default=None, help="T3 median gate θ (default off)")
    b.add_argument("--max-amplification", type=float, default=None, help="cap on generated/consumed tokens")
    b.add_argument("--k-total", type=int, default=None, help="static concurrency cap (default: roofline)")
    b.add_argument(
        "--tpot-target",
        type=float,
        default=0.05,
        help="primary TPOT growth speculation is held to (0.05 = +5%%)",
    )
    b.add_argument(
        "--tpot-slack", type=float, default=None, help="a fixed roofline slack instead of the target"
    )
    b.add_argument(
        "--no-tpot-budget",
        dest="tpot_budget",
        action="store_false",
        help="no TPOT budget: speculation takes whatever the KV pool holds (the T2 ablation's floor)",
    )
    b.add_argument(
        "--scheduling",
        choices=list(SCHEDULINGS),
        default="sglang",
        help="sim engine: sglang (priority admission only) or paused (per-step pausing too)",
    )
    b.add_argument(
        "--objective",
        choices=list(OBJECTIVES),
        default="slo",
        help="what speculation is admitted for: slo (primary TPOT within --tpot-target, the serving "
        "default) or throughput (expected useful tokens per second: offline searches)",
    )


def _driver_args(b: argparse.ArgumentParser) -> None:
    """Which driver runs the workload (one run, the grid, the services, the affinity bench)."""
    b.add_argument("--grid", action="store_true", help="run the paper's main figure and ablations")
    b.add_argument("--distributed", action="store_true", help="run through the real services (sim engine)")
    b.add_argument(
        "--time-scale",
        type=float,
        default=None,
        help="--distributed: wall s per simulated s (default: measured)",
    )
    b.add_argument("--grid-questions", type=int, default=32, help="questions per grid cell")
    b.add_argument("--workers", type=int, default=1, help="generator workers, one simulated engine each")
    b.add_argument(
        "--routing", choices=["affinity", "least-loaded"], default="affinity", help="where a query's jobs go"
    )
    b.add_argument("--worker-slots", type=int, default=0, help="jobs per worker before spilling (0: no cap)")
    b.add_argument(
        "--affinity-bench",
        action="store_true",
        help="--workers N, affinity routing on and off side by side (--distributed: the services too)",
    )
    b.add_argument("--grid-out", default="docs", help="where the grid writes results and plots")
    b.add_argument("--list-profiles", action="store_true", help="print the profiles and exit")
    b.add_argument("--list-knobs", action="store_true", help="print the workload knobs and exit")
    b.add_argument("--quiet", action="store_true", help="no progress bar or table")


def _engine_args(b: argparse.ArgumentParser) -> None:
    """The engine and the content: the simulated GPU, or a real model on real questions."""
    b.add_argument(
        "--engine",
        choices=list(ENGINES),
        default="sim",
        help="sim (the simulated GPU), hf (in process), or a live vllm or sglang server (--engine-url)",
    )
    b.add_argument("--engine-url", default=None, help="vllm, sglang: the server's URL")
    b.add_argument("--prm-url", default=None, help="vllm, sglang: a reward server (SGLang --is-embedding)")
    b.add_argument(
        "--model",
        default=None,
        help="hf: the generator's model directory; vllm, sglang: the served model's (its chat template)",
    )
    b.add_argument("--prm", default=None, help="a local reward-model directory (default: the simulated PRM)")
    b.add_argument(
        "--dataset", default=None, help="real content: a JSONL file, or a shipped set: math500, easy"
    )
    b.add_argument("--level", type=int, default=None, help="real content: the dataset's questions of a level")
    b.add_argument(
        "--content", choices=list(CONTENTS), default=None, help="default: real with --dataset, else synthetic"
    )
    b.add_argument("--deterministic", action="store_true", help="hf: batch-invariant outputs (lossless)")
    b.add_argument("--max-running", type=int, default=16, help="hf: sequences decoded together")
    b.add_argument(
        "--sampling-temperature",
        type=float,
        default=DEFAULT_TEMPERATURE,
        help=f"real content: sampling temperature (default {DEFAULT_TEMPERATURE}; 0 is greedy)",
    )
    b.add_argument("--device", default="cpu", help="hf: torch device (cuda on a GPU machine)")
    b.add_argument(
        "--dtype",
        choices=["float32", "bfloat16"],
        default="",
        help="hf: weights and KV (default: as saved; bfloat16 on a GPU)",
    )
    b.add_argument(
        "--no-cuda-graphs",
        dest="cuda_graphs",
        action="store_false",
        help="hf on CUDA: decode passes run eagerly",
    )
    b.add_argument(
        "--profile-file",
        default=None,
        help="a curve from `spex profile --json`: a real engine budgets speculation by it at --tpot-target; "
        "the sim engine steps as it says",
    )
    b.add_argument(
        "--step-split", choices=list(SPLITS), default=DEFAULT_SPLIT, help="real content: where a step ends"
    )
    b.add_argument(
        "--min-step-tokens",
        type=int,
        default=0,
        help="real content: a shorter step goes on past its delimiter",
    )
    b.add_argument(
        "--max-step-tokens", type=int, default=None, help="a step's token cap (the knob step_token_cap)"
    )


def parse_mix(text: str | None) -> tuple[tuple[str, int], ...]:
    """`rebase-16,rstar-10` -> (("rebase", 16), ("rstar", 10)); a bad item names itself."""
    out = []
    for item in (text or "").split(","):
        if not item.strip():
            continue
        name, _, target = item.strip().rpartition("-")
        if not name or not target.isdigit():
            raise ValueError(f"mix: {item.strip()!r} is not ALGORITHM-TARGET (e.g. rebase-16)")
        out.append((name, int(target)))
    return tuple(out)


def _knobs(args: argparse.Namespace) -> WorkloadKnobs:
    cap = [] if args.max_step_tokens is None else [f"step_token_cap={args.max_step_tokens}"]
    return load_knobs(args.workload, [*(args.set or []), *cap])


def _key_values(items: Sequence[str], what: str) -> dict[str, float]:
    out = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep:
            raise ValueError(f"{what} {item!r}: expected KEY=VALUE")
        try:
            out[key.strip()] = float(raw)
        except ValueError:
            raise ValueError(f"{what} {key.strip()!r}: {raw!r} is not a number") from None
    return out


def bench_command(args: argparse.Namespace, console: Console) -> int:
    if args.list_profiles:
        return _list_profiles(console)
    if args.list_knobs:
        return _list_knobs(console)
    if args.grid:
        from spex.bench.grid import run_grid

        return run_grid(args.grid_questions, args.grid_out, args.seed, console)
    cfg = _config(args)
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
        c: BenchConfig, on_finish: Any = None, predictor: PredictorFactory = algorithm_predictor
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


def _config(args: argparse.Namespace) -> BenchConfig:
    """The run `spex bench`'s flags describe (`--mode compare`: the spex run; its baseline is a copy)."""
    return BenchConfig(
        algorithm=args.algorithm,
        target=args.target,
        batch_size=args.batch_size,
        questions=args.questions,
        seed=args.seed,
        profile=args.profile,
        reward_profile=args.reward_profile,
        reward=args.reward,
        answer_selection=args.answer_selection,
        knobs=_knobs(args),
        params=preset_params(args.algorithm, args.preset, _key_values(args.param, "--param")),
        mode="spex" if args.mode == "compare" else args.mode,
        t1=not args.no_t1,
        t2=not args.no_t2,
        early_stop=EarlyStop(
            args.early_stop,
            args.early_stop_alpha,
            args.early_stop_min,
            args.early_stop_median,
            args.early_stop_weight,
            args.early_stop_runner_up,
            args.early_stop_threshold,
        ),
        max_amplification=args.max_amplification,
        k_total=args.k_total,
        tpot_target=args.tpot_target,
        tpot_slack=args.tpot_slack,
        tpot_budget=args.tpot_budget,
        scheduling=args.scheduling,
        objective=args.objective,
        backend=args.engine,
        model=args.model,
        prm=args.prm,
        engine_url=args.engine_url,
        prm_url=args.prm_url,
        content=args.content or ("real" if args.dataset else "synthetic"),
        dataset=args.dataset,
        level=args.level,
        deterministic=args.deterministic,
        max_running=args.max_running,
        sampling_temperature=args.sampling_temperature,
        step_split=args.step_split,
        min_step_tokens=args.min_step_tokens,
        device=args.device,
        dtype=args.dtype,
        cuda_graphs=args.cuda_graphs,
        profile_file=args.profile_file,
        workers=args.workers,
        affinity=args.routing == "affinity",
        worker_slots=args.worker_slots,
        mix=parse_mix(args.mix),
    )


def _run(
    cfg: BenchConfig,
    console: Console,
    quiet: bool,
    on_finish: Callable[[QueryMachine], None] | None = None,
    predictor: PredictorFactory = algorithm_predictor,
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
