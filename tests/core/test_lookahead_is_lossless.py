"""The look-ahead predictor never changes a search: with it, every built-in search grows the
baseline's tree and answer, whatever order results arrive in, alone or beside other queries."""

import pytest

from spex.bench.results import summarize
from spex.bench.vtime import BenchConfig, run_bench
from spex.shared.core.commands import GenerateCommand
from spex.shared.core.search import SEARCHES
from spex.shared.core.speculation import lookahead_predictor
from tests.core.machine_runs import drive

CASES = [("rebase", 8), ("ets", 4), ("rstar", 6), ("rest", 5), ("beam", 8), ("dvts", 8), ("best_of_n", 4)]
# ETS solves an integer program per level, and each draw replays every level: less of it
SEEDS = {"rebase": 3, "ets": 1, "rstar": 3, "rest": 3, "beam": 3, "dvts": 3, "best_of_n": 2}
ORDERS = {"rebase": 2, "ets": 1, "rstar": 2, "rest": 2, "beam": 2, "dvts": 2, "best_of_n": 2}
# best-of-N asks for each chain's next step as soon as its last is generated: nothing waits on a
# reward, so nothing is left to speculate.
UNBARRED = {"best_of_n"}
QUESTIONS = {"rebase": 3, "ets": 2, "rstar": 3, "rest": 3, "beam": 3, "dvts": 3, "best_of_n": 3}


def test_every_built_in_search_is_checked():
    assert {a for a, _ in CASES} == set(SEARCHES)


@pytest.mark.parametrize(("algorithm", "target"), CASES)
def test_results_in_any_order_give_the_baseline_tree(algorithm, target):
    """One query, its commands completed in random orders (results arriving out of turn, in
    flight when the search asks), speculating by the look-ahead."""
    for seed in range(SEEDS[algorithm]):
        base, _ = drive(algorithm, target, seed, speculate=False)
        for order in range(ORDERS[algorithm]):
            spec, log = drive(algorithm, target, seed, True, order_seed=order, predictor=lookahead_predictor)
            assert (spec.tree.digest(rewards=True), spec.answer) == (
                base.tree.digest(rewards=True),
                base.answer,
            )
            speculative = [c for c in log if isinstance(c, GenerateCommand) and c.priority > 0]
            if algorithm in UNBARRED:
                assert not speculative
            else:
                assert speculative and spec.stats.spec_adopted > 0, (seed, order)


@pytest.mark.parametrize(("algorithm", "target"), CASES)
@pytest.mark.parametrize("batch_size", [1, 3])
def test_the_simulated_engine_gives_the_baseline_trees(algorithm, target, batch_size):
    """Questions through the simulated GPU, one at a time and several in flight, on the A6000
    and (a second seed) on a profile whose small KV pool retracts and evicts: the same trees
    and answers as the baseline."""
    issued = 0
    for seed in range(min(2, SEEDS[algorithm])):
        profile = "Llemma-7B@A6000" if seed == 0 else "Llemma-34B@A100-80GB"
        base = BenchConfig(
            algorithm=algorithm,
            target=target,
            batch_size=batch_size,
            questions=QUESTIONS[algorithm],
            seed=seed,
            profile=profile,
        )
        spex = BenchConfig(**{**base.__dict__, "mode": "spex", "predictor": "lookahead", "tpot_slack": 0.5})
        b, s = summarize(run_bench(base)), summarize(run_bench(spex))
        assert (s.trees_digest, s.answers) == (b.trees_digest, b.answers), seed
        assert s.predictor == "lookahead"
        issued += s.spec_issued
    assert issued == 0 if algorithm in UNBARRED else issued > 5  # it means something if speculation ran
