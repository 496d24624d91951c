"""Upper bound of lossless speculation: a predictor that knows the final tree.

Runs the baseline, records every query's final tree, then runs SPEX with every algorithm's
`predict` hook replaced by one that returns the true future nodes whose parents exist (shallow
first) and never cancels. Same engine, budget and TPOT slack as SPEX, so the gap between this
and SPEX is what better prediction could still win; the gap between this and the target is
what no lossless predictor can.

    python -m bench.oracle rebase 16 --batch-size 1 --questions 32 [--tpot-slack 0.1]
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from shared.results import summarize
from shared.search.base import ALGORITHMS, SearchAlgorithm, SpecView
from shared.tree import Node
from shared.vtime import BenchConfig, run_bench

__all__ = ["oracle_speedup"]


def oracle_speedup(cfg: BenchConfig) -> tuple[float, float, dict[str, float]]:
    """(oracle speedup, SPEX speedup, oracle critical path per query)."""
    base = run_bench(cfg)
    trees = _final_trees(cfg)

    def predict(self: SearchAlgorithm, view: SpecView, k: int) -> list[Node]:
        true = trees[self.tree.query_id]
        out: list[Node] = []
        frontier = [self.tree.root]
        while frontier and len(out) < k:
            nxt = []
            for parent in frontier:
                for index, action in true.get(parent.id, []):
                    node = view.child(parent, index, action)
                    if node.generated:
                        nxt.append(node)
                    elif not view.busy(node) and node not in out:
                        out.append(node)
            frontier = nxt
        return out[:k]

    saved = {cls: (cls.predict, cls.spec_alive) for cls in ALGORITHMS.values()}
    try:
        for cls in ALGORITHMS.values():
            cls.predict = predict  # type: ignore[method-assign]
            cls.spec_alive = lambda self, node: True  # type: ignore[method-assign]
        oracle = summarize(run_bench(replace(cfg, mode="spex")))
    finally:
        for cls, (p, a) in saved.items():
            cls.predict, cls.spec_alive = p, a  # type: ignore[method-assign]
    spex = summarize(run_bench(replace(cfg, mode="spex")))
    b = summarize(base)
    assert oracle["trees_digest"] == b["trees_digest"], "the oracle changed the search"
    return (
        oracle["throughput_qpm"] / b["throughput_qpm"],
        spex["throughput_qpm"] / b["throughput_qpm"],
        oracle["critical_path_s_per_query"],
    )


def _final_trees(cfg: BenchConfig) -> dict[str, dict[str, list[tuple[int, str]]]]:
    """query -> parent id -> [(child index, action)] of the baseline's final trees."""
    from shared.vtime import _Run

    trees: dict[str, dict[str, list[tuple[int, str]]]] = {}
    run = _Run(cfg, None)
    finish = run._finish

    def record(query_id: str, now: float) -> None:
        kids: dict[str, list[tuple[int, str]]] = {}
        for node in run.machines[query_id].tree:
            if node.parent is not None:
                kids.setdefault(node.parent.id, []).append((node.index, node.action))
        trees[query_id] = kids
        finish(query_id, now)

    run._finish = record  # type: ignore[method-assign]
    run.run()
    return trees


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.oracle")
    p.add_argument("algorithm", choices=sorted(ALGORITHMS))
    p.add_argument("target", type=int)
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--questions", type=int, default=32)
    p.add_argument("--tpot-slack", type=float, default=0.10)
    p.add_argument("--profile", default="Llemma-7B@A6000")
    a = p.parse_args()
    cfg = BenchConfig(
        a.algorithm, a.target, a.batch_size, a.questions, profile=a.profile, tpot_slack=a.tpot_slack
    )
    oracle, spex, path = oracle_speedup(cfg)
    waits = ", ".join(f"{k} {v:.1f}" for k, v in path.items())
    name = f"{a.algorithm}-{a.target} B={a.batch_size}"
    print(f"{name}: oracle {oracle:.2f}x, SPEX {spex:.2f}x; oracle waits {waits}")


if __name__ == "__main__":
    main()
