"""Failure injection on real processes and a real Redis: every question is answered once."""

import asyncio

import msgspec
import pytest
import redis.asyncio as aioredis

from spex.proto import ScoreResult, decode, encode
from spex.proto.names import (
    ANSWERS,
    DEFAULT_POOL,
    INGRESS,
    SINGLE,
    dead_letter,
    gen_jobs,
    query_inbox,
    query_lease,
    query_request,
    worker_load,
)
from tests.services.cluster import Cluster
from tests.services.helpers import jobs_pending
from tests.services.workload import submit_all, virtual_time


async def wait_for(predicate, timeout_s=20.0, every_s=0.05):
    deadline = asyncio.get_running_loop().time() + timeout_s
    while asyncio.get_running_loop().time() < deadline:
        if await predicate():
            return True
        await asyncio.sleep(every_s)
    return False


MODES = ["inprocess", "processes"]


@pytest.mark.parametrize("process_mode", MODES)
def test_duplicate_submission_is_answered_once(redis_url, process_mode):
    async def go():
        cluster = Cluster(redis_url, process_mode)
        await cluster.start_all()
        try:
            first = await cluster.client.submit("2+2?", client_key="k-1", algorithm="rstar", target=3)
            second = await cluster.client.submit("2+2?", client_key="k-1", algorithm="rstar", target=3)
            assert first == second
            assert await cluster.client.result(first, timeout_s=30) is not None
            await asyncio.sleep(0.3)
            return await cluster.client.r.xlen(ANSWERS)
        finally:
            await cluster.stop()

    assert asyncio.run(go()) == 1


@pytest.mark.parametrize("process_mode", MODES)
def test_malformed_and_unknown_version_are_dead_lettered_while_serving(redis_url, process_mode):
    async def go():
        cluster = Cluster(redis_url, process_mode)
        await cluster.start_all()
        r = cluster.client.r
        try:
            await r.xadd(INGRESS, {"e": b"\x93garbage"})
            raw = msgspec.msgpack.decode(
                encode(ScoreResult(msg_id="x", query_id="q", job_id="j", node_id="n", reward=0.1))
            )
            raw["v"] = 2
            await r.xadd(gen_jobs(DEFAULT_POOL), {"e": msgspec.msgpack.encode(raw)})
            await r.xadd(INGRESS, {"e": msgspec.msgpack.encode({**raw, "type": "SubmitQuestionRequest"})})
            qid = await cluster.client.submit("still serving?", algorithm="rebase", target=4)
            answer = await cluster.client.result(qid, timeout_s=30)
            reasons = [f[b"reason"].decode() for _, f in await r.xrange(dead_letter(INGRESS))]
            reasons += [f[b"reason"].decode() for _, f in await r.xrange(dead_letter(gen_jobs(DEFAULT_POOL)))]
            return answer, reasons
        finally:
            await cluster.stop()

    answer, reasons = asyncio.run(go())
    assert answer is not None
    assert len(reasons) == 3
    assert any("MessagePack" in r or "Expected" in r for r in reasons)
    assert sum("unknown protocol version 2" in r for r in reasons) == 2


@pytest.mark.parametrize("process_mode", MODES)
def test_cancelled_query_aborts_its_jobs_and_frees_their_slots(redis_url, process_mode):
    async def go():
        cluster = Cluster(redis_url, process_mode, time_scale=0.05)
        await cluster.start_all()
        r = cluster.client.r
        try:
            qid = await cluster.client.submit("a long search", algorithm="rebase", target=16)
            assert await wait_for(lambda: _load(r, lambda load: load.running >= 8))
            await cluster.client.cancel(qid)
            answer = await cluster.client.result(qid, timeout_s=10)
            freed = await wait_for(lambda: _load(r, lambda load: load.running == 0), timeout_s=5)
            return answer, freed, await jobs_pending(r)
        finally:
            await cluster.stop()

    answer, freed, pending = asyncio.run(go())
    assert answer is not None and answer.answer is None  # cancelled: no answer
    assert freed  # the engine's slots are free again
    assert pending == 0  # every aborted job was acknowledged


async def _load(r, check):
    key = worker_load("gen-0")
    raw = await r.get(key)
    return raw is not None and check(decode(key, raw))


@pytest.mark.parametrize("victim", ["generator", "coordinator"])
def test_a_killed_process_loses_no_question(redis_url, victim):
    questions = 4

    async def go():
        cluster = Cluster(redis_url, "processes", time_scale=0.01, heartbeat_s=0.3, lease_s=1.0)
        await cluster.start_all(generators=2, coordinators=2)
        r = cluster.client.r
        try:
            task = asyncio.create_task(submit_all(cluster, "rebase", 8, questions, "spex"))
            # Wait until work is under way, then kill one process mid-job / mid-query.
            assert await wait_for(lambda: _has_results(r, "q00000"))
            if victim == "generator":
                cluster.kill("gen-0")
            else:
                owner = (await r.get(query_lease("q00000", SINGLE))).decode()
                cluster.kill(owner)
            answers = await asyncio.wait_for(task, timeout=60)
            await asyncio.sleep(0.5)
            return answers, await r.xlen(ANSWERS)
        finally:
            await cluster.stop()

    answers, answered = asyncio.run(go())
    expected = virtual_time("rebase", 8, questions, "spex")
    assert answered == questions  # once each
    assert {q: (a.answer, a.tree_digest) for q, a in answers.items()} == expected


async def _has_results(r: aioredis.Redis, qid: str) -> bool:
    return await r.xlen(query_inbox(qid, SINGLE)) >= 3


def test_a_real_content_job_on_a_simulated_engine_is_dead_lettered_with_the_reason(redis_url):
    from spex.proto import GenerateRequest, SubmitQuestionRequest

    async def go():
        cluster = Cluster(redis_url, "inprocess")
        await cluster.start("generator", "gen-0")
        r = cluster.client.r
        try:
            job = GenerateRequest(
                msg_id="m",
                query_id="q",
                job_id="j",
                node_id="n",
                parent_id="p",
                child_index=0,
                action="expand",
                prompt_node_ids=["p"],
                prompt_tokens=[10],
                seed=1,
                content="real",
                question="What is 2+2?",
            )
            await r.set(
                query_request("q", SINGLE),
                encode(SubmitQuestionRequest(msg_id="s", query_id="q", question="?")),
            )
            await r.xadd(gen_jobs(DEFAULT_POOL), {"e": encode(job)})
            assert await wait_for(lambda: r.xlen(dead_letter(gen_jobs(DEFAULT_POOL))))
            ((_, entry),) = await r.xrange(dead_letter(gen_jobs(DEFAULT_POOL)))
            return entry[b"reason"].decode(), cluster.service("gen-0").jobs
        finally:
            await cluster.stop()

    reason, running = asyncio.run(go())
    assert "real engine" in reason and not running
