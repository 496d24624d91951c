"""Upper bound of lossless speculation: a predictor that knows the final tree.

Runs the baseline, records every query's final tree, then runs SPEX with a predictor
(`OraclePredictor`, injected into every query's machine) that returns the true future nodes
whose parents exist (shallow first) and never cancels. Same engine, budget and TPOT slack as
SPEX, so the gap between this and SPEX is what better prediction could still win; the gap
between this and the target is what no lossless predictor can.

    python -m spex.bench.oracle rebase 16 --batch-size 1 --questions 32 [--tpot-slack 0.1]

On any engine, a real one included, `spex bench --mode compare --oracle` runs the same bound as
interleaved pairs: the baseline's trees recorded once, then each pair's SPEX side on them.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, replace

from spex.bench.results import summarize
from spex.bench.vtime import BenchConfig, run_bench
from spex.shared.core.machine import QueryMachine
from spex.shared.core.search import SEARCHES
from spex.shared.core.search.base import SearchAlgorithm, SpecView
from spex.shared.core.speculation import Predictor
from spex.shared.core.tree import Node

__all__ = ["OraclePredictor", "TreeRecorder", "oracle_speedup"]

FinalTree = dict[str, list[tuple[int, str]]]  # parent id -> [(child index, action)]


@dataclass
class OraclePredictor:
    """Predicts the true future nodes whose parents exist (shallow first) and never cancels;
    the distance of a prediction is the algorithm's own, for comparable reports."""

    algorithm: SearchAlgorithm
    final: FinalTree

    def predict(self, view: SpecView, k: int) -> list[Node]:
        out: list[Node] = []
        frontier = [self.algorithm.tree.root]
        while frontier and len(out) < k:
            nxt = []
            for parent in frontier:
                for index, action in self.final.get(parent.id, []):
                    node = view.child(parent, index, action)
                    if node.generated:
                        nxt.append(node)
                    elif not view.busy(node) and node not in out:
                        out.append(node)
            frontier = nxt
        return out[:k]

    def spec_alive(self, node: Node) -> bool:
        return True

    def spec_distance(self, node: Node) -> int:
        return self.algorithm.spec_distance(node)

    def spec_likelihood(self, node: Node) -> float:
        return 1.0  # it predicts only nodes of the final tree


@dataclass
class TreeRecorder:
    """Records each query's final tree as it finishes (`record` is a run's `on_finish`), and
    predicts from them (`predictor` is a run's predictor factory)."""

    trees: dict[str, FinalTree] = field(default_factory=dict)

    def record(self, machine: QueryMachine) -> None:
        kids: FinalTree = {}
        for node in machine.tree:
            if node.parent is not None:
                kids.setdefault(node.parent.id, []).append((node.index, node.action))
        self.trees[machine.query_id] = kids

    def predictor(self, algorithm: SearchAlgorithm) -> Predictor:
        return OraclePredictor(algorithm, self.trees[algorithm.tree.query_id])


def oracle_speedup(cfg: BenchConfig) -> tuple[float, float, dict[str, float]]:
    """(oracle speedup, SPEX speedup, oracle critical path per query)."""
    final = TreeRecorder()
    base = summarize(run_bench(cfg, on_finish=final.record))
    best = summarize(run_bench(replace(cfg, mode="spex"), predictor=final.predictor))
    spex = summarize(run_bench(replace(cfg, mode="spex")))
    assert best.trees_digest == base.trees_digest, "the oracle changed the search"
    return (
        best.throughput_qpm / base.throughput_qpm,
        spex.throughput_qpm / base.throughput_qpm,
        best.critical_path_s_per_query,
    )


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m spex.bench.oracle")
    p.add_argument("algorithm", choices=sorted(SEARCHES))
    p.add_argument("target", type=int)
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--questions", type=int, default=32)
    p.add_argument("--tpot-target", type=float, default=0.05)
    p.add_argument("--tpot-slack", type=float, default=None)
    p.add_argument("--scheduling", default="sglang")
    p.add_argument("--profile", default="Llemma-7B@A6000")
    a = p.parse_args()
    cfg = BenchConfig(
        a.algorithm,
        a.target,
        a.batch_size,
        a.questions,
        profile=a.profile,
        tpot_target=a.tpot_target,
        tpot_slack=a.tpot_slack,
        scheduling=a.scheduling,
    )
    oracle, spex, path = oracle_speedup(cfg)
    waits = ", ".join(f"{k} {v:.1f}" for k, v in path.items())
    name = f"{a.algorithm}-{a.target} B={a.batch_size}"
    print(f"{name}: oracle {oracle:.2f}x, SPEX {spex:.2f}x; oracle waits {waits}")


if __name__ == "__main__":
    main()
