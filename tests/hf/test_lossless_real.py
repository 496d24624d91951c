"""Lossless on a real engine: in deterministic mode SPEX returns the baseline's trees and
answers on a real (random-weight) model, a real reward model and MATH-500 questions."""

from dataclasses import replace

import pytest

from spex.bench.comparison import compare
from spex.bench.results import summarize
from spex.bench.vtime import BenchConfig, run_bench
from spex.shared.sim.workload import WorkloadKnobs

SMALL = replace(WorkloadKnobs(), step_token_cap=24)  # short steps: a random model never stops early


@pytest.mark.parametrize("algorithm", ["rebase", "rstar"])
def test_spex_equals_the_baseline_on_a_real_model(tiny_model, tiny_prm, algorithm):
    cfg = BenchConfig(
        algorithm=algorithm,
        target=4,
        questions=3,
        backend="hf",
        model=tiny_model,
        prm=tiny_prm,
        content="real",
        dataset="math500",
        deterministic=True,
        knobs=SMALL,
        params={"max_depth": 3},
    )
    base = summarize(run_bench(cfg))
    spex = summarize(run_bench(replace(cfg, mode="spex")))
    record = compare(base, spex)
    assert record.lossless, (base.trees_digest, spex.trees_digest)
    assert spex.spec_issued > 0 and spex.spec_adopted > 0  # it did speculate, and used some
    assert base.nodes_generated > 3 and base.accuracy == 0.0  # random weights: no right answers


def test_the_logprob_reward_needs_no_reward_model(tiny_model):
    cfg = BenchConfig(
        algorithm="rebase",
        target=2,
        questions=2,
        backend="hf",
        model=tiny_model,
        reward="logprob",
        content="real",
        dataset="math500",
        deterministic=True,
        knobs=SMALL,
        params={"max_depth": 2},
    )
    res = run_bench(replace(cfg, mode="spex"))
    assert res.prm is None and all(r.nodes > 0 for r in res.records)
    assert summarize(res).trees_digest == summarize(run_bench(cfg)).trees_digest
