"""`spex chaos`: the pipeline under seeded random faults, checked for lost, duplicated or
differing answers (the exit status says whether it held)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from rich.console import Console

from spex.proto import MODES
from spex.shared.core.search import SEARCHES

if TYPE_CHECKING:  # the chaos rig imports the services: only `spex chaos` loads it
    from spex.bench.chaos.run import ChaosReport

__all__ = ["add_chaos_parser", "chaos_command"]


def add_chaos_parser(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser("chaos", help="run the pipeline under seeded random faults and check nothing is lost")
    c.add_argument("--seed", type=int, default=0, help="the faults' and the questions' seed")
    c.add_argument("--duration", type=float, default=60.0, help="seconds of faults")
    c.add_argument("--questions", type=int, default=20, help="submitted evenly over the run")
    c.add_argument("--faults-per-minute", type=float, default=6.0, help="how often a fault is injected")
    c.add_argument("--algorithm", choices=sorted(SEARCHES), default="rebase", help="the questions' search")
    c.add_argument("--target", type=int, default=8, help="REBASE/ETS width or MCTS rollouts")
    c.add_argument(
        "--mode", choices=list(MODES), default="spex", help="baseline: plain search; spex: with speculation"
    )
    c.add_argument("--time-scale", type=float, default=0.01, help="wall seconds per simulated second")
    c.add_argument("--early-stop", action="store_true", help="submit with T3 on (trees checked against T3's)")
    c.add_argument(
        "--supervisor-faults",
        action="store_true",
        help="add the supervisor's own SIGKILL and restart (every service stops with it) as a fault kind",
    )
    c.add_argument(
        "--oom-faults",
        action="store_true",
        help="add Redis out of memory (maxmemory set tiny for a while, then restored) as a fault kind; "
        "an ingress is asked for new questions meanwhile and must refuse them with 503",
    )
    c.add_argument(
        "--cluster",
        action="store_true",
        help="on a Valkey Cluster (3 primaries, 3 replicas): its primaries killed and stalled",
    )
    c.add_argument("--json", default=None, help="write the report here")


def chaos_command(args: argparse.Namespace, console: Console) -> int:
    import asyncio

    from spex.bench.chaos.run import run_chaos

    if args.duration <= 0 or args.questions < 1 or args.faults_per_minute <= 0:
        raise ValueError("--duration, --questions and --faults-per-minute: must be positive")
    say = lambda msg: console.print(msg, markup=False, highlight=False)  # noqa: E731
    report = asyncio.run(
        run_chaos(
            args.seed,
            args.duration,
            args.questions,
            args.algorithm,
            args.target,
            args.mode,
            args.faults_per_minute,
            args.time_scale,
            args.early_stop,
            args.supervisor_faults,
            say,
            args.cluster,
            args.oom_faults,
        )  # fmt: skip
    )
    _print_report(report, console)
    if args.json:
        _write_report(report, args.json)
    return 0 if report.ok else 1


def _print_report(report: ChaosReport, console: Console) -> None:
    kinds = ", ".join(f"{n} {k}" for k, n in sorted(report.by_kind().items()))
    console.print(
        f"[bold]chaos seed {report.seed}[/]: {len(report.faults)} faults ({kinds}) in {report.wall_s:.0f} s"
    )
    restarted = {n: c for n, c in report.restarts.items() if c}
    console.print(f"restarts by the supervisor: {restarted or 'none'}")
    console.print(
        f"questions {report.questions}: lost {len(report.lost)}, failed {len(report.failed)}, "
        f"duplicated {len(report.duplicated)}, "
        f"differing trees {len(report.differing)}"
        + (f"; stopped early by T3 {report.early_stopped}" if report.early_stopped else "")
    )
    if report.refused or report.refused_wrongly:
        console.print(
            f"while Redis was out of memory the ingress refused {len(report.refused)} requests with 503, "
            f"{len(report.refused_wrongly)} wrongly"
        )
    listed = {
        "lost": report.lost, "failed": report.failed, "duplicated": report.duplicated,
        "differing": report.differing, "refused_wrongly": report.refused_wrongly,
    }  # fmt: skip
    for what, ids in listed.items():
        if ids:
            console.print(f"  {what}: {', '.join(ids)}")


def _write_report(report: ChaosReport, path: str) -> None:
    import json
    from dataclasses import asdict

    with open(path, "w") as f:
        json.dump(
            {**asdict(report), "faults": [asdict(x) for x in report.faults], "ok": report.ok}, f, indent=2
        )
