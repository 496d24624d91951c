"""The failure matrix (issue #9): every fault on
real service processes and a real Redis (AOF, every write fsynced), each asserting that every
question is answered exactly once with the tree of the fault-free (virtual-time) run.

Timing: heartbeat 0.5 s (peers reclaim after 1.5 s), lease 2 s; stalls and partitions last
3 s, past both.
"""

import asyncio
import contextlib
import time

import msgspec
import pytest

from spex.bench.chaos.rig import Rig
from spex.proto import GenerateRequest, ScoreResult, encode
from spex.proto.names import DEFAULT_POOL, SCORE_JOBS, SINGLE, dead_letter, gen_jobs, query_inbox
from spex.shared.runtime.refusals import Answered
from spex.shared.runtime.settings import Settings
from tests.services.helpers import answers_by_query, wait_for
from tests.services.pipeline.matrix import (
    ALGORITHM,
    MODE,
    TARGET,
    assert_exactly_once_with_fault_free_trees,
    run,
    submit_question,
)
from tests.services.workload import virtual_time

PAST_LEASE_S = 3.0


async def _sleep_then(rig, seconds, action, name):
    await asyncio.sleep(seconds)
    await asyncio.to_thread(action, name)


# ---------------------------------------------------------------------------- processes
@pytest.mark.parametrize("victim", ["coord-0", "gen-0", "scorer-0", "alloc-0"])
def test_sigkill_of_each_service_kind(victim):
    async def fault(rig):
        await asyncio.to_thread(rig.kill, victim)

    answers, counts, _ = run(fault)
    assert_exactly_once_with_fault_free_trees(answers, counts)


@pytest.mark.parametrize("victim", ["coord-0", "gen-0", "scorer-0", "alloc-0"])
def test_stall_of_each_service_kind_past_its_lease_and_heartbeats(victim):
    async def fault(rig):
        rig.stall(victim)
        await _sleep_then(rig, PAST_LEASE_S, rig.resume, victim)

    answers, counts, logs = run(fault)
    assert_exactly_once_with_fault_free_trees(answers, counts)
    assert "service_failed" not in logs[victim]  # it rejoined; nothing had to restart it


@pytest.mark.parametrize("victim", ["coord-0", "gen-0", "scorer-0", "alloc-0"])
def test_network_partition_between_one_service_and_redis(victim):
    async def fault(rig):
        await asyncio.to_thread(rig.partition, victim)
        await _sleep_then(rig, PAST_LEASE_S, rig.heal, victim)

    answers, counts, logs = run(fault)
    assert_exactly_once_with_fault_free_trees(answers, counts)
    assert "redis_unavailable" in logs[victim]  # it saw the partition, waited it out


def test_redis_restart_with_aof():
    async def fault(rig):
        await asyncio.to_thread(rig.restart_redis, 0.5)

    answers, counts, _ = run(fault, questions=4)
    assert_exactly_once_with_fault_free_trees(answers, counts)


def test_full_restart_with_many_questions_in_flight():
    async def fault(rig):
        for name in rig.names:
            rig.supervisor.hold(name, True)
            await asyncio.to_thread(rig.kill, name)
        await asyncio.to_thread(rig.restart_redis, 0.3)
        for name in rig.names:
            rig.supervisor.hold(name, False)

    answers, counts, logs = run(fault, questions=10)
    assert_exactly_once_with_fault_free_trees(answers, counts)
    assert not any("changed size during iteration" in log for log in logs.values())


# ---------------------------------------------------------------------------- messages
def test_slow_consumer_is_not_reclaimed_spuriously():
    async def fault(rig):
        rig.proxies["gen-0"].set_latency(0.05)  # every Redis call of gen-0 +100 ms round trip
        await asyncio.sleep(2.0)

    answers, counts, logs = run(fault)
    assert_exactly_once_with_fault_free_trees(answers, counts)
    assert "job_reclaimed" not in logs["gen-1"]


def test_duplicate_delivery_of_jobs_and_results():
    """At-least-once everywhere: every job delivered twice, every inbox entry appended twice."""

    async def fault(rig):
        r = rig.client.r
        seen: set[bytes] = set()
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            for stream in [
                gen_jobs(DEFAULT_POOL),
                SCORE_JOBS,
                *[query_inbox(f"q{i:05d}", SINGLE) for i in range(3)],
            ]:
                for entry_id, fields in await r.xrange(stream):
                    if entry_id not in seen and b"e" in fields:
                        seen.add(entry_id)
                        seen.add(await r.xadd(stream, {"e": fields[b"e"]}))
            await asyncio.sleep(0.05)

    answers, counts, _ = run(fault)
    assert_exactly_once_with_fault_free_trees(answers, counts)


def test_poison_messages_with_a_valid_schema_and_bad_content():
    async def fault(rig):
        r = rig.client.r
        bad_job = GenerateRequest(
            msg_id="poison", query_id="q00000", job_id="no-such-job", node_id="no-such-node", parent_id="x",
            child_index=0, action="expand", prompt_node_ids=["q00000"], prompt_tokens=[-5], seed=1,
        )  # fmt: skip
        await r.xadd(gen_jobs(DEFAULT_POOL), {"e": encode(bad_job)})
        stray = ScoreResult(
            msg_id="stray", query_id="q00001", job_id="nope", node_id="nope", reward=float("nan")
        )
        await r.xadd(query_inbox("q00001", SINGLE), {"e": encode(stray)})
        assert await wait_for(lambda: r.exists(dead_letter(gen_jobs(DEFAULT_POOL))))

    answers, counts, _ = run(fault)
    assert_exactly_once_with_fault_free_trees(answers, counts)


def test_an_oversized_message_is_dead_lettered():
    async def fault(rig):
        r = rig.client.r
        big = msgspec.msgpack.encode({"type": "GenerateRequest", "v": 1, "pad": "x" * (2 << 20)})
        await r.xadd(gen_jobs(DEFAULT_POOL), {"e": big})
        assert await wait_for(lambda: r.exists(dead_letter(gen_jobs(DEFAULT_POOL))))
        ((_, entry),) = await r.xrange(dead_letter(gen_jobs(DEFAULT_POOL)))
        assert b"limit" in entry[b"reason"]

    answers, counts, _ = run(fault)
    assert_exactly_once_with_fault_free_trees(answers, counts)


def test_cancel_racing_completion_answers_each_question_once():
    questions = 6

    async def go():
        rig = Rig(Settings(time_scale=0.005, heartbeat_s=0.5, lease_s=2.0, block_ms=50)).start()
        try:
            await asyncio.to_thread(rig.wait_started)
            qids = [await submit_question(rig, i) for i in range(questions)]
            # Cancel each at a different moment: some long before, some just as it finishes.
            for i, qid in enumerate(qids):
                await asyncio.sleep(0.15 * i)
                with contextlib.suppress(Answered):  # the answer won the race: the cancel says so
                    await rig.client.cancel(qid)
            answers = {q: await rig.client.result(q, timeout_s=60) for q in qids}
            await asyncio.sleep(0.3)
            return answers, await answers_by_query(rig.client.r)
        finally:
            await asyncio.to_thread(rig.stop)

    answers, counts = asyncio.run(go())
    expected = virtual_time(ALGORITHM, TARGET, questions, MODE)
    assert all(a is not None for a in answers.values())
    assert {q: counts.get(q) for q in answers} == dict.fromkeys(answers, 1)
    for q, a in answers.items():  # cancelled (no answer), or finished with the fault-free tree
        assert a.answer is None or (a.answer, a.tree_digest) == expected[q]


def test_resubmission_with_the_same_and_with_a_different_body():
    from spex.shared.runtime.refusals import KeyConflict

    async def fault(rig):
        same = await submit_question(rig, 5, client_key="again")
        assert await submit_question(rig, 5, client_key="again") == same  # a retry: the same query
        with pytest.raises(KeyConflict):
            await rig.client.submit("another question", client_key="again")

    answers, counts, _ = run(fault)
    assert_exactly_once_with_fault_free_trees({q: a for q, a in answers.items()}, counts)


def test_backlog_overflow_is_refused_and_recovers():
    from spex.shared.runtime.refusals import Backpressure

    async def go():
        rig = Rig(Settings(time_scale=0.01, backlog_limit=3, block_ms=50)).start()
        try:
            await asyncio.to_thread(rig.wait_started)
            qids = [await submit_question(rig, i) for i in range(3)]
            with pytest.raises(Backpressure):
                await submit_question(rig, 3)
            answers = {q: await rig.client.result(q, timeout_s=60) for q in qids}
            late = await submit_question(rig, 3)  # the backlog drained: accepted again
            answers[late] = await rig.client.result(late, timeout_s=60)
            return answers, await answers_by_query(rig.client.r)
        finally:
            await asyncio.to_thread(rig.stop)

    answers, counts = asyncio.run(go())
    assert_exactly_once_with_fault_free_trees(answers, counts)


def test_sigkill_of_the_http_ingress_loses_no_question(redis_url):
    """The ingress holds nothing: a client that retries its POST (same client key) after a
    crash gets the same query, answered once."""
    from spex.shared.runtime.redis_server import free_port
    from tests.services.cluster import Cluster
    from tests.services.helpers import http, wait_http

    port = free_port()

    async def go():
        cluster = Cluster(redis_url, "processes", http_port=port)
        await cluster.start_all()
        await cluster.start("ingress", "ingress-0")
        base = f"http://127.0.0.1:{port}/v1/questions"
        body = {"question": "1+1?", "algorithm": "rstar", "target": 3, "client_key": "retry-me"}
        try:
            await asyncio.to_thread(wait_http, base + "/x")
            first = await asyncio.to_thread(http, "POST", base, body)
            cluster.kill("ingress-0")  # restarted by the supervisor
            await asyncio.to_thread(wait_http, base + "/x")
            second = await asyncio.to_thread(http, "POST", base, body)
            answer = await cluster.client.result(first[1]["query_id"], timeout_s=30)
            await asyncio.sleep(0.3)
            return first, second, answer, await answers_by_query(cluster.client.r)
        finally:
            await cluster.stop()

    first, second, answer, counts = asyncio.run(go())
    assert first[0] == 202 and second == first
    assert answer is not None and counts == {first[1]["query_id"]: 1}
