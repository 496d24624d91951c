"""A baseline twin (a question searched again with speculation off, to check losslessness
through the API) grows its original's very tree, under job ids of its own: two queries' jobs
with one id are taken for one another by the workers (one is dropped as a duplicate, or
cancelled by the other's cancel)."""

import pytest

from spex.shared.core.commands import GenerateCommand, ScoreCommand
from tests.core.machine_runs import drive


@pytest.mark.parametrize("algorithm", ["rebase", "rstar", "ets", "rest"])
def test_a_twin_grows_its_original_s_tree_under_job_ids_of_its_own(algorithm):
    original, ran = drive(algorithm, 4, 3, speculate=True)
    twin, twin_ran = drive(algorithm, 4, 3, speculate=False, twin=True)
    assert twin.query_id != original.query_id
    assert twin.tree.digest(rewards=True) == original.tree.digest(rewards=True)
    assert twin.answer == original.answer
    jobs = {c.job_id for c in ran if isinstance(c, GenerateCommand)}
    twin_jobs = {c.job_id for c in twin_ran if isinstance(c, GenerateCommand)}
    assert twin_jobs and not jobs & twin_jobs
    scores = {original.score_job_id(c.node.id) for c in ran if isinstance(c, ScoreCommand)}
    twin_scores = {twin.score_job_id(c.node.id) for c in twin_ran if isinstance(c, ScoreCommand)}
    assert twin_scores and not scores & twin_scores
