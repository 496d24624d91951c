"""What `spex.evaluate` answers on the simulated GPU is what the pipeline answers: the same
questions submitted to real services on a real Redis come back with the same answers and tree
digests, question by question (the pipeline's own tests hold it to the benchmark's virtual
time the same way)."""

import asyncio

import pytest

import spex
from tests.services.cluster import Cluster
from tests.services.workload import submit_all


@pytest.mark.parametrize(("algorithm", "target", "mode"), [("rstar", 5, "baseline"), ("rebase", 8, "spex")])
def test_the_pipeline_answers_what_an_offline_evaluation_does(redis_url, algorithm, target, mode):
    async def pipeline():
        cluster = Cluster(redis_url, "inprocess")
        await cluster.start_all(generators=2)
        try:
            return await submit_all(cluster, algorithm, target, 3, mode, seed=11)
        finally:
            await cluster.stop()

    answers = asyncio.run(pipeline())
    offline = spex.evaluate(
        questions=3, algorithm=algorithm, target=target, mode=mode, seed=11, progress=False
    )
    assert all(a is not None for a in answers.values()), "a question was not answered"
    assert {q: (a.answer, a.tree_digest) for q, a in answers.items()} == {
        r.query_id: (r.answer, r.tree_digest) for r in offline
    }
    assert {q: list(a.solution) for q, a in answers.items()} == {
        r.query_id: list(r.solution) for r in offline
    }
