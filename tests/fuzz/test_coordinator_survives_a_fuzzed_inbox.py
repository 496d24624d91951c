"""Wire fuzzing of a query's inbox ({q:<id>}:in, read without a group): fuzzed results, budgets,
cancellations and failures in a live query's inbox (its real job and node ids among the ids
drawn), against the real coordinator in-process on a real Redis: every undecodable entry is
parked in `dlq:{q:<id>}:in` with a reason, and the query still gets its answer."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spex.proto import AnswerResult, GenerateRequest, ScoreRequest, decode
from spex.proto.names import DEFAULT_POOL, SCORE_JOBS, SINGLE, gen_jobs, message_types, query_inbox
from spex.shared.runtime.refusals import Answered
from tests.fuzz import strategies as fz
from tests.fuzz.harness import CASES, DRAIN_S, FUZZ, NOTES, Fuzz, count, entry_order

# Hypothesis warns that a falsifying example of a megabyte has a long repr: it is meant to.
pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")


def test_coordinator_survives_a_fuzzed_inbox(fuzz):
    test = "coordinator {q:<id>}:in"
    fuzz.start(("coordinator", "coord-0"))
    coord = fuzz.service("coord-0")

    @FUZZ
    @given(data=st.data())
    def case(data):
        since = len(fuzz.logs)
        qid = fuzz.run(fuzz.cluster.client.submit("What is 5 + 6?", algorithm="rebase", target=4))
        query = fuzz.run(adopted(coord, qid))
        ids = [qid, *fuzz.run(job_ids(fuzz, qid))]
        types = message_types(query_inbox(qid, SINGLE))
        entries = data.draw(fz.entry_batches(types, ids, [qid]), label="entries")
        inbox = query_inbox(qid, SINGLE)
        added = fuzz.add(inbox, entries)
        query = fuzz.run(settle(coord, qid, query, added[-1][0]), DRAIN_S + 10)
        applied = [(i, f) for i, f in added if entry_order(i) <= entry_order(query.last_id)]
        fuzz.check_dead_letters(inbox, applied, grouped=False)
        result = fuzz.run(answer(fuzz, qid), DRAIN_S + 10)
        events = [e["event"] for e in list(fuzz.logs)[since:] if e.get("query_id") == qid]
        held = coord.queries.get(qid)
        assert result is not None, (
            f"{qid}: no answer after its inbox was fuzzed (held: {held and held.phase}; its events: {events})"
        )
        fuzz.healthy(since)
        count(test, 1, len(entries))

    case()
    NOTES[test] = f"coord-0: {coord.summary()}"
    fuzz.answered(("generator", "gen-0"), ("scorer", "scorer-0"), ("allocator", "allocator-0"))
    assert CASES[test]["examples"] >= 25


async def adopted(coord, qid: str) -> Any:
    """The coordinator's query `qid`, once it is adopted and its first jobs are all published
    (the ids drawn must not depend on how far the adoption got when we looked)."""
    deadline = asyncio.get_running_loop().time() + DRAIN_S
    while qid not in coord.queries or coord.queries[qid].replaying:
        assert asyncio.get_running_loop().time() < deadline, f"{qid} was not adopted"
        await asyncio.sleep(0.01)
    return coord.queries[qid]


async def job_ids(fuzz: Fuzz, qid: str) -> list[str]:
    """The job and node ids of every job of `qid` on the generation and score streams."""
    out: set[str] = set()
    for stream in (gen_jobs(DEFAULT_POOL), SCORE_JOBS):
        for _, fields in await fuzz.r.xrange(stream):
            msg = decode(stream, fields[b"e"])
            if msg.query_id == qid and isinstance(msg, GenerateRequest | ScoreRequest):
                out |= {msg.job_id, msg.node_id, *msg.prompt_node_ids}
    return sorted(out)


async def settle(coord, qid: str, query: Any, last: str) -> Any:
    """Wait until the query applied its inbox to `last`, or finished; the query as last held
    (a stall past the 1 s lease can lose it and adopt it again: a new record, replayed)."""
    deadline = asyncio.get_running_loop().time() + DRAIN_S
    while True:
        query = coord.queries.get(qid, query)
        if qid not in coord.queries or entry_order(query.last_id) >= entry_order(last):
            return query
        assert asyncio.get_running_loop().time() < deadline, f"{qid}: the inbox was not read"
        await asyncio.sleep(0.01)


async def answer(fuzz: Fuzz, qid: str) -> AnswerResult | None:
    """The query's answer, cancelling it first if it is still searching. (Not whether the
    coordinator holds it now: a stall past the lease — the test thread drawing a large case holds
    the interpreter — drops it until it is adopted again, and with no generator running only the
    cancel ends it.)"""
    with contextlib.suppress(Answered):  # answered already
        await fuzz.cluster.client.cancel(qid)
    return await fuzz.cluster.client.result(qid, timeout_s=DRAIN_S)
