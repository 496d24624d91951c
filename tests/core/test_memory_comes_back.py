"""A query's state goes when the query goes: nothing process-wide keeps growing with the
number of queries answered (the soak found the coordinator's memory +16% after 2,460 questions:
a process-wide cache of node ids, up to 65,536 of them, held the ids of queries long answered)."""

import gc
import tracemalloc

from spex.bench.vtime import BenchConfig, run_bench


def _answer(seed: int) -> None:
    run_bench(BenchConfig(algorithm="rebase", target=8, batch_size=4, questions=40, seed=seed, mode="spex"))


def test_forty_more_questions_leave_nothing_behind():
    _answer(0)  # imports, interned strings and first-use caches
    gc.collect()
    tracemalloc.start()
    try:
        _answer(1)
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        _answer(2)
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    # with the process-wide cache: ~220 KB (~5.5 KB a question); without: a few KB of noise
    assert after - before < 64_000, f"{(after - before) / 1e3:.0f} KB kept by 40 answered questions"
