"""The baseline shows the reward barrier the paper describes (Llemma-7B on A6000, B = 1)."""

from spex.bench.results import summarize
from spex.bench.vtime import BenchConfig, run_bench


def test_mcts_decodes_one_expansion_at_a_time_and_leaves_the_gpu_idle():
    # rStar generates a node's 4 children together, then waits: a batch of at most 4, which
    # shrinks as the shorter children finish, and a GPU nearly idle.
    s = summarize(run_bench(BenchConfig(algorithm="rstar", target=10, batch_size=1, questions=6)))
    assert 3.0 <= s.mean_batch < 4.0
    assert s.utilization < 0.04


def test_rebase_batch_shrinks_within_each_level():
    s = summarize(run_bench(BenchConfig(algorithm="rebase", target=16, batch_size=1, questions=6)))
    first, last = s.level_batch_first_quarter, s.level_batch_last_quarter
    assert first > 3 * last, (first, last)
    assert last < 3


def test_more_questions_in_flight_fill_the_batch():
    one = summarize(run_bench(BenchConfig(algorithm="rstar", target=5, batch_size=1, questions=8)))
    eight = summarize(run_bench(BenchConfig(algorithm="rstar", target=5, batch_size=8, questions=8)))
    assert eight.mean_batch > 3 * one.mean_batch
    assert eight.throughput_qpm > 3 * one.throughput_qpm
    assert eight.trees_digest == one.trees_digest  # batching never changes the search
