"""The search is a function of node identities, not of the order in which work completes.

This is what lets speculation (and a coordinator resuming from a checkpoint) reproduce the
baseline exactly: the same tree and answer whatever order generations and scores arrive in.
"""

import random

import pytest

from spex.shared.core.commands import GenerateCommand, ScoreCommand
from spex.shared.core.machine import QueryMachine
from spex.shared.core.search import SEARCHES, SearchConfig
from spex.shared.sim.workload import SyntheticWorkload, WorkloadKnobs

CASES = [("rebase", 8), ("ets", 8), ("rstar", 5), ("rest", 5)]


def run_query(algorithm, target, seed, order_seed=None, reward="prm", query=3):
    workload = SyntheticWorkload(WorkloadKnobs(), seed, SEARCHES[algorithm].family)
    spec = workload.query(query)
    machine = QueryMachine(spec.query_id, spec.prompt_tokens, SearchConfig(algorithm, target), seed, reward)
    pending = list(machine.start(0.0))
    rng = random.Random(order_seed)
    steps = 0
    while not machine.done:
        cmd = pending.pop(rng.randrange(len(pending)) if order_seed is not None else 0)
        path = [n.id for n in cmd.node.path()] if isinstance(cmd, GenerateCommand | ScoreCommand) else []
        steps += 1
        if isinstance(cmd, GenerateCommand):
            gen = workload.generate(spec, path)
            pending += machine.on_generated(
                cmd.job_id,
                cmd.node.id,
                gen.text,
                gen.tokens,
                gen.finish_reason,
                gen.mean_logprob,
                float(steps),
            )
        elif isinstance(cmd, ScoreCommand):
            pending += machine.on_scored(cmd.node.id, workload.prm_reward(spec, path), float(steps))
    return machine


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
