"""The search is a function of node identities, not of the order in which work completes.

This is what lets speculation (and a coordinator resuming from a checkpoint) reproduce the
baseline exactly: the same tree and answer whatever order generations and scores arrive in.
"""

import pytest

from tests.core.machine_runs import run_query

CASES = [("rebase", 8), ("ets", 8), ("rstar", 5), ("rest", 5)]


@pytest.mark.parametrize(("algorithm", "target"), CASES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_shuffled_completion_order_gives_the_same_tree(algorithm, target, seed):
    reference = run_query(algorithm, target, seed)
    for order_seed in range(3):
        shuffled = run_query(algorithm, target, seed, order_seed=order_seed)
        assert shuffled.tree.digest() == reference.tree.digest()
        assert shuffled.answer == reference.answer


@pytest.mark.parametrize(("algorithm", "target"), CASES)
def test_a_different_seed_gives_a_different_tree(algorithm, target):
    assert run_query(algorithm, target, 0).tree.digest() != run_query(algorithm, target, 1).tree.digest()


def test_duplicate_results_are_ignored():
    machine = run_query("rebase", 4, 0)
    node = next(n for n in machine.tree if n.parent is not None)
    before = machine.tree.digest()
    assert machine.on_generated(node.id + ".0", node.id, "other text", 5, "stop", -1.0, 99.0) == []
    assert machine.on_scored(node.id, 0.0, 99.0) == []
    assert machine.tree.digest() == before
