"""Does the `slo` objective keep its word? Primary TPOT with speculation against without, for
the shipped easy set on a real engine, at several batch sizes: each cell's baseline and SPEX
runs interleaved in pairs (`pairs.compare_pairs`), the TPOT ratio and speedup quoted with
their 95% intervals over the pairs, every run's trees compared.

    python -m spex.bench.slo --engine hf --model DIR --profile-file CURVE --out docs/real/slo
    python -m spex.bench.slo --engine vllm --engine-url URL --model DIR --profile-file CURVE ...
    python -m spex.bench.slo --engine sim --profile-file CURVE --workload W.toml ...

Each cell writes its results file (`<engine>-<search>-B<b>-<objective>.json`, what `spex bench
--mode compare --repeats N` writes); the run writes `slo.md` (the cells as `bench.table` rows),
and `slo.png`: each cell's TPOT ratio with its interval beside the target, and the growth of
the primaries' steps the engine measured (what the governor steers by). On the simulator
(`--engine sim`) the cells run on the synthetic workload shaped like the real runs
(`--workload`) with the same measured curve: the simulator's answer to the same question.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from spex.bench.pairs import compare_pairs
from spex.bench.results import write_json
from spex.bench.table import HEADER, row
from spex.bench.vtime import BenchConfig
from spex.shared.roofline.admission import OBJECTIVES
from spex.shared.sim.workload import WorkloadKnobs, load_knobs

__all__ = ["cell_config", "main"]

SEARCHES = ("rebase-4", "rstar-4")
BATCHES = (1, 4, 8)
STEP_TOKENS = 64  # a step's token cap, as every real-engine cell of the docs


def cell_config(args: argparse.Namespace, search: str, batch: int) -> BenchConfig:
    """The SPEX side of one cell (its baseline is the same with speculation off)."""
    algorithm, _, target = search.rpartition("-")
    knobs = load_knobs(args.workload) if args.workload else WorkloadKnobs()
    real = args.engine != "sim"
    return BenchConfig(
        algorithm=algorithm,
        target=int(target),
        batch_size=batch,
        questions=max(args.questions, batch),
        reward="logprob",
        params={"max_depth": 4},
        knobs=replace(knobs, step_token_cap=STEP_TOKENS),
        mode="spex",
        backend=args.engine,
        model=args.model,
        engine_url=args.engine_url,
        content="real" if real else "synthetic",
        dataset=args.dataset if real else None,
        deterministic=args.deterministic,
        dtype=args.dtype,
        max_running=16,
        profile_file=args.profile_file,
        tpot_target=args.tpot_target,
        objective=args.objective,
    )


def _cell_name(cfg: BenchConfig) -> str:
    return f"{cfg.backend}-{cfg.algorithm}-{cfg.target}-B{cfg.batch_size}-{cfg.objective}"


def plot(reports: list[dict[str, Any]], target: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6))
    for i, r in enumerate(reports):
        low, high = r["tpot_ratio_ci95"]
        label = "primary TPOT × (95%)" if i == 0 else None
        ax.errorbar([i], [r["tpot_ratio"]], yerr=[[r["tpot_ratio"] - low], [high - r["tpot_ratio"]]],
                    fmt="o", color="C0", capsize=3, label=label)  # fmt: skip
        growth = [p["spex"].get("primary_steps", {}).get("growth") for p in r["pairs"]]
        growth = [g for g in growth if g is not None]
        if growth:
            ax.plot([i + 0.15], [1 + sum(growth) / len(growth)], "s", color="C1", ms=5,
                    label="step growth, engine-measured" if i == 0 else None)  # fmt: skip
    ax.axhline(1 + target, color="k", ls="--", lw=1, label=f"target +{target:.0%}")
    ax.axhline(1.0, color="0.6", lw=0.8)
    ax.set_xticks(range(len(reports)))
    ax.set_xticklabels([f"{r['algorithm']}-{r['target']}\nB={r['batch_size']}" for r in reports], fontsize=8)
    ax.set_ylabel("SPEX / baseline")
    ax.set_title(f"primary time per token, {reports[0]['profile']}", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m spex.bench.slo", description=__doc__.split("\n\n")[0])
    ap.add_argument("--engine", choices=("hf", "vllm", "sglang", "sim"), default="hf")
    ap.add_argument("--model", help="hf: the model directory; vllm, sglang: the served model's")
    ap.add_argument("--engine-url", help="vllm, sglang: the server's URL")
    ap.add_argument(
        "--profile-file", required=True, help="the engine's measured step curve (`spex profile --json`)"
    )
    ap.add_argument("--workload", help="sim: the synthetic workload's knobs (TOML)")
    ap.add_argument("--dataset", default="easy", help="real content: the questions (default: easy)")
    ap.add_argument("--deterministic", action="store_true", help="hf: batch-invariant outputs")
    ap.add_argument("--dtype", default="", help="hf: float32 or bfloat16")
    ap.add_argument("--searches", default=",".join(SEARCHES), help="cells' searches, e.g. rebase-4,rstar-4")
    ap.add_argument("--batches", default=",".join(map(str, BATCHES)), help="cells' batch sizes")
    ap.add_argument("--questions", type=int, default=12, help="questions a run (at least B)")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved pairs a cell")
    ap.add_argument("--objective", choices=OBJECTIVES, default="slo")
    ap.add_argument("--tpot-target", type=float, default=0.05)
    ap.add_argument("--out", required=True, help="the folder the results files, table and plot go to")
    args = ap.parse_args(argv)
    try:
        cells = [
            cell_config(args, s, int(b)) for s in args.searches.split(",") for b in args.batches.split(",")
        ]
        for cfg in cells:
            cfg.validate()
    except ValueError as exc:
        ap.error(str(exc))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    reports = []
    for cfg in cells:
        repeated = compare_pairs(cfg, args.repeats)
        path = out / f"{_cell_name(cfg)}.json"
        write_json(repeated, path, {"command": "python -m spex.bench.slo", "args": vars(args)})
        report = json.loads(path.read_text())
        reports.append(report)
        print(row(report), flush=True)
    (out / "slo.md").write_text("\n".join([HEADER, *(row(r) for r in reports)]) + "\n")
    plot(reports, args.tpot_target, out / "slo.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
