"""Wire fuzzing of the coordinator's intake: fuzzed questions on the ingress stream
(ingress:new), with the whole pipeline running in-process on a real Redis, checked after each
batch as `tests/fuzz/harness.py` says: a bad question is dead-lettered with its reason (and
answered as rejected), a searchable one is answered."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given

from spex.proto import SubmissionError, SubmitQuestionRequest, decode, encode, submission
from spex.proto.names import COORDINATOR_GROUP, INGRESS, SINGLE, query_request, reply_key
from tests.fuzz import strategies as fz
from tests.fuzz.harness import CASES, DRAIN_S, FUZZ, NOTES, Fuzz, count, decodes

# Hypothesis warns that a falsifying example of a megabyte has a long repr: it is meant to.
pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")


def test_coordinator_survives_fuzzed_submissions(fuzz):
    test = "coordinator ingress:new"
    fuzz.start(
        ("coordinator", "coord-0"),
        ("generator", "gen-0"),
        ("scorer", "scorer-0"),
        ("allocator", "allocator-0"),
    )
    # Mostly fresh query ids (a rejected question keeps its id answered), a few shared ones.
    ids = [*(f"fz-{i:04d}" for i in range(500)), "fz.c", "FZ:d", "x" * 64]
    everything: list[tuple[str, dict[str, bytes]]] = []
    searchable: set[str] = set()
    fuzz.seeded(INGRESS, COORDINATOR_GROUP)

    @FUZZ
    @given(entries=fz.entry_batches((SubmitQuestionRequest,), [], ids, max_size=12))
    def case(entries):
        since = len(fuzz.logs)
        fuzz.run(stored_as_the_ingress_does(fuzz, entries))
        added = fuzz.add(INGRESS, entries)
        fuzz.drained(INGRESS, COORDINATOR_GROUP, added)
        fuzz.check_dead_letters(INGRESS, added)
        searchable.update(searchable_questions(fuzz, added))
        fuzz.healthy(since)
        everything.extend(added)
        count(test, 1, len(entries))

    case()
    unanswered = fuzz.run(unanswered_questions(fuzz, searchable), DRAIN_S + 10)
    assert not unanswered, f"searchable fuzzed questions never answered: {unanswered}"
    coord = fuzz.service("coord-0")
    NOTES[test] = f"searchable questions answered: {len(searchable)}; coord-0: {coord.summary()}"
    fuzz.drained(INGRESS, COORDINATOR_GROUP, everything)
    fuzz.answered()
    assert CASES[test]["examples"] >= 25

    # A question queued by a foreign writer (no request stored under its id) is not searched.
    foreign = SubmitQuestionRequest(msg_id="m-foreign", query_id="fz-foreign", question="1+1?", target=2)
    (added,) = fuzz.add(INGRESS, [{"e": encode(foreign)}])
    fuzz.drained(INGRESS, COORDINATOR_GROUP, [added])
    reason = fuzz.dead_letters(INGRESS)[added[0]][b"reason"].decode()
    assert reason.startswith("not submitted through the ingress"), reason


async def stored_as_the_ingress_does(fuzz: Fuzz, entries: list[dict[str, bytes]]) -> None:
    """Each decodable question's request under its id, unless one is stored (the ingress's
    submit script refuses a taken id)."""
    for fields in entries:
        if decodes(INGRESS, fields):
            req = decode(INGRESS, fields["e"])
            if isinstance(req, SubmitQuestionRequest):
                await fuzz.r.set(query_request(req.query_id, SINGLE), fields["e"], nx=True)


def searchable_questions(fuzz: Fuzz, added: list[tuple[str, dict[str, bytes]]]) -> set[str]:
    """The query ids of the `added` questions the coordinator took; every invalid one (by the
    submission limits) was dead-lettered."""
    limits = fuzz.cluster.settings.limits
    dlq = fuzz.dead_letters(INGRESS)
    out: set[str] = set()
    for entry_id, fields in added:
        if not decodes(INGRESS, fields):
            continue
        req = decode(INGRESS, fields["e"])
        assert isinstance(req, SubmitQuestionRequest)
        try:
            submission.validate(req, limits)
        except SubmissionError:
            assert entry_id in dlq, f"an invalid question was not dead-lettered: {req!r:.300}"
            continue
        if entry_id not in dlq:
            out.add(req.query_id)
    return out


async def unanswered_questions(fuzz: Fuzz, searchable: set[str]) -> list[str]:
    """The searchable questions not answered (or failed) within the drain time."""
    deadline = asyncio.get_running_loop().time() + DRAIN_S
    while True:
        left = [q for q in sorted(searchable) if not await fuzz.r.exists(reply_key(q, SINGLE))]
        if not left or asyncio.get_running_loop().time() > deadline:
            return left
        await asyncio.sleep(0.05)
