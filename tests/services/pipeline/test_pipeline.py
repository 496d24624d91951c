"""The services answer exactly as the virtual-time run does, in-process and as processes."""

import asyncio

import pytest

from spex.shared.core.spec.early_stop import EarlyStop
from tests.services.cluster import Cluster
from tests.services.workload import budgets_received, submit_all, virtual_time

pytestmark = pytest.mark.every_redis  # where Redis versions differ: every server kind


@pytest.mark.parametrize("process_mode", ["inprocess", "processes"])
@pytest.mark.parametrize(("algorithm", "target", "mode"), [("rstar", 5, "baseline"), ("rebase", 8, "spex")])
def test_distributed_answers_equal_virtual_time(redis_url, process_mode, algorithm, target, mode):
    async def go():
        cluster = Cluster(redis_url, process_mode)
        await cluster.start_all(generators=2)
        try:
            answers = await submit_all(cluster, algorithm, target, 3, mode)
            return answers, await budgets_received(cluster, answers)
        finally:
            await cluster.stop()

    answers, budgets = asyncio.run(go())
    expected = virtual_time(algorithm, target, 3, mode)
    assert all(a is not None for a in answers.values()), "a question was not answered"
    assert {q: (a.answer, a.tree_digest) for q, a in answers.items()} == expected
    # The allocator runs in the cluster: speculating queries get T2 shares, the others none.
    assert (budgets > 0) == (mode == "spex")


@pytest.mark.parametrize(
    ("algorithm", "target", "mode", "options"),
    [
        ("rebase", 8, "spex", {}),
        ("rstar", 10, "spex", {"early_stop_alpha": 1.0}),
        ("rest", 5, "baseline", {"early_stop_min_answers": 2, "early_stop_weight": "last"}),
    ],
)
def test_early_termination_in_the_pipeline_stops_where_virtual_time_does(
    redis_url, algorithm, target, mode, options
):
    """T3 as a submission field: the coordinator stops each search at the step virtual time's
    T3 does, cancels what it had in flight and answers `early_stopped` with the nodes kept."""

    async def go():
        cluster = Cluster(redis_url, "inprocess")
        await cluster.start_all(generators=2)
        try:
            return await submit_all(cluster, algorithm, target, 4, mode, early_stop=True, **options)
        finally:
            await cluster.stop()

    answers = asyncio.run(go())
    rule = EarlyStop(
        True,
        options.get("early_stop_alpha", 0.5),
        options.get("early_stop_min_answers"),
        weight=options.get("early_stop_weight", "min"),
    )
    expected = virtual_time(algorithm, target, 4, mode, early_stop=rule)
    assert all(a is not None for a in answers.values()), "a question was not answered"
    got = {q: (a.answer, a.tree_digest, a.early_stopped) for q, a in answers.items()}
    assert got == expected
    assert any(stopped for _, _, stopped in got.values()), "T3 never stopped a search: the test shows nothing"
    plain = virtual_time(algorithm, target, 4, mode, early_stop=EarlyStop())
    stopped = [q for q, (_, _, early) in expected.items() if early]
    assert all(expected[q][1] != plain[q][1] for q in stopped)  # a stopped tree is a smaller tree
