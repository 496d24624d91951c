"""Wire fuzzing of the scorer: extreme-but-valid messages and arbitrary bytes on its job stream
(score:jobs), against the real service in-process on a real Redis, checked after each batch
as `tests/fuzz/harness.py` says."""

from __future__ import annotations

import pytest
from hypothesis import given

from spex.proto import ScoreRequest
from spex.proto.names import SCORE_JOBS, SCORER_GROUP
from tests.fuzz import strategies as fz
from tests.fuzz.harness import CASES, FUZZ, NOTES, count

# Hypothesis warns that a falsifying example of a megabyte has a long repr: it is meant to.
pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")


def test_scorer_survives_fuzzed_score_jobs(fuzz):
    test = "scorer score:jobs"
    fuzz.start(("scorer", "scorer-0"))
    scorer = fuzz.service("scorer-0")
    known = fuzz.known_queries(3)
    ids = ["j-0", "n-0", "root", known[0]]

    def pending() -> set[str]:  # called on the loop
        return scorer.held()

    everything = fuzz.seeded(SCORE_JOBS, SCORER_GROUP, held=pending)

    @FUZZ
    @given(jobs=fz.entry_batches((ScoreRequest,), ids, known))
    def case(jobs):
        since = len(fuzz.logs)
        added = fuzz.add(SCORE_JOBS, jobs)
        fuzz.drained(SCORE_JOBS, SCORER_GROUP, added, held=pending)
        fuzz.check_dead_letters(SCORE_JOBS, added)
        fuzz.healthy(since)
        everything.extend(added)
        count(test, 1, len(jobs))

    case()
    fuzz.drained(SCORE_JOBS, SCORER_GROUP, everything)
    NOTES[test] = f"scorer-0: {scorer.summary()}"
    fuzz.answered(("coordinator", "coord-0"), ("generator", "gen-0"), ("allocator", "allocator-0"))
    assert CASES[test]["examples"] >= 25
