"""REBASE's level loop: every level keeps exactly the remaining budget; at most N answers."""

from collections import Counter

import pytest

from tests.core.machine_runs import run_query


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("algorithm", ["rebase", "ets"])
def test_each_level_spends_exactly_the_remaining_budget(seed, algorithm):
    width = 16
    machine = run_query(algorithm, width, seed)
    nodes = [n for n in machine.tree if n.parent is not None]
    per_depth = Counter(n.depth for n in nodes)
    finished_above = 0
    for depth in sorted(per_depth):
        assert per_depth[depth] == width - finished_above
        finished_above += sum(1 for n in nodes if n.depth == depth and (n.terminal or n.cum_tokens >= 1024))
    assert len(machine.solutions) <= width
    assert all(s.terminal for s in machine.solutions)


def test_rstar_runs_its_rollouts_and_expands_every_child_together():
    machine = run_query("rstar", 10, 0)
    algo = machine.algorithm
    assert algo.visits[machine.tree.root.id] == 10
    assert max(n.depth for n in machine.tree) <= 5
    # Every node a rollout went through was expanded whole: all 4 children (the artifact's
    # mcts_wid), never one at a time; leaves have none.
    assert all(len(n.kids()) in (0, 4) for n in machine.tree)
    assert all(len(n.kids()) == 4 for n in machine.tree if algo.visits.get(n.id) and not algo.is_leaf(n))


def test_rest_runs_its_rounds_and_expands_three_children():
    machine = run_query("rest", 10, 0)
    algo = machine.algorithm
    assert algo.visits[machine.tree.root.id] == 10
    assert all(len(n.kids()) in (0, 3) for n in machine.tree)
