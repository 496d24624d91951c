"""Baseline and SPEX side by side: `repeats` pairs of runs of one configuration, back to back,
the order alternating (what `spex bench --mode compare --repeats N` and the GPU check run)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from spex.bench.comparison import Repeated, compare
from spex.bench.oracle import TreeRecorder
from spex.bench.results import summarize
from spex.bench.vtime import BenchConfig, BenchResult, run_bench

__all__ = ["compare_pairs"]

Runner = Callable[..., BenchResult]  # (cfg, on_finish=None, predictor=None: the one cfg names)


def compare_pairs(cfg: BenchConfig, repeats: int, run: Runner = run_bench, oracle: bool = False) -> Repeated:
    """`repeats` pairs of baseline and SPEX runs of `cfg`, the order alternating. On a real
    engine an unrecorded warm-up (the baseline's first wave of questions) goes first: the
    first run on a fresh engine or server was slower (a cold cache, kernels compiled for new
    shapes: vLLM's first baseline took 1.5x its later ones), which would weigh on one side.
    With `oracle` the warm-up is a whole baseline run whose final trees the SPEX side then
    speculates (`bench.oracle`)."""
    final = TreeRecorder() if oracle else None
    if final is not None:
        run(replace(cfg, mode="baseline"), final.record)
    elif cfg.backend != "sim":
        run(replace(cfg, mode="baseline", questions=min(cfg.questions, cfg.batch_size)))
    pairs, orders = [], []
    for i in range(repeats):
        order = [replace(cfg, mode="baseline"), cfg] if i % 2 == 0 else [cfg, replace(cfg, mode="baseline")]
        runs: dict[str, Any] = {}
        for c in order:
            if final is not None and c.mode == "spex":
                bound = summarize(run(c, None, final.predictor))
                runs[c.mode] = replace(bound, predictor="oracle")
            else:
                runs[c.mode] = summarize(run(c))
        pairs.append(compare(runs["baseline"], runs["spex"]))
        orders.append(f"{order[0].mode}-first")
    return Repeated(pairs, orders)
