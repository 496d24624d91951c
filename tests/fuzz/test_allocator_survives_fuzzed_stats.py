"""Wire fuzzing of the allocator: fuzzed query stats (stats:queries) and generator loads
(worker:<id>:load keys), against the real service in-process on a real Redis: the allocator
drops what does not decode, clamps what does, and keeps allocating."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spex.proto import BudgetUpdateEvent, QueryStatsEvent, WorkerLoadEvent, decode, encode
from spex.proto.names import ALLOCATOR_LEASE, QUERY_STATS, SINGLE, query_inbox, worker_load
from tests.fuzz import strategies as fz
from tests.fuzz.harness import CASES, DRAIN_S, FUZZ, NOTES, Fuzz, as_text, count, entry_order

# Hypothesis warns that a falsifying example of a megabyte has a long repr: it is meant to.
pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")


def test_allocator_survives_fuzzed_stats_and_worker_loads(fuzz):
    test = "allocator stats:queries + worker:<id>:load"
    fuzz.start(("allocator", "allocator-0"))
    alloc = fuzz.service("allocator-0")
    ids = fuzz.known_queries(4)

    assert fuzz.run(fuzz.cluster._wait_for(ALLOCATOR_LEASE)) is None
    assert fuzz.run(read_to(fuzz, alloc, ids[0], None, 1)), "the allocator never read a stats entry"
    worker_ids = st.one_of(st.sampled_from(["gen-0", "gen-1"]), fz.strings(short=True))
    load_payloads = st.one_of(
        fz.encoded(fz.plausible(WorkerLoadEvent)),
        fz.encoded(fz.message(WorkerLoadEvent)),
        fz.arbitrary_payload((WorkerLoadEvent,)),
    )

    @FUZZ
    @given(
        stats=fz.entry_batches((QueryStatsEvent,), [], ids),
        loads=st.lists(st.tuples(worker_ids, load_payloads), max_size=4),
    )
    def case(stats, loads):
        since = len(fuzz.logs)
        set_loads(fuzz, loads)
        added = fuzz.add(QUERY_STATS, stats)
        assert fuzz.run(read_to(fuzz, alloc, ids[0], added[-1][0], 2), DRAIN_S + 10), (
            "the allocator stopped allocating"
        )
        fuzz.healthy(since)
        count(test, 1, len(stats) + len(loads))

    case()
    published = fuzz.run(budgets(fuzz, ids))
    assert published, "the allocator published no budget for the known queries"
    NOTES[test] = f"allocator-0: {alloc.summary()}; budgets published: {len(published)}"
    assert all(b.share >= 0 and b.k_total >= 1 for b in published), published[:3]
    fuzz.answered(("coordinator", "coord-0"), ("generator", "gen-0"), ("scorer", "scorer-0"))
    assert CASES[test]["examples"] >= 25


async def read_to(fuzz: Fuzz, alloc, warm_up_qid: str, last: str | None, rounds: int) -> bool:
    """Wait until the allocator read the stream to `last` (None: any entry, writing stats of
    `warm_up_qid` until it has), then finished `rounds` more allocation rounds."""
    deadline = asyncio.get_running_loop().time() + DRAIN_S
    while asyncio.get_running_loop().time() < deadline:
        (seen,) = alloc._last.values()  # one partition: one part to read
        if seen != "$" and (last is None or entry_order(as_text(seen)) >= entry_order(last)):
            break
        if last is None:  # it reads from "$": keep writing until it has seen one entry
            await fuzz.r.xadd(QUERY_STATS, {"e": encode(_stats(warm_up_qid))})
        await asyncio.sleep(0.02)
    else:
        return False
    start = alloc.rounds
    while alloc.rounds < start + rounds:
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


def set_loads(fuzz: Fuzz, loads: list[tuple[str, bytes]]) -> None:
    """Write each (worker, payload) as that worker's load key, expiring in half a second."""

    async def go() -> None:
        for worker, payload in loads:
            await fuzz.r.set(worker_load(worker), payload, px=500)

    fuzz.run(go())


async def budgets(fuzz: Fuzz, qids: list[str]) -> list[BudgetUpdateEvent]:
    """Every budget the allocator published to the inboxes of `qids`."""
    out = []
    for qid in qids:
        for _, fields in await fuzz.r.xrange(query_inbox(qid, SINGLE)):
            msg = decode(query_inbox(qid, SINGLE), fields[b"e"])
            if isinstance(msg, BudgetUpdateEvent):
                out.append(msg)
    return out


def _stats(qid: str) -> QueryStatsEvent:
    return QueryStatsEvent(
        msg_id=f"stats/{qid}/warm-up",
        query_id=qid,
        running=[0.5],
        offers=[0.5, 0.5],
        prefix_tokens=100,
        active_jobs=1,
    )
