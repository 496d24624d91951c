"""The coordinator core serves speculative results by identity, cancels BFS misses and keeps
DFS misses; the tree it returns is the baseline's."""

import random

import pytest

from spex.shared.core.commands import CancelCommand, GenerateCommand, PromoteCommand, ScoreCommand
from spex.shared.core.machine import QueryMachine
from spex.shared.core.search import SEARCHES, SearchConfig
from spex.shared.core.speculation import MAX_SPEC_PRIORITY, SpecPolicy, spec_priority
from spex.shared.sim.workload import SyntheticWorkload, WorkloadKnobs


def drive(algorithm, target, seed, speculate, share=6, order_seed=0, after_event=None):
    workload = SyntheticWorkload(WorkloadKnobs(), seed, SEARCHES[algorithm].family)
    spec = workload.query(1)
    machine = QueryMachine(
        spec.query_id,
        spec.prompt_tokens,
        SearchConfig(algorithm, target),
        seed,
        speculation=SpecPolicy(enabled=speculate),
        share=share if speculate else 0,
    )
    rng = random.Random(order_seed)
    log, pending = [], list(machine.start(0.0))
    t = 0.0
    while not machine.done:
        assert pending, "stalled"
        cmd = pending.pop(rng.randrange(len(pending)))
        log.append(cmd)
        t += 1.0
        if isinstance(cmd, GenerateCommand):
            path = [n.id for n in cmd.node.path()]
            g = workload.generate(spec, path)
            pending += machine.on_generated(
                cmd.job_id, cmd.node.id, g.text, g.tokens, g.finish_reason, g.mean_logprob, t
            )
        elif isinstance(cmd, ScoreCommand):
            path = [n.id for n in cmd.node.path()]
            pending += machine.on_scored(cmd.node.id, workload.prm_reward(spec, path), t)
        elif isinstance(cmd, CancelCommand):
            pending = [c for c in pending if not (isinstance(c, GenerateCommand) and c.job_id == cmd.job_id)]
        if after_event is not None:
            after_event(machine)
    return machine, log


@pytest.mark.parametrize(("algorithm", "target"), [("rebase", 8), ("ets", 8), ("rstar", 8), ("rest", 6)])
@pytest.mark.parametrize("order_seed", [0, 1])
def test_speculative_tree_equals_baseline(algorithm, target, order_seed):
    base, _ = drive(algorithm, target, 5, speculate=False)
    spec, log = drive(algorithm, target, 5, speculate=True, order_seed=order_seed)
    assert spec.tree.digest() == base.tree.digest() and spec.answer == base.answer
    spec_jobs = [c for c in log if isinstance(c, GenerateCommand) and c.priority > 0]
    primary = {c.node.id for c in log if isinstance(c, GenerateCommand) and c.priority == 0}
    assert spec_jobs and spec.stats.spec_adopted > 0
    tree_nodes = {n.id for n in spec.tree if n.parent is not None}
    # Every tree node was generated once: by a primary job, or by speculation it adopted.
    adopted = {c.node.id for c in spec_jobs} & tree_nodes
    assert tree_nodes == primary | adopted
    assert not primary & adopted


def test_bfs_misses_are_cancelled_and_never_enter_the_tree():
    machine, log = drive("rebase", 16, 2, speculate=True)
    cancelled = {c.job_id.rsplit(".", 1)[0] for c in log if isinstance(c, CancelCommand)}
    assert cancelled
    assert not cancelled & set(machine.tree.nodes)


def test_dfs_misses_stay_cached_and_are_not_cancelled():
    machine, log = drive("rstar", 10, 3, speculate=True)
    assert not [c for c in log if isinstance(c, CancelCommand)]
    assert machine.stats.spec_issued >= machine.stats.spec_adopted


def test_an_in_flight_speculative_job_is_adopted_and_promoted():
    logs = [drive("rstar", 10, s, speculate=True, order_seed=s)[1] for s in range(4)]
    assert any(isinstance(c, PromoteCommand) for log in logs for c in log)


def test_no_share_means_no_speculation():
    machine, log = drive("rebase", 8, 1, speculate=True, share=0)
    assert not [c for c in log if isinstance(c, GenerateCommand) and c.priority > 0]


@pytest.mark.parametrize(("algorithm", "target"), [("rebase", 16), ("rstar", 10)])
def test_speculative_priority_follows_the_distance_hit_rates_fall_with(algorithm, target):
    machine, log = drive(algorithm, target, 4, speculate=True)
    spec = [c for c in log if isinstance(c, GenerateCommand) and c.priority > 0]
    assert {type(c.priority) for c in spec} == {int}
    assert all(1 <= c.priority <= MAX_SPEC_PRIORITY for c in spec)
    if algorithm == "rebase":  # BFS: the node's depth, shallow levels first
        assert all(c.priority == spec_priority(c.node.depth) for c in spec)
    assert len({c.priority for c in spec}) > 2  # a real spread, not one low priority for all
    assert spec_priority(1) < spec_priority(2) < spec_priority(10**6) == MAX_SPEC_PRIORITY


@pytest.mark.parametrize(("algorithm", "target"), [("rstar", 10), ("rest", 6), ("rebase", 16), ("ets", 16)])
def test_offers_are_values_the_measured_hits_calibrate(algorithm, target):
    """Each query offers its speculative jobs and candidates with values in [0, 1]; a
    query's calibration is its hits over what its priors expected of the jobs decided."""
    seen: list[tuple[list[float], list[float], float]] = []
    machine, _ = drive(algorithm, target, 3, speculate=True, after_event=lambda m: seen.append(
        (*m.spec_offers(8), m.calibration)))  # fmt: skip
    values = [v for running, new, _ in seen for v in running + new]
    assert values and all(0.0 <= v <= 1.0 for v in values)
    assert max(values) <= machine.algorithm.spec_saving(1) == 1.0  # alone on its engine
    assert machine.algorithm.spec_saving(16) == (1.0 if machine.algorithm.family == "dfs" else 0.25)
    # Until a job is decided the calibration is 1; by the end the hits have moved it.
    assert seen[0][2] == 1.0 and seen[-1][2] != 1.0
    assert machine.spec_offers(8) == ([], [])  # a finished query offers nothing
    if machine.algorithm.family == "dfs":  # the next rollout's nodes are near-certain
        assert max(values) == pytest.approx(1.0, abs=0.35)
