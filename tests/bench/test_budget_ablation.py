"""The T2 ablation's three arms and the tail-latency figures the grid reports."""

from dataclasses import replace

from spex.bench.comparison import compare
from spex.bench.results import summarize
from spex.bench.vtime import BenchConfig, run_bench

MIX = (("rebase", 8), ("rstar", 5), ("ets", 8))


def test_without_a_tpot_budget_speculation_takes_what_the_kv_holds():
    base = BenchConfig(batch_size=4, questions=6, mix=MIX)
    governed = replace(base, mode="spex")
    free = replace(governed, t2=False, tpot_budget=False)
    plain, gov, unbudgeted = (summarize(run_bench(c)) for c in (base, governed, free))
    assert compare(plain, unbudgeted).lossless and compare(plain, gov).lossless  # the budget moves speed only
    assert unbudgeted.spec_pool_peak > gov.spec_pool_peak
    assert unbudgeted.tpot_target is None and gov.tpot_target == 0.05
    # Unbudgeted speculation slows the primaries the governor protects.
    assert compare(plain, unbudgeted).tpot_ratio > compare(plain, gov).tpot_ratio


def test_each_query_is_compared_with_itself_in_the_baseline():
    base = BenchConfig(batch_size=4, questions=6, mix=MIX)
    plain, spex = summarize(run_bench(base)), summarize(run_bench(replace(base, mode="spex")))
    rec = compare(plain, spex)
    ratios = [spex.latencies_s[q] / plain.latencies_s[q] for q in plain.latencies_s]
    assert set(plain.latencies_s) == set(spex.latencies_s) and len(ratios) == 6
    assert rec.worst_query_slowdown == max(ratios)
    assert rec.queries_over_10pct_slower == sum(1 for r in ratios if r > 1.10)
    assert 0 <= spex.starved_rounds <= spex.share_rounds and spex.share_rounds > 0
    assert plain.share_rounds == 0  # the baseline never divides a pool


def test_a_query_is_starved_when_it_gets_nothing_while_another_gets_several():
    from spex.bench.vtime.metrics import RunMetrics

    m = RunMetrics(trace_levels=False)
    wants = ["a", "b"]  # c asked for nothing
    m.count_shares({"a": 0, "b": 3, "c": 0}, wants)  # a starved; c asked for nothing
    m.count_shares({"a": 0, "b": 1, "c": 0}, wants)  # a short pool shared one each: no starving
    assert (m.starved_rounds, m.share_rounds) == (1, 4)
