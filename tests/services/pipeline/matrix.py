"""The failure matrix's harness: a rig of real service processes on a real Redis, the
questions submitted to it, a fault injected once work is under way, and the check every
fault's test ends with (each question answered exactly once with the fault-free tree)."""

import asyncio

from spex.bench.chaos.rig import Rig
from spex.proto.names import SINGLE, query_inbox
from spex.shared.runtime.settings import Settings
from spex.shared.sim.workload import SyntheticWorkload, WorkloadKnobs
from tests.services.helpers import answers_by_query, wait_for
from tests.services.workload import virtual_time

ALGORITHM, TARGET, MODE = "rebase", 8, "spex"


def run(fault, questions=3, settle_s=90.0, **settings):
    """Start a rig, submit `questions`, call `await fault(rig)` once work is under way, and
    return (answers, answers-stream counts, rig logs)."""

    async def go():
        timing = {"time_scale": 0.01, "heartbeat_s": 0.5, "lease_s": 2.0, "block_ms": 50}
        base = Settings(**{**timing, **settings})
        rig = Rig(base).start()
        try:
            await asyncio.to_thread(rig.wait_started)
            qids = [await submit_question(rig, i) for i in range(questions)]
            r = rig.client.r
            assert await wait_for(lambda: r.xlen(query_inbox(qids[0], SINGLE)), timeout_s=30)
            await fault(rig)
            await asyncio.to_thread(rig.heal_all)
            answers = {q: await rig.client.result(q, timeout_s=settle_s) for q in qids}
            await asyncio.sleep(0.3)
            return answers, await answers_by_query(r), {n: rig.log(n) for n in rig.names}
        finally:
            await asyncio.to_thread(rig.stop)

    return asyncio.run(go())


async def submit_question(rig, i, **fields):
    """Submit the workload's question `i` to the rig as the matrix searches it: its query id."""
    q = SyntheticWorkload(WorkloadKnobs(), 0).query(i)
    return await rig.client.submit(
        q.text, query_id=q.query_id, algorithm=ALGORITHM, target=TARGET, seed=0, mode=MODE,
        prompt_tokens=q.prompt_tokens, **fields,
    )  # fmt: skip


def assert_exactly_once_with_fault_free_trees(answers, counts):
    """Every question answered, once, with the tree of the fault-free (virtual-time) run."""
    expected = virtual_time(ALGORITHM, TARGET, len(answers), MODE)
    assert all(a is not None for a in answers.values()), "a question was lost"
    assert {q: (a.answer, a.tree_digest) for q, a in answers.items()} == expected
    assert {q: counts.get(q) for q in answers} == dict.fromkeys(answers, 1)
