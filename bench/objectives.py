"""The speculation objectives on the simulator: `throughput` and `slo` beside the fixed TPOT
targets, over the four searches, B = 1…16 and the three paper profiles; and T2's division by
value beside an even split of the same pool on the mixed workload.

    python -m spex.bench.objectives --out docs/objectives [--questions 32] [--workers 2]

Every cell runs the baseline once and each variant of SPEX on the same workload and seeds, in
one process, and checks each is lossless (the same trees and answers). A variant's figure is
its speedup (the baseline's makespan over its own) and its primary TPOT ratio. Results go to
`objectives.json`, a Markdown table to `objectives.md`, a plot to `objectives.png`.
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from spex.bench.grid import MIX, PROFILES
from spex.bench.results import summarize
from spex.bench.vtime import BenchConfig, run_bench

__all__ = ["TARGETS", "run_objectives"]

SEARCHES = [("rstar", 10), ("rest", 10), ("rebase", 16), ("ets", 16)]
BATCHES = [1, 2, 4, 8, 16]
TARGETS = [0.05, 0.10, 0.20, 0.50]  # the fixed targets `throughput` is held against
MIX_BATCHES = [2, 4, 8, 16]


def _variants(base: BenchConfig) -> list[tuple[str, BenchConfig]]:
    spex = replace(base, mode="spex")
    fixed = [(f"slo+{t:.0%}", replace(spex, tpot_target=t)) for t in TARGETS]
    return [*fixed, ("throughput", replace(spex, objective="throughput"))]


def _mix_variants(base: BenchConfig) -> list[tuple[str, BenchConfig]]:
    spex = replace(base, mode="spex")
    throughput = replace(spex, objective="throughput")
    return [
        ("slo+5%", spex),
        ("slo+5% even", replace(spex, t2=False)),
        ("throughput", throughput),
        ("throughput even", replace(throughput, t2=False)),
    ]


def _cell(base: BenchConfig, variants: list[tuple[str, BenchConfig]]) -> dict[str, object]:
    b = summarize(run_bench(base))
    out: dict[str, object] = {}
    for name, cfg in variants:
        s = summarize(run_bench(cfg))
        out[name] = {
            "speedup": b.makespan_s / s.makespan_s,
            "tpot_ratio": s.primary_tpot_ms / b.primary_tpot_ms if b.primary_tpot_ms else None,
            "lossless": s.trees_digest == b.trees_digest and s.answers == b.answers,
            "hit_rate": s.hit_rate,
            "compute_amplification": s.compute_amplification,
        }
    return out


def _jobs(questions: int, seed: int) -> list[tuple[str, BenchConfig, list[tuple[str, BenchConfig]]]]:
    jobs = []
    for profile, reward in PROFILES:
        for algorithm, target in SEARCHES:
            for batch in BATCHES:
                base = BenchConfig(
                    algorithm=algorithm, target=target, batch_size=batch, questions=questions,
                    seed=seed, profile=profile, reward=reward,
                )  # fmt: skip
                jobs.append((f"{profile}|{algorithm}-{target}|{batch}", base, _variants(base)))
    for batch in MIX_BATCHES:
        base = BenchConfig(batch_size=batch, questions=questions, seed=seed, profile=PROFILES[0][0], mix=MIX)
        jobs.append((f"{PROFILES[0][0]}|mix|{batch}", base, _mix_variants(base)))
    return jobs


def run_objectives(questions: int, seed: int, out_dir: str, workers: int = 2) -> dict[str, Any]:
    started = time.perf_counter()
    jobs = _jobs(questions, seed)
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = {key: pool.submit(_cell, base, variants) for key, base, variants in jobs}
        cells = {key: future.result() for key, future in futures.items()}
    rows = []
    for key, cell in cells.items():
        profile, search, batch = key.split("|")
        rows.append({"profile": profile, "search": search, "batch_size": int(batch), **cell})
    report = {
        "questions": questions,
        "seed": seed,
        "targets": TARGETS,
        "rows": rows,
        "all_lossless": all(v["lossless"] for r in rows for k, v in r.items() if isinstance(v, dict)),
        "wall_s": time.perf_counter() - started,
    }
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "objectives.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "objectives.md").write_text(markdown(report))
    plot(report, out / "objectives.png")
    return report


def markdown(report: dict[str, Any]) -> str:
    """The grid's table (speedup, primary TPOT ratio) and the mix's, with each throughput
    cell's margin over the best fixed target."""
    fixed = [f"slo+{t:.0%}" for t in report["targets"]]
    lines = [
        f"Speedup over the baseline (primary TPOT ratio); {report['questions']} questions a cell, seed "
        f"{report['seed']}; every run lossless: {'yes' if report['all_lossless'] else 'NO'}.",
        "",
        "| profile | search | B | " + " | ".join(fixed) + " | throughput | vs best fixed |",
        "|---" * (len(fixed) + 5) + "|",
    ]
    for r in report["rows"]:
        if r["search"] == "mix":
            continue
        best = max(r[name]["speedup"] for name in fixed)
        cells = [_fmt(r[name]) for name in [*fixed, "throughput"]]
        margin = r["throughput"]["speedup"] / best
        lines.append(
            f"| {r['profile']} | {r['search']} | {r['batch_size']} | "
            + " | ".join(cells)
            + f" | {margin:.2f} |"
        )
    mix = [r for r in report["rows"] if r["search"] == "mix"]
    if mix:
        names = ["slo+5%", "slo+5% even", "throughput", "throughput even"]
        lines += ["", "T2 on the mixed workload: the pool divided by value, and split evenly", ""]
        lines += ["| B | " + " | ".join(names) + " | value / even (slo) | value / even (throughput) |"]
        lines += ["|---" * (len(names) + 3) + "|"]
        for r in mix:
            s = r["slo+5%"]["speedup"] / r["slo+5% even"]["speedup"]
            t = r["throughput"]["speedup"] / r["throughput even"]["speedup"]
            lines.append(
                f"| {r['batch_size']} | " + " | ".join(_fmt(r[n]) for n in names) + f" | {s:.3f} | {t:.3f} |"
            )
    return "\n".join(lines) + "\n"


def _fmt(v: dict[str, Any]) -> str:
    tpot = v["tpot_ratio"]
    return f"{v['speedup']:.2f}× ({tpot:.2f})" if tpot is not None else f"{v['speedup']:.2f}×"


def plot(report: dict[str, Any], path: Path) -> None:
    """Speedup by B, a panel per profile and search: each fixed target and `throughput`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in report["rows"] if r["search"] != "mix"]
    profiles = list(dict.fromkeys(r["profile"] for r in rows))
    searches = list(dict.fromkeys(r["search"] for r in rows))
    fig, axes = plt.subplots(len(profiles), len(searches), figsize=(3 * len(searches), 2.4 * len(profiles)),
                             sharex=True, squeeze=False)  # fmt: skip
    names = [f"slo+{t:.0%}" for t in report["targets"]] + ["throughput"]
    for i, profile in enumerate(profiles):
        for j, search in enumerate(searches):
            ax = axes[i][j]
            cell = sorted((r for r in rows if r["profile"] == profile and r["search"] == search),
                          key=lambda r: r["batch_size"])  # fmt: skip
            xs = [r["batch_size"] for r in cell]
            for k, name in enumerate(names):
                style = {"color": "k", "lw": 2} if name == "throughput" else {"color": f"C{k}", "lw": 1}
                ax.plot(xs, [r[name]["speedup"] for r in cell], marker=".", label=name, **style)
            ax.axhline(1.0, color="grey", lw=0.5)
            ax.set_xscale("log", base=2)
            ax.set_title(f"{search}, {profile}", fontsize=7)
    axes[0][0].legend(fontsize=6)
    for ax in axes[-1]:
        ax.set_xlabel("B")
    for row in axes:
        row[0].set_ylabel("speedup")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m spex.bench.objectives")
    p.add_argument("--out", default="docs/objectives", help="where results, table and plot go")
    p.add_argument("--questions", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=2, help="cells run at once (processes)")
    a = p.parse_args()
    if a.questions < 1 or a.workers < 1:
        p.exit(2, "objectives: --questions and --workers must be at least 1\n")
    report = run_objectives(a.questions, a.seed, a.out, a.workers)
    print(markdown(report))
    print(f"objectives: {len(report['rows'])} cells in {report['wall_s']:.0f} s; wrote {a.out}/objectives.*")


if __name__ == "__main__":
    main()
