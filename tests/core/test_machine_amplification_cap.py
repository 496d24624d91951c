"""`--max-amplification` bounds the waste speculation may cause, and stays lossless."""

from dataclasses import replace

from spex.bench.results import summarize
from spex.bench.vtime import BenchConfig, run_bench


def test_cap_bounds_compute_amplification():
    base = BenchConfig(algorithm="rebase", target=16, batch_size=1, questions=4, seed=1)
    free = summarize(run_bench(replace(base, mode="spex")))
    capped = summarize(run_bench(replace(base, mode="spex", max_amplification=1.05)))
    plain = summarize(run_bench(base))
    assert free.compute_amplification > 1.08
    # Checked before each new speculative job; jobs already in flight may finish past it.
    assert capped.compute_amplification <= 1.08
    assert capped.trees_digest == free.trees_digest == plain.trees_digest


def test_amplification_cap_must_be_at_least_one():
    import pytest

    with pytest.raises(ValueError, match="max_amplification"):
        BenchConfig(mode="spex", max_amplification=0.5).validate()
