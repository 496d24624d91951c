"""Redis losing its data (FLUSHALL: a restart without persistence) with questions in flight
under client keys, the coordinator stalled (SIGSTOP) through it, and the keys posted again
over HTTP while it is: the harness of the data-loss tests. Real service processes, a real
ingress, a real Redis."""

import asyncio
import time
from dataclasses import dataclass, field

from spex.proto.names import SINGLE, reply_key
from spex.shared.runtime.redis_server import free_port
from tests.services.cluster import Cluster
from tests.services.helpers import answers_by_query, http_headed, wait_for, wait_http

QUESTIONS = 5
STALL_S = 8.0  # the coordinator stalled this long: past the ingress's old 6 s recovery window
REPOST_AFTER_S = 6.5  # the keys posted again this long after the loss, and again until accepted


@dataclass
class Outcome:
    originals: dict[str, str]  # client key -> the query id its first post got
    reposted: dict[str, str] = field(default_factory=dict)  # client key -> the id its re-post got
    # The re-posts refused: status, Retry-After.
    refusals: list[tuple[int, str | None]] = field(default_factory=list)
    reads: list[int] = field(default_factory=list)  # statuses of the originals read while stalled
    answered: dict[str, int] = field(default_factory=dict)  # query id -> answers the answers stream holds
    unanswered: list[str] = field(default_factory=list)  # accepted ids with no answer in time
    logs: str = ""  # the services' logs, for a failure's message


def flush_with_a_stalled_coordinator(redis_url: str, restart_ingress: bool) -> Outcome:
    """Post QUESTIONS under client keys, let the coordinator take them up, empty Redis and
    stall the coordinator STALL_S (restarting the ingress too, if asked), read the originals
    and post the keys again meanwhile, then wait for every id accepted to be answered."""
    port = free_port()
    base = f"http://127.0.0.1:{port}/v1/questions"
    cluster = Cluster(redis_url, "processes", http_port=port, time_scale=0.05, block_ms=50)

    def post(key: str):
        body = {"question": f"{key}: what is 2 + 2?", "client_key": key, "target": 16}
        return http_headed("POST", base, body)

    async def go() -> Outcome:
        await cluster.start_all()
        await cluster.start("ingress", "ingress-0")
        await asyncio.to_thread(wait_http, base + "/x")
        r = cluster.client.r
        keys = [f"key-{i}" for i in range(QUESTIONS)]
        firsts = [await asyncio.to_thread(post, key) for key in keys]
        outcome = Outcome({key: body["query_id"] for key, (_, body, _) in zip(keys, firsts, strict=True)})
        assert await wait_for(lambda: _held(r, QUESTIONS), timeout_s=30)
        assert not await r.exists(
            *(reply_key(q, SINGLE) for q in outcome.originals.values())
        )  # all in flight
        await r.flushall()
        cluster.stall("coord-0")
        lost_at = time.monotonic()
        if restart_ingress:
            cluster.kill("ingress-0")  # the supervisor starts a new one, which never saw the data
        try:
            while time.monotonic() - lost_at < REPOST_AFTER_S:
                for qid in outcome.originals.values():
                    outcome.reads.append((await asyncio.to_thread(_read, f"{base}/{qid}"))[0])
                await asyncio.sleep(0.2)
            pending, stalled = list(keys), True
            while pending and time.monotonic() - lost_at < 60:
                if stalled and time.monotonic() - lost_at >= STALL_S:
                    cluster.resume("coord-0")
                    stalled = False
                key = pending[0]
                status, body, headers = await asyncio.to_thread(_try, post, key)
                if status == 202:
                    outcome.reposted[key] = body["query_id"]
                    pending.pop(0)
                else:
                    outcome.refusals.append((status, headers.get("Retry-After") if headers else None))
                    await asyncio.sleep(0.3)
        finally:
            cluster.resume("coord-0")
        accepted = set(outcome.originals.values()) | set(outcome.reposted.values())

        async def all_answered():
            return all([await r.exists(reply_key(q, SINGLE)) for q in accepted])

        await wait_for(all_answered, timeout_s=90)
        await asyncio.sleep(0.5)  # a second answer, if one were coming, lands
        outcome.answered = await answers_by_query(r)
        outcome.unanswered = sorted([q for q in accepted if not await r.exists(reply_key(q, SINGLE))])
        return outcome

    async def run() -> Outcome:
        try:
            outcome = await go()
            outcome.logs = cluster.logs()
            return outcome
        finally:
            await cluster.stop()

    return asyncio.run(run())


async def _held(r, questions: int) -> bool:
    return await r.zcard("coord:active") >= questions


def _read(url: str):
    try:
        return http_headed("GET", url, timeout_s=2)
    except OSError:  # the ingress restarting: no answer
        return 0, {}, None


def _try(post, key: str):
    try:
        return post(key)
    except OSError:  # the ingress restarting
        return 0, {}, None
