"""The `spex` command line: `spex bench` and `spex profile`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from shared.search.base import ALGORITHMS
from shared.sim.hardware import GPUS, MODELS, Profile, list_profiles, parse_profile
from shared.sim.workload import knob_table, load_knobs

__all__ = ["main"]

DEFAULT_JSON = "results/bench.json"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, naming the argument
        self.exit(2, f"{self.prog}: error: {message}\n")


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


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="spex", description="SPEX: speculative exploration for tree-of-thought serving")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    b = sub.add_parser("bench", help="run the virtual-time benchmark")
    b.add_argument("--algorithm", choices=sorted(ALGORITHMS), default="rebase")
    b.add_argument("--target", type=int, default=16, help="REBASE/ETS width or MCTS rollouts")
    b.add_argument("--batch-size", type=int, default=1, help="questions in flight")
    b.add_argument("--questions", type=int, default=16)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--profile", default="Llemma-7B@A6000", help="MODEL@GPU of the generator")
    b.add_argument("--reward-profile", default=None, help="MODEL@GPU of the PRM (default Llemma-7B@same GPU)")
    b.add_argument("--reward", choices=["prm", "logprob"], default="prm")
    b.add_argument("--answer-selection", choices=["majority", "weighted", "best"], default=None)
    b.add_argument("--workload", default=None, help="TOML file of workload knobs")
    b.add_argument("--set", action="append", default=[], metavar="KNOB=VALUE", help="override a knob")
    b.add_argument("--param", action="append", default=[], metavar="NAME=VALUE", help="algorithm parameter")
    b.add_argument("--json", default=DEFAULT_JSON, help=f"results file (default {DEFAULT_JSON})")
    b.add_argument("--list-profiles", action="store_true", help="print the profiles and exit")
    b.add_argument("--list-knobs", action="store_true", help="print the workload knobs and exit")
    b.add_argument("--quiet", action="store_true", help="no progress bar or table")

    pr = sub.add_parser("profile", help="print the simulated step-time curve of a profile")
    pr.add_argument("--gpu", required=True, choices=sorted(GPUS))
    pr.add_argument("--model", required=True, choices=sorted(MODELS))
    pr.add_argument("--batches", default="1,2,4,8,16,32,64,128,256")
    pr.add_argument("--contexts", default="128,512,1024,2048")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    console = Console()
    try:
        if args.command == "bench":
            return _bench(args, console)
        return _profile(args, console)
    except ValueError as exc:
        print(f"spex: error: {exc}", file=sys.stderr)
        return 2


def _bench(args: argparse.Namespace, console: Console) -> int:
    from shared.results import summarize, write_json
    from shared.vtime import BenchConfig, run_bench

    if args.list_profiles:
        table = Table("profile", "KV pool (tokens)", "bs-1 step (ms)", "knee batch")
        for p in list_profiles():
            table.add_row(
                p.name,
                f"{p.kv_capacity_tokens:,}",
                f"{p.decode_step_s(1, 512) * 1e3:.1f}",
                str(p.knee_batch()),
            )
        console.print(table)
        return 0
    if args.list_knobs:
        table = Table("knob", "default", "meaning")
        for name, value, doc in knob_table():
            table.add_row(name, str(value), doc)
        console.print(table)
        return 0
    cfg = BenchConfig(
        algorithm=args.algorithm,
        target=args.target,
        batch_size=args.batch_size,
        questions=args.questions,
        seed=args.seed,
        profile=args.profile,
        reward_profile=args.reward_profile,
        reward=args.reward,
        answer_selection=args.answer_selection,
        knobs=load_knobs(args.workload, args.set),
        params=_key_values(args.param, "--param"),
    )
    cfg.validate()
    if args.quiet:
        result = run_bench(cfg)
    else:
        columns = (
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=console, transient=True) as progress:
            task = progress.add_task(f"{cfg.algorithm}-{cfg.target} B={cfg.batch_size}", total=cfg.questions)
            result = run_bench(cfg, on_finish=lambda n: progress.update(task, completed=n))
    summary = summarize(result)
    write_json(summary, args.json)
    if not args.quiet:
        console.print(_summary_table(summary))
        console.print(f"results: {args.json}")
    return 0


def _summary_table(s: dict[str, Any]) -> Table:
    title = f"{s['algorithm']}-{s['target']}, B={s['batch_size']}, {s['questions']} questions, {s['profile']}"
    table = Table("metric", "value", title=title)
    rows = [
        ("throughput (questions/min)", f"{s['throughput_qpm']:.2f}"),
        ("accuracy", f"{s['accuracy']:.3f}"),
        ("latency p50 / p99 (s)", f"{s['latency_p50_s']:.1f} / {s['latency_p99_s']:.1f}"),
        ("tokens generated", f"{s['tokens_generated']:,}"),
        ("mean running batch", f"{s['mean_batch']:.2f}"),
        ("utilization (of roofline)", f"{s['utilization']:.3f}"),
        ("prefix-cache hit rate", f"{s['prefix_cache_hit_rate']:.3f}"),
        ("primary TPOT (ms)", f"{s['primary_tpot_ms']:.1f}"),
        ("peak KV (tokens)", f"{s['peak_kv_tokens']:,} of {s['kv_capacity_tokens']:,}"),
        ("virtual time / wall time", f"{s['makespan_s']:.0f} s / {s['wall_s']:.2f} s"),
        ("trees digest", s["trees_digest"]),
    ]
    if s.get("level_batch_first_quarter") is not None:
        rows.insert(
            5,
            (
                "BFS level batch, first / last quarter",
                f"{s['level_batch_first_quarter']:.1f} / {s['level_batch_last_quarter']:.1f}",
            ),
        )
    for row in rows:
        table.add_row(*row)
    return table


def _profile(args: argparse.Namespace, console: Console) -> int:
    profile: Profile = parse_profile(f"{args.model}@{args.gpu}")
    batches = [int(x) for x in args.batches.split(",")]
    contexts = [int(x) for x in args.contexts.split(",")]
    table = Table("batch", *(f"ctx {c}" for c in contexts), title=f"decode step (ms), {profile.name}")
    for b in batches:
        table.add_row(str(b), *(f"{profile.decode_step_s(b, b * c) * 1e3:.1f}" for c in contexts))
    console.print(table)
    console.print(
        f"KV pool {profile.kv_capacity_tokens:,} tokens; knee batch at ctx 512: {profile.knee_batch()}; "
        f"calibration {profile.gpu.family}: {profile.gpu.calibration}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
