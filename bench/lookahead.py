"""The look-ahead predictor against the hand-written ones and the oracle, on the simulator.

    python -m spex.bench.lookahead --out docs/lookahead [--questions 32] [--workers 1]

Each cell (profile, search, B, objective) runs the baseline once, recording its final trees,
then SPEX three times on the same workload and seeds: with the search's own hand-written
predictor (`--predictor algorithm`), with the look-ahead replay (`--predictor lookahead`), and
with the oracle that knows the baseline's trees (`--oracle`, the bound of lossless
speculation). Every run is checked lossless (the baseline's trees and answers). A variant's
figures: its speedup (the baseline's makespan over its own), hit rate, primary TPOT ratio,
compute amplification, the governor's one-line account (`bench.governor`), and what its
predictor cost: predictions computed, and the predictor's CPU time per prediction and per
question. Results go to `lookahead.json`, the tables to `lookahead.md`, a plot to
`lookahead.png`.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from spex.bench.governor import summary as governor_summary
from spex.bench.oracle import TreeRecorder
from spex.bench.results import summarize
from spex.bench.vtime import BenchConfig, run_bench
from spex.shared.core.lookahead import LookaheadPredictor
from spex.shared.core.machine import Reward
from spex.shared.core.search.base import SearchAlgorithm, SpecView
from spex.shared.core.speculation import Predictor, PredictorFactory, PredictorName, predictor_factory
from spex.shared.core.tree import Node
from spex.shared.roofline.admission import Objective

__all__ = ["PREDICTOR_VARIANTS", "run_lookahead"]

PROFILES: list[tuple[str, Reward]] = [("Llemma-7B@A6000", "prm"), ("R1-Qwen3-8B@A6000", "logprob")]
# ETS is left out: each draw solves its integer program again for every level it replays, so a
# prediction costs some fifty times its hand-written predictor's (docs/lookahead/README.md), which
# stays its default.
SEARCHES = [("rebase", 16), ("rstar", 10), ("rest", 10)]
BATCHES = [1, 4]
OBJECTIVES: list[Objective] = ["slo", "throughput"]
PREDICTOR_VARIANTS = ["algorithm", "lookahead", "oracle"]  # the last: the bound (`bench.oracle`)


@dataclass
class _Meter:
    """The predictors of one run, each timed (CPU time of its calls) as the machine calls it."""

    factory: PredictorFactory
    cpu_s: float = 0.0
    hooks: int = 0  # `predict` calls of predictors that compute on every call
    predictors: list[Predictor] | None = None

    def __call__(self, algorithm: SearchAlgorithm) -> Predictor:
        inner = self.factory(algorithm)
        if self.predictors is None:
            self.predictors = []
        self.predictors.append(inner)
        return _Timed(inner, self)

    @property
    def predictions(self) -> int:
        """Predictions computed: the look-ahead's (one per state of a query, its draws
        together), else every `predict` call."""
        look = [p for p in self.predictors or [] if isinstance(p, LookaheadPredictor)]
        return sum(p.predictions for p in look) if look else self.hooks


@dataclass
class _Timed:
    """A predictor whose calls add their CPU time to `meter`."""

    inner: Predictor
    meter: _Meter

    @contextmanager
    def _clock(self) -> Iterator[None]:
        t = time.process_time()
        try:
            yield
        finally:
            self.meter.cpu_s += time.process_time() - t

    def predict(self, view: SpecView, k: int) -> list[Node]:
        self.meter.hooks += 1
        with self._clock():
            return self.inner.predict(view, k)

    def spec_alive(self, node: Node) -> bool:
        with self._clock():
            return self.inner.spec_alive(node)

    def spec_distance(self, node: Node) -> int:
        with self._clock():
            return self.inner.spec_distance(node)

    def spec_likelihood(self, node: Node) -> float:
        with self._clock():
            return self.inner.spec_likelihood(node)


def _cell(base: BenchConfig) -> dict[str, Any]:
    final = TreeRecorder()
    b = summarize(run_bench(base, on_finish=final.record))
    out: dict[str, Any] = {}
    named: list[PredictorName] = ["algorithm", "lookahead"]
    for name in PREDICTOR_VARIANTS:
        meter = _Meter(predictor_factory(name) if name in named else final.predictor)
        cfg = replace(base, mode="spex", predictor=next((n for n in named if n == name), "auto"))
        s = summarize(run_bench(cfg, predictor=meter))
        predictions = meter.predictions
        out[name] = {
            "speedup": b.makespan_s / s.makespan_s,
            "hit_rate": s.hit_rate,
            "tpot_ratio": s.primary_tpot_ms / b.primary_tpot_ms if b.primary_tpot_ms else None,
            "compute_amplification": s.compute_amplification,
            "spec_issued": s.spec_issued,
            "lossless": s.trees_digest == b.trees_digest and s.answers == b.answers,
            "governor": governor_summary(s.to_json()) if s.governor_trace else None,
            "predictions": predictions,
            "predictor_ms_per_prediction": 1e3 * meter.cpu_s / predictions if predictions else 0.0,
            "predictor_ms_per_question": 1e3 * meter.cpu_s / base.questions,
        }
    return out


def _jobs(questions: int, seed: int) -> list[tuple[str, BenchConfig]]:
    jobs = []
    for profile, reward in PROFILES:
        for algorithm, target in SEARCHES:
            for batch in BATCHES:
                for objective in OBJECTIVES:
                    base = BenchConfig(
                        algorithm=algorithm, target=target, batch_size=batch, questions=questions,
                        seed=seed, profile=profile, reward=reward, objective=objective,
                    )  # fmt: skip
                    jobs.append((f"{profile}|{algorithm}-{target}|{batch}|{objective}", base))
    return jobs


def run_lookahead(
    questions: int, seed: int, out_dir: str, workers: int = 1, only: str = "*"
) -> dict[str, Any]:
    """Every cell whose key (`PROFILE|SEARCH-TARGET|B|OBJECTIVE`) matches the pattern `only`."""
    started = time.perf_counter()
    jobs = [(key, base) for key, base in _jobs(questions, seed) if fnmatch.fnmatchcase(key, only)]
    if not jobs:
        raise ValueError(f"--only: no cell matches {only!r} (keys read PROFILE|SEARCH-TARGET|B|OBJECTIVE)")
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = {key: pool.submit(_cell, base) for key, base in jobs}
        cells = {key: future.result() for key, future in futures.items()}
    rows = []
    for key, cell in cells.items():
        profile, search, batch, objective = key.split("|")
        rows.append(
            {"profile": profile, "search": search, "batch_size": int(batch), "objective": objective, **cell}
        )
    report = {
        "questions": questions,
        "seed": seed,
        "only": only,
        "rows": rows,
        "all_lossless": all(r[v]["lossless"] for r in rows for v in PREDICTOR_VARIANTS),
        "wall_s": time.perf_counter() - started,
    }
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "lookahead.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "lookahead.md").write_text(markdown(report))
    plot(report, out / "lookahead.png")
    return report


def markdown(report: dict[str, Any]) -> str:
    """A row per cell: each predictor's speedup and hit rate, the look-ahead's speedup over the
    hand-written one's, and how much of the hand-written predictor's gap to the oracle it
    closes; then what each predictor cost."""
    lines = [
        f"Speedup over the baseline (hit rate); {report['questions']} questions a cell, seed "
        f"{report['seed']}; every run lossless: {'yes' if report['all_lossless'] else 'NO'}.",
        "",
        "| profile | search | B | objective | algorithm | lookahead | oracle | lookahead / algorithm "
        "| gap to the oracle closed |",
        "|---" * 9 + "|",
    ]
    for r in report["rows"]:
        alg, look, orc = (r[v]["speedup"] for v in PREDICTOR_VARIANTS)
        gap = orc - alg
        closed = f"{(look - alg) / gap:+.0%}" if gap > 0.01 else "—"
        cells = [f"{r[v]['speedup']:.2f}× ({r[v]['hit_rate']:.2f})" for v in PREDICTOR_VARIANTS]
        lines.append(
            f"| {r['profile']} | {r['search']} | {r['batch_size']} | {r['objective']} | "
            + " | ".join(cells)
            + f" | {look / alg:.3f} | {closed} |"
        )
    lines += [
        "",
        "What each predictor cost: predictions computed per question, the predictor's CPU time per "
        "prediction and per question (ms).",
        "",
        "| profile | search | B | objective | algorithm: per question, ms/prediction | "
        "lookahead: per question, ms/prediction, ms/question |",
        "|---" * 6 + "|",
    ]
    for r in report["rows"]:
        q = report["questions"]
        a, la = r["algorithm"], r["lookahead"]
        lines.append(
            f"| {r['profile']} | {r['search']} | {r['batch_size']} | {r['objective']} | "
            f"{a['predictions'] / q:.0f}, {a['predictor_ms_per_prediction']:.2f} | "
            f"{la['predictions'] / q:.0f}, {la['predictor_ms_per_prediction']:.2f}, "
            f"{la['predictor_ms_per_question']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: Path) -> None:
    """Speedup of each predictor, a panel per profile and objective, a group of bars per
    search and B."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["rows"]
    profiles = list(dict.fromkeys(r["profile"] for r in rows))
    objectives = list(dict.fromkeys(r["objective"] for r in rows))
    fig, axes = plt.subplots(len(profiles), len(objectives), figsize=(5 * len(objectives), 3 * len(profiles)),
                             sharey=True, squeeze=False)  # fmt: skip
    width = 0.8 / len(PREDICTOR_VARIANTS)
    for i, profile in enumerate(profiles):
        for j, objective in enumerate(objectives):
            ax = axes[i][j]
            cell = [r for r in rows if r["profile"] == profile and r["objective"] == objective]
            labels = [f"{r['search']}\nB={r['batch_size']}" for r in cell]
            for k, name in enumerate(PREDICTOR_VARIANTS):
                xs = [x + (k - 1) * width for x in range(len(cell))]
                ax.bar(xs, [r[name]["speedup"] for r in cell], width, label=name, color=f"C{k}")
            ax.axhline(1.0, color="grey", lw=0.5)
            ax.set_xticks(range(len(cell)), labels, fontsize=7)
            ax.set_title(f"{profile}, {objective}", fontsize=8)
    axes[0][0].set_ylabel("speedup")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m spex.bench.lookahead")
    p.add_argument("--out", default="docs/lookahead", help="where results, tables and plot go")
    p.add_argument("--questions", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=1, help="cells run at once (processes)")
    p.add_argument(
        "--only", default="*", help="the cells whose PROFILE|SEARCH-TARGET|B|OBJECTIVE matches this pattern"
    )
    a = p.parse_args()
    if a.questions < 1 or a.workers < 1:
        p.exit(2, "lookahead: --questions and --workers must be at least 1\n")
    try:
        report = run_lookahead(a.questions, a.seed, a.out, a.workers, a.only)
    except ValueError as exc:
        p.exit(2, f"lookahead: {exc}\n")
    print(markdown(report))
    print(f"lookahead: {len(report['rows'])} cells in {report['wall_s']:.0f} s; wrote {a.out}/lookahead.*")


if __name__ == "__main__":
    main()
