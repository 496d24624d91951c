"""Redis out of memory (every write refused: `OOM command not allowed when used memory >
'maxmemory'`) for longer than a lease and three heartbeats, with questions in flight: no
service stops, and once memory is back every question is answered exactly once with the
fault-free tree. The services used to crash-loop on the refusals, and every result write
Redis refused counted as a delivery of its job, so that afterwards most questions failed
"delivered 5 times" (issue 40: 272 of 300)."""

import asyncio

from tests.services.pipeline.matrix import assert_exactly_once_with_fault_free_trees, run

FULL_S = 4.0  # past the lease (2 s) and a peer's reclaim (3 × 0.5 s)


def test_redis_out_of_memory_with_questions_in_flight():
    async def fault(rig):
        await asyncio.to_thread(rig.fill_redis)
        await asyncio.sleep(FULL_S)
        await asyncio.to_thread(rig.free_redis)

    answers, counts, logs = run(fault, questions=4)
    assert_exactly_once_with_fault_free_trees(answers, counts)
    for name, log in logs.items():
        assert "service_failed" not in log, f"{name} stopped while Redis was out of memory"
        assert "loop_failed" not in log, f"{name}: a refusal counted as its loop's failure"
    said = sum(log.count('"redis_unavailable"') for log in logs.values())
    assert 0 < said <= 2 * len(logs), "one line when Redis goes (per process), not one per attempt"
