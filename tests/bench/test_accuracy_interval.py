"""Every results file gives accuracy with a 95% bootstrap interval for each side: seeded (equal
runs write equal intervals), and as wide as the normal approximation says for many questions."""

import math

from spex.bench.comparison import compare
from spex.bench.results import bootstrap_ci95, summarize
from spex.bench.vtime import BenchConfig, run_bench


def test_the_interval_matches_the_normal_approximation_and_is_seeded():
    assert bootstrap_ci95([1.0] * 20, 0) == (1.0, 1.0) and bootstrap_ci95([], 0) == (0.0, 0.0)
    flags = [1.0, 0.0] * 200  # accuracy 0.5 over 400 questions
    low, high = bootstrap_ci95(flags, 7)
    half = 1.96 * math.sqrt(0.25 / len(flags))
    assert abs(low - (0.5 - half)) < 0.01 and abs(high - (0.5 + half)) < 0.01
    assert bootstrap_ci95(flags, 7) == (low, high)
    few = bootstrap_ci95([1.0, 0.0] * 5, 7)
    assert few[1] - few[0] > 3 * (high - low)  # ten questions say much less


def test_both_sides_of_a_comparison_report_their_interval():
    base = summarize(run_bench(BenchConfig(questions=6, batch_size=3)))
    spex = summarize(run_bench(BenchConfig(questions=6, batch_size=3, mode="spex")))
    both = compare(base, spex).to_json()
    for side in ("baseline", "spex"):
        low, high = both[f"accuracy_ci95_{side}"]
        assert low <= both[f"accuracy_{side}"] <= high
        assert tuple(both[side]["accuracy_ci95"]) == (low, high)
