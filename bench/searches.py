"""search-and-learn's searches on the simulator: beam search (N = 16, M = 4), DVTS (N = 16,
M = 4) and best-of-N (N = 16) at B = 1, 4, 16 on Llemma-7B@A6000 (PRM rewards) and
R1-Qwen3-8B@A6000 (the generator's log-probabilities, as the grid pairs it), under both
speculation objectives; and REBASE-16 at B = 1 on Llemma-7B@A6000 beside them.

    python -m spex.bench.searches --out docs/searches [--questions 32] [--workers 1]

Every cell runs the baseline once and SPEX under `slo` (+5% primary TPOT) and `throughput` on the
same workload and seeds, in one process, and checks each is lossless (the same trees and
answers). A figure is the speedup (the baseline's makespan over SPEX's), with the primary TPOT
ratio, the hit rate and the governor's summary beside it. Results go to `searches.json`, the
tables to `searches.md`, a plot to `searches.png`.
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from spex.bench.governor import summary as governor_summary
from spex.bench.results import summarize
from spex.bench.vtime import BenchConfig, run_bench
from spex.shared.core.machine import Reward
from spex.shared.roofline.admission import OBJECTIVES

__all__ = ["run_searches"]

SEARCHES = [("beam", 16), ("dvts", 16), ("best_of_n", 16)]
PROFILES: list[tuple[str, Reward]] = [("Llemma-7B@A6000", "prm"), ("R1-Qwen3-8B@A6000", "logprob")]
BATCHES = [1, 4, 16]
# The comparison cell: REBASE-16, B = 1, on Llemma-7B@A6000 with PRM rewards.
BESIDE: tuple[str, Reward, str, int, int] = ("Llemma-7B@A6000", "prm", "rebase", 16, 1)


def _cell(base: BenchConfig) -> dict[str, Any]:
    b = summarize(run_bench(base))
    out: dict[str, Any] = {"baseline_qpm": b.throughput_qpm, "nodes": b.nodes_generated}
    for objective in OBJECTIVES:
        s = summarize(run_bench(replace(base, mode="spex", objective=objective)))
        run = s.to_json()
        out[objective] = {
            "speedup": b.makespan_s / s.makespan_s,
            "tpot_ratio": s.primary_tpot_ms / b.primary_tpot_ms if b.primary_tpot_ms else None,
            "lossless": s.trees_digest == b.trees_digest and s.answers == b.answers,
            "hit_rate": s.hit_rate,
            "spec_issued": s.spec_issued,
            "spec_adopted": s.spec_adopted,
            "compute_amplification": s.compute_amplification,
            "governor": governor_summary(run) if run.get("governor_trace") else "",
        }
    return out


def _jobs(questions: int, seed: int) -> list[tuple[str, BenchConfig]]:
    def config(profile: str, reward: Reward, algorithm: str, target: int, batch: int) -> BenchConfig:
        return BenchConfig(
            algorithm=algorithm, target=target, batch_size=batch, questions=questions, seed=seed,
            profile=profile, reward=reward,
        )  # fmt: skip

    jobs = [
        (f"{profile}|{algorithm}-{target}|{batch}", config(profile, reward, algorithm, target, batch))
        for profile, reward in PROFILES
        for algorithm, target in SEARCHES
        for batch in BATCHES
    ]
    profile, reward, algorithm, target, batch = BESIDE
    jobs.append(
        (f"{profile}|{algorithm}-{target}|{batch}", config(profile, reward, algorithm, target, batch))
    )
    return jobs


def run_searches(questions: int, seed: int, out_dir: str, workers: int = 1) -> dict[str, Any]:
    started = time.perf_counter()
    jobs = _jobs(questions, seed)
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = {key: pool.submit(_cell, base) for key, base in jobs}
        cells = {key: future.result() for key, future in futures.items()}
    rows = []
    for key, cell in cells.items():
        profile, search, batch = key.split("|")
        rows.append({"profile": profile, "search": search, "batch_size": int(batch), **cell})
    report = {
        "questions": questions,
        "seed": seed,
        "tpot_target": BenchConfig().tpot_target,
        "rows": rows,
        "all_lossless": all(r[o]["lossless"] for r in rows for o in OBJECTIVES),
        "wall_s": time.perf_counter() - started,
    }
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "searches.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "searches.md").write_text(markdown(report))
    plot(report, out / "searches.png")
    return report


def _fmt(v: dict[str, object]) -> str:
    tpot = f" ({v['tpot_ratio']:.2f})" if v["tpot_ratio"] is not None else ""
    hits = f", hits {v['hit_rate']:.0%}" if v["hit_rate"] is not None else ""
    return f"{v['speedup']:.2f}×{tpot}{hits}"


def markdown(report: dict[str, Any]) -> str:
    """A table per objective: speedup (primary TPOT ratio, hit rate), a row per profile and
    search, a column per B; then the governor's summary of each cell at B = 1."""
    batches = sorted({r["batch_size"] for r in report["rows"]})
    lines = [
        f"Speedup over the baseline (primary TPOT ratio, hit rate); {report['questions']} questions a "
        f"cell, seed {report['seed']}; every run lossless: {'yes' if report['all_lossless'] else 'NO'}.",
    ]
    for objective in OBJECTIVES:
        lines += ["", f"Objective `{objective}`", ""]
        lines += ["| profile | search | " + " | ".join(f"B={b}" for b in batches) + " |"]
        lines += ["|---" * (len(batches) + 2) + "|"]
        keys = list(dict.fromkeys((r["profile"], r["search"]) for r in report["rows"]))
        for profile, search in keys:
            by_b = {
                r["batch_size"]: r for r in report["rows"] if (r["profile"], r["search"]) == (profile, search)
            }
            cells = [_fmt(by_b[b][objective]) if b in by_b else "" for b in batches]
            lines.append(f"| {profile} | {search} | " + " | ".join(cells) + " |")
    lines += ["", "The governor at B = 1 (SPEX's run of each cell)", ""]
    lines += ["| profile | search | objective | governor |", "|---|---|---|---|"]
    for r in report["rows"]:
        if r["batch_size"] == 1:
            for objective in OBJECTIVES:
                lines.append(f"| {r['profile']} | {r['search']} | {objective} | {r[objective]['governor']} |")
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: Path) -> None:
    """Speedup by B, a panel per profile and search, a line per objective; REBASE-16 at B = 1
    marked on the Llemma-7B panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    profiles = [p for p, _ in PROFILES]
    names = [f"{a}-{t}" for a, t in SEARCHES]
    fig, axes = plt.subplots(len(profiles), len(names), figsize=(3.2 * len(names), 2.6 * len(profiles)),
                             sharex=True, sharey=True, squeeze=False)  # fmt: skip
    beside = next((r for r in report["rows"] if r["search"] == f"{BESIDE[2]}-{BESIDE[3]}"), None)
    for i, profile in enumerate(profiles):
        for j, search in enumerate(names):
            ax = axes[i][j]
            cell = sorted((r for r in report["rows"] if r["profile"] == profile and r["search"] == search),
                          key=lambda r: r["batch_size"])  # fmt: skip
            xs = [r["batch_size"] for r in cell]
            for k, objective in enumerate(OBJECTIVES):
                ax.plot(
                    xs, [r[objective]["speedup"] for r in cell], marker="o", color=f"C{k}", label=objective
                )
            if beside is not None and profile == beside["profile"]:
                for k, objective in enumerate(OBJECTIVES):
                    ax.plot([1], [beside[objective]["speedup"]], marker="*", ms=9, color=f"C{k}", ls="",
                            label=f"rebase-16, {objective}" if (i, j) == (0, 0) else None)  # fmt: skip
            ax.axhline(1.0, color="grey", lw=0.5)
            ax.set_xscale("log", base=2)
            ax.set_xticks(BATCHES, [str(b) for b in BATCHES])
            ax.set_title(f"{search}, {profile}", fontsize=8)
    axes[0][0].legend(fontsize=6)
    for ax in axes[-1]:
        ax.set_xlabel("B (questions in flight)")
    for row in axes:
        row[0].set_ylabel("speedup")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m spex.bench.searches", description=__doc__.split("\n")[0])
    p.add_argument("--out", default="docs/searches", help="where results, tables and plot go")
    p.add_argument("--questions", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=1, help="cells run at once (processes)")
    a = p.parse_args()
    if a.questions < 1 or a.workers < 1:
        p.exit(2, "searches: --questions and --workers must be at least 1\n")
    report = run_searches(a.questions, a.seed, a.out, a.workers)
    print(markdown(report))
    print(f"searches: {len(report['rows'])} cells in {report['wall_s']:.0f} s; wrote {a.out}/searches.*")


if __name__ == "__main__":
    main()
