"""The synthetic content mode on a real engine: the engine generates exactly the workload's
number of tokens, so the search grows the simulator's tree — timed on real hardware."""

from dataclasses import replace

import pytest

from spex.bench.results import summarize
from spex.bench.vtime import BenchConfig, run_bench
from spex.shared.sim.workload import WorkloadKnobs


@pytest.mark.parametrize(("algorithm", "target"), [("rebase", 4), ("rstar", 4)])
def test_a_real_engine_grows_the_simulators_tree(tiny_model, tiny_prm, algorithm, target):
    cfg = BenchConfig(
        algorithm=algorithm, target=target, questions=2, knobs=replace(WorkloadKnobs(), step_token_cap=24)
    )
    sim = summarize(run_bench(cfg))
    real = summarize(run_bench(replace(cfg, backend="hf", model=tiny_model, prm=tiny_prm, mode="spex")))
    assert real.trees_digest == sim.trees_digest and real.answers == sim.answers
    assert real.tokens_generated == sim.tokens_generated
    assert real.spec_issued > 0 and real.makespan_s > 0  # measured engine time, not simulated
