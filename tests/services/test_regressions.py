"""One regression test per shortfall found by hand on `spex up` (issue #9, items 1-15), each on
real service processes and a real Redis; each failed before its fix."""

import asyncio
import os
import signal
from pathlib import Path

import pytest
from redis.exceptions import ResponseError

from spex.proto import GenerateRequest, ScoreRequest, SubmitQuestionRequest, decode, encode
from spex.proto.names import (
    ANSWERS,
    DEFAULT_POOL,
    GEN_CONTROL,
    GENERATOR_GROUP,
    INGRESS_IN_FLIGHT,
    QUERY_STATS,
    SCORE_JOBS,
    SCORER_GROUP,
    gen_jobs,
    query_inbox,
    query_request,
    worker_jobs,
    worker_load,
)
from spex.shared.runtime.bus import Bus
from spex.shared.runtime.redis_server import free_port
from tests.services.cluster import Cluster
from tests.services.helpers import answers_by_query, http, jobs_pending, reasons, wait_for, wait_http
from tests.services.test_pipeline import submit_all, virtual_time


def alive(cluster, name):
    return cluster.procs[name].poll() is None


def restarts(cluster, name):
    return cluster.supervisor.children[name].restarts


async def known_query(r, qid="q"):
    await r.set(query_request(qid), encode(SubmitQuestionRequest(msg_id="s", query_id=qid, question="?")))


def score_job(path, **fields):
    return ScoreRequest(
        **{"msg_id": "m", "query_id": "q", "job_id": "j", "node_id": "n", **fields},
        prompt_node_ids=path,
        prompt_tokens=[5] * len(path),
    )


# 1 ------------------------------------------------------------------------------------------
def test_1_a_score_job_with_an_empty_path_is_dead_lettered_and_the_scorer_lives(redis_url):
    async def go():
        cluster = Cluster(redis_url, "processes")
        await cluster.start_all()
        r = cluster.client.r
        try:
            await known_query(r)
            await r.xadd(SCORE_JOBS, {"e": encode(score_job([]))})
            assert await wait_for(lambda: r.exists(f"dlq:{SCORE_JOBS}"))
            qid = await cluster.client.submit("still scoring?", algorithm="rstar", target=3)
            answer = await cluster.client.result(qid, timeout_s=30)
            return answer, await reasons(r, SCORE_JOBS), restarts(cluster, "scorer-0")
        finally:
            await cluster.stop()

    answer, why, restarted = asyncio.run(go())
    assert answer is not None and answer.nodes > 0
    assert len(why) == 1 and "prompt_node_ids" in why[0]
    assert restarted == 0  # it never crashed


def test_1_an_entry_that_kills_its_consumer_is_dead_lettered_after_max_deliveries(redis_url):
    """Re-reading one's own pending entries (after each crash-restart) counts deliveries."""

    async def go():
        import redis.asyncio as aioredis

        r = aioredis.Redis.from_url(redis_url)
        first = Bus(r, "scorer-0", max_deliveries=3)
        await first.ensure_group(SCORE_JOBS, SCORER_GROUP)
        await known_query(r)
        await r.xadd(SCORE_JOBS, {"e": encode(score_job(["q", "n"]))})
        seen = []
        for _ in range(5):  # a consumer that dies on the entry, restarted under the same name
            bus = Bus(r, "scorer-0", max_deliveries=3)
            seen.append([d.deliveries for d in await bus.read([SCORE_JOBS], SCORER_GROUP, 8, block_ms=10)])
        pending = (await r.xpending(SCORE_JOBS, SCORER_GROUP))["pending"]
        why = await reasons(r, SCORE_JOBS)
        await r.aclose()
        return seen, pending, why

    seen, pending, why = asyncio.run(go())
    assert seen == [[1], [2], [3], [], []]
    assert pending == 0 and why == ["delivered 4 times"]


# 2 ------------------------------------------------------------------------------------------
def test_2_a_stats_entry_without_a_body_does_not_stop_the_allocator(redis_url):
    async def go():
        cluster = Cluster(redis_url, "processes")
        await cluster.start_all()
        r = cluster.client.r
        try:
            await r.xadd(QUERY_STATS, {"x": b"no e field"})
            await r.xadd(QUERY_STATS, {"e": b"\xc1"})
            await asyncio.sleep(0.5)
            answers = await submit_all(cluster, "rebase", 8, 2, "spex")
            return answers, restarts(cluster, "allocator-0"), alive(cluster, "allocator-0")
        finally:
            await cluster.stop()

    answers, restarted, up = asyncio.run(go())
    assert {q: (a.answer, a.tree_digest) for q, a in answers.items()} == virtual_time("rebase", 8, 2, "spex")
    assert restarted == 0 and up


# 3 ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("persistent", [True, False], ids=["aof", "no-persistence"])
def test_3_a_redis_restart_loses_no_question(tmp_path, persistent):
    """With AOF the data survive and every question is answered; without persistence the
    groups are re-created and the coordinator searches what it held again from its request."""
    from spex.shared.runtime.redis_server import RedisServer

    server = RedisServer(data_dir=tmp_path / "redis" if persistent else None, fsync="always").start()
    questions = 4

    async def go():
        cluster = Cluster(server.url, "processes", time_scale=0.01)
        await cluster.start_all()
        r = cluster.client.r
        try:
            task = asyncio.create_task(submit_all(cluster, "rebase", 8, questions, "spex"))
            assert await wait_for(lambda: _all_adopted(r, questions))
            server.kill()
            await asyncio.sleep(0.5)
            server.start()
            answers = await asyncio.wait_for(task, 90)
            fresh = await cluster.client.submit("after the restart", algorithm="rstar", target=3)
            after = await cluster.client.result(fresh, timeout_s=30)
            down = [n for n in cluster.procs if not alive(cluster, n)]
            return answers, after, await answers_by_query(r), down
        finally:
            await cluster.stop()
            server.stop()

    answers, after, counts, down = asyncio.run(go())
    assert {q: (a.answer, a.tree_digest) for q, a in answers.items()} == virtual_time(
        "rebase", 8, questions, "spex"
    )
    assert after is not None and not down
    if persistent:
        assert all(n == 1 for n in counts.values())


async def _all_adopted(r, questions):
    return await r.zcard("coord:active") >= questions


# 4 ------------------------------------------------------------------------------------------
def test_4_spex_up_restarts_a_killed_scorer_and_every_question_is_answered():
    """`spex up`'s own supervisor (not the test's) brings the only scorer back."""
    import io

    from rich.console import Console

    from spex.services.launcher import up
    from spex.shared.runtime.connect import redis_client
    from spex.shared.runtime.settings import Settings

    out = io.StringIO()

    async def go(live):
        cluster = Cluster(live.redis_url, "processes", supervise=False)
        cluster.client = cluster.client.__class__(redis_client(live))
        r = cluster.client.r
        try:
            task = asyncio.create_task(submit_all(cluster, "rebase", 8, 3, "spex"))
            assert await wait_for(lambda: r.xlen(SCORE_JOBS))
            os.kill(_pid_of("spex.services.scorer", live.redis_url), signal.SIGKILL)
            answers = await asyncio.wait_for(task, 60)
            return answers, await answers_by_query(r)
        finally:
            await cluster.stop()

    settings = Settings(time_scale=0.01, http_port=free_port())
    with up(settings, console=Console(file=out, width=200)) as live:
        answers, counts = asyncio.run(go(live))
    assert "scorer-0 exited (status -9)" in out.getvalue() and "scorer-0 restarted" in out.getvalue()
    assert {q: (a.answer, a.tree_digest) for q, a in answers.items()} == virtual_time("rebase", 8, 3, "spex")
    assert set(counts.values()) == {1}


def _pid_of(module, redis_url):
    """The pid of this session's process running `module` against `redis_url`."""
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            cmdline = (environ.parent / "cmdline").read_bytes()
            env = environ.read_bytes()
        except OSError:
            continue
        if module.encode() in cmdline and f"SPEX_REDIS_URL={redis_url}".encode() in env:
            return int(environ.parent.name)
    raise LookupError(module)


# 5 ------------------------------------------------------------------------------------------
def test_5_a_generator_stalled_past_its_heartbeats_rejoins_when_resumed(redis_url):
    async def go():
        # Both generators on the shared stream (no affinity): the stalled one holds jobs of
        # every query, which its peer must take over. (With affinity its queries move to the
        # peer as soon as its liveness lapses, and what it held may be cancelled instead.)
        cluster = Cluster(
            redis_url, "processes", time_scale=0.02, heartbeat_s=0.2, lease_s=1.0, affinity=False
        )
        await cluster.start_all(generators=2)
        r = cluster.client.r
        try:
            task = asyncio.create_task(submit_all(cluster, "rebase", 8, 3, "spex"))
            assert await wait_for(lambda: _pending_of(r, "gen-0"))
            cluster.stall("gen-0")
            await asyncio.sleep(2.0)  # ten heartbeats: gen-1 reclaims its jobs
            cluster.resume("gen-0")
            answers = await asyncio.wait_for(task, 60)
            # The resumed worker is a full member again: it takes jobs of new questions.
            before = await _jobs_done(r, "gen-0")
            more = await submit_all(cluster, "rebase", 8, 3, "spex", first=3)
            worked = await _jobs_done(r, "gen-0") - before
            log = cluster._read_log("gen-0")
            return answers, more, log, worked, alive(cluster, "gen-0"), restarts(cluster, "gen-0")
        finally:
            await cluster.stop()

    answers, more, log, worked, up, restarted = asyncio.run(go())
    assert {q: (a.answer, a.tree_digest) for q, a in answers.items()} == virtual_time("rebase", 8, 3, "spex")
    expected = virtual_time("rebase", 8, 6, "spex")
    assert {q: (a.answer, a.tree_digest) for q, a in more.items()} == {q: expected[q] for q in more}
    assert up and restarted == 0
    assert "job_taken_over" in log  # it learnt which jobs a peer had taken
    assert worked > 0 and "service_stopped" not in log  # working again, not idle


async def _jobs_done(r, consumer):
    raw = await r.get(worker_load(consumer))
    return decode(worker_load(consumer), raw).jobs_done if raw else 0


async def _pending_of(r, consumer):
    """Whether `consumer` holds jobs, from the shared stream or its own (affinity routing)."""
    for stream in (gen_jobs(DEFAULT_POOL), worker_jobs(DEFAULT_POOL, consumer)):
        try:
            info = await r.xpending(stream, GENERATOR_GROUP)
        except ResponseError:  # no group yet
            continue
        if any(c["name"].decode() == consumer and c["pending"] > 0 for c in info["consumers"] or []):
            return True
    return False


# 6 ------------------------------------------------------------------------------------------
def test_6_a_full_restart_with_questions_in_flight_answers_each_once_with_the_same_tree(redis_url):
    questions = 12

    async def go():
        cluster = Cluster(redis_url, "processes", time_scale=0.01, heartbeat_s=0.3, lease_s=1.0)
        await cluster.start_all(generators=2, coordinators=2)
        r = cluster.client.r
        try:
            task = asyncio.create_task(submit_all(cluster, "rebase", 8, questions, "spex"))
            assert await wait_for(lambda: _all_adopted(r, questions // 2))
            for name in list(cluster.procs):
                cluster.supervisor.hold(name, True)
                cluster.kill(name)
            await asyncio.sleep(0.5)
            for name in list(cluster.procs):
                cluster.supervisor.hold(name, False)  # the supervisor brings them all back
            answers = await asyncio.wait_for(task, 90)
            logs = cluster.logs()
            return answers, await answers_by_query(r), logs
        finally:
            await cluster.stop()

    answers, counts, logs = asyncio.run(go())
    assert {q: (a.answer, a.tree_digest) for q, a in answers.items()} == virtual_time(
        "rebase", 8, questions, "spex"
    )
    assert len(counts) == questions and set(counts.values()) == {1}
    assert "changed size during iteration" not in logs


# 7 ------------------------------------------------------------------------------------------
def test_7_rejected_submissions_free_their_place_in_the_backlog(redis_url):
    port = free_port()

    async def go():
        # The coordinator is stricter than the client that submitted: it rejects the question.
        cluster = Cluster(redis_url, "processes", http_port=port, backlog_limit=2)
        cluster.settings = cluster.settings.__class__(**{**cluster.settings.__dict__, "max_target": "4"})
        await cluster.start_all()
        await cluster.start("ingress", "ingress-0")
        base = f"http://127.0.0.1:{port}/v1/questions"
        await asyncio.to_thread(wait_http, base + "/x")
        r = cluster.client.r
        try:
            boolean = await asyncio.to_thread(http, "POST", base, {"question": "x", "target": True})
            rejected = [
                await cluster.client.submit(f"too big {i}", algorithm="rstar", target=8) for i in range(2)
            ]
            failed = [await cluster.client.result(q, timeout_s=20) for q in rejected]
            ok = await asyncio.to_thread(
                http, "POST", base, {"question": "1+1?", "algorithm": "rstar", "target": 3}
            )
            got = await cluster.client.result(ok[1]["query_id"], timeout_s=30)
            shown = await asyncio.to_thread(http, "GET", f"{base}/{rejected[0]}")
            return boolean, failed, ok, got, shown, await r.zcard(INGRESS_IN_FLIGHT)
        finally:
            await cluster.stop()

    boolean, failed, ok, got, shown, in_flight = asyncio.run(go())
    assert boolean == (400, {"error": "target: expected int"})
    assert all(a is not None and a.answer is None and "target: at most 4" in a.error for a in failed)
    assert ok[0] == 202 and got is not None and not got.error  # not 429: the rejected ones left
    assert shown[0] == 200 and shown[1]["status"] == "failed"
    assert in_flight == 0


# 8 ------------------------------------------------------------------------------------------
def test_8_a_job_the_engine_refuses_fails_its_query_instead_of_hanging(redis_url):
    port = free_port()

    async def go():
        cluster = Cluster(redis_url, "processes", http_port=port)
        await cluster.start_all()
        await cluster.start("ingress", "ingress-0")
        base = f"http://127.0.0.1:{port}/v1/questions"
        await asyncio.to_thread(wait_http, base + "/x")
        r = cluster.client.r
        try:
            huge = await asyncio.to_thread(http, "POST", base, {"question": "x" * 1_000_000})
            # Within the limits, but more KV than the simulated GPU holds.
            qid = await cluster.client.submit(
                "long context", algorithm="rebase", target=4, prompt_tokens=9_000_000
            )
            answer = await cluster.client.result(qid, timeout_s=30)
            await asyncio.sleep(0.3)
            pending = await jobs_pending(r)
            return huge, answer, pending
        finally:
            await cluster.stop()

    huge, answer, pending = asyncio.run(go())
    assert huge[0] == 413 and "question" in huge[1]["error"]
    assert answer is not None and answer.answer is None and "engine" in answer.error
    assert pending == 0


# 9, 10 ----------------------------------------------------------------------------------------
def test_9_10_out_of_range_input_is_a_400_and_unknown_ids_a_404(redis_url):
    port = free_port()

    async def go():
        cluster = Cluster(redis_url, "processes", http_port=port)
        await cluster.start("ingress", "ingress-0")
        base = f"http://127.0.0.1:{port}/v1/questions"
        await asyncio.to_thread(wait_http, base + "/x")
        try:
            post = lambda body: asyncio.to_thread(http, "POST", base, body)  # noqa: E731
            return {
                "big target": await post({"question": "x", "algorithm": "rebase", "target": 20000}),
                "huge target": await post({"question": "x", "target": 10**30}),
                "huge seed": await post({"question": "x", "seed": 10**30}),
                "negative seed": await post({"question": "x", "seed": -1}),
                "surrogate": await asyncio.to_thread(http, "POST", base, raw=b'{"question": "\\ud800"}'),
                "nested": await asyncio.to_thread(http, "POST", base, raw=b"[" * 100_000 + b"]" * 100_000),
                "not utf-8": await asyncio.to_thread(http, "POST", base, raw=b'{"question": "\xff"}'),
                "unknown id": await asyncio.to_thread(http, "GET", f"{base}/0123456789abcdef"),
                "malformed id": await asyncio.to_thread(http, "GET", f"{base}/%00%ff..%2F"),
            }
        finally:
            await cluster.stop()

    got = asyncio.run(go())
    assert got["big target"] == (400, {"error": "target: at most 256 for rebase, not 20000"})
    for name in ("huge target", "huge seed", "negative seed", "surrogate", "nested", "not utf-8"):
        assert got[name][0] == 400, (name, got[name])
    assert got["unknown id"][0] == 404 and got["malformed id"][0] == 404


# 11, 12 ---------------------------------------------------------------------------------------
TOKENS = {"alice": "alice-secret-token-0001", "bob": "bob-secret-token-000002"}


def test_11_12_keys_and_results_are_scoped_per_token(redis_url, tmp_path):
    port = free_port()
    tokens = tmp_path / "tokens"
    tokens.write_text("".join(f"{n} {t}\n" for n, t in TOKENS.items()))

    async def go():
        cluster = Cluster(redis_url, "processes", http_port=port, auth_tokens_file=str(tokens))
        await cluster.start_all()
        await cluster.start("ingress", "ingress-0")
        base = f"http://127.0.0.1:{port}/v1/questions"
        await asyncio.to_thread(wait_http, base + "/x")
        call = lambda *a, **k: asyncio.to_thread(http, *a, **k)  # noqa: E731
        try:
            body = {"question": "1+2?", "algorithm": "rstar", "target": 3, "client_key": "k"}
            anonymous = await call("POST", base, body)
            wrong = await call("POST", base, body, token="not-a-token-at-all-000")
            alice = await call("POST", base, body, token=TOKENS["alice"])
            again = await call("POST", base, body, token=TOKENS["alice"])
            different = await call("POST", base, {**body, "question": "9+9?"}, token=TOKENS["alice"])
            bob = await call("POST", base, body, token=TOKENS["bob"])
            qid = alice[1]["query_id"]
            await cluster.client.result(qid, timeout_s=30)
            mine = await call("GET", f"{base}/{qid}", token=TOKENS["alice"])
            theirs = await call("GET", f"{base}/{qid}", token=TOKENS["bob"])
            cancel = await call("DELETE", f"{base}/{qid}", token=TOKENS["bob"])
            cmdlines = [Path(f"/proc/{p.pid}/cmdline").read_bytes() for p in cluster.procs.values()]
            return anonymous, wrong, alice, again, different, bob, mine, theirs, cancel, cmdlines
        finally:
            await cluster.stop()

    anonymous, wrong, alice, again, different, bob, mine, theirs, cancel, cmdlines = asyncio.run(go())
    assert anonymous[0] == 401 and wrong[0] == 401
    assert alice[0] == 202 and again == alice
    assert different[0] == 409 and "client_key" in different[1]["error"]
    assert bob[0] == 202 and bob[1]["query_id"] != alice[1]["query_id"]  # bob's own question
    assert mine[0] == 200 and mine[1]["status"] == "answered"
    assert theirs[0] == 404 and cancel[0] == 404
    assert not any(t.encode() in c for c in cmdlines for t in TOKENS.values())


def test_12_the_ingress_binds_loopback_unless_told_otherwise(redis_url):
    import socket

    port = free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 1))  # no packet is sent: this only picks a route
            outside = probe.getsockname()[0]
        except OSError:
            outside = "127.0.0.1"
    if outside.startswith("127."):
        pytest.skip("this machine has no non-loopback IPv4 address to test from")

    async def go():
        cluster = Cluster(redis_url, "processes", http_port=port)
        await cluster.start("ingress", "ingress-0")
        try:
            await asyncio.to_thread(wait_http, f"http://127.0.0.1:{port}/v1/questions/x")
            try:
                socket.create_connection((outside, port), timeout=1).close()
                return True
            except OSError:
                return False
        finally:
            await cluster.stop()

    assert asyncio.run(go()) is False


# 13 -----------------------------------------------------------------------------------------
def test_13_spex_up_gives_each_service_its_own_metrics_port():
    from spex.services.launcher import up
    from spex.shared.runtime.settings import Settings
    from tests.services.test_metrics_http import scrape

    base = free_port()
    settings = Settings(metrics_port=base, http_port=free_port(), time_scale=0.002)
    with up(settings) as live:
        assert live.redis_password_file and not live.redis_password
        scraped = [scrape(base + i) for i in range(5)]  # coordinator, generator, scorer, ...
    assert [status for status, _ in scraped] == [200] * 5
    assert all("spex_jobs_total" in body for _, body in scraped)


# 14 -----------------------------------------------------------------------------------------
def test_14_a_failing_loop_logs_redis_error_text(redis_url):
    async def go():
        cluster = Cluster(redis_url, "processes")
        r = cluster.client.r
        await r.set(GEN_CONTROL, "not a stream")  # the generator's cancel reader fails on it
        await cluster.start("generator", "gen-0")
        try:
            assert await wait_for(lambda: _logged(cluster, "gen-0", "loop_failed"))
            return cluster._read_log("gen-0")
        finally:
            await cluster.stop()

    log = asyncio.run(go())
    # Redis's own words, not a repr around them.
    assert '"error": "WRONGTYPE Operation against a key holding the wrong kind of value"' in log


async def _logged(cluster, name, text):
    return text in cluster._read_log(name)


# 15 -----------------------------------------------------------------------------------------
def test_15_jobs_of_unknown_queries_never_run_and_answered_queries_expire(redis_url):
    async def go():
        cluster = Cluster(redis_url, "processes")
        await cluster.start_all()
        r = cluster.client.r
        try:
            job = GenerateRequest(
                msg_id="m", query_id="ghost", job_id="j", node_id="n", parent_id="p", child_index=0,
                action="expand", prompt_node_ids=["ghost"], prompt_tokens=[10], seed=1,
            )  # fmt: skip
            await r.xadd(gen_jobs(DEFAULT_POOL), {"e": encode(job)})
            await r.xadd(SCORE_JOBS, {"e": encode(score_job(["ghost", "n"], query_id="ghost"))})
            qid = await cluster.client.submit("1+1?", algorithm="rstar", target=3)
            await cluster.client.result(qid, timeout_s=30)
            await asyncio.sleep(0.3)
            ghost = await r.exists(query_inbox("ghost"))
            pending = (await r.xpending(gen_jobs(DEFAULT_POOL), GENERATOR_GROUP))["pending"]
            ttls = [await r.ttl(k) for k in (query_inbox(qid), query_request(qid), f"{{q:{qid}}}:answer")]
            return ghost, pending, ttls, await r.xlen(ANSWERS)
        finally:
            await cluster.stop()

    ghost, pending, ttls, answered = asyncio.run(go())
    assert ghost == 0 and pending == 0
    assert all(0 < t <= 86_400 for t in ttls)  # SPEX_RESULT_TTL_S's default: a day
    assert answered == 1


def test_12_spex_up_never_shows_the_redis_password(tmp_path):
    """The embedded Redis requires a password; it is in no output, no command line, no URL."""
    import io

    import redis
    from rich.console import Console

    from spex.services.launcher import up
    from spex.shared.runtime.settings import Settings

    out = io.StringIO()
    with up(Settings(http_port=free_port()), console=Console(file=out, width=200), data_dir=tmp_path) as live:
        password = Path(live.redis_password_file).read_text().strip()
        with pytest.raises(redis.exceptions.AuthenticationError):
            redis.Redis.from_url(live.redis_url).ping()
        assert redis.Redis.from_url(live.redis_url, password=password).ping()
        cmdlines = [p.read_bytes() for p in Path("/proc").glob("[0-9]*/cmdline") if _readable(p)]
    assert len(password) >= 32
    assert password not in out.getvalue() and password not in live.redis_url
    assert not any(password.encode() in c for c in cmdlines)
    assert "password in" in out.getvalue()  # it says where the password is, not what


def _readable(path):
    try:
        path.read_bytes()
        return True
    except OSError:
        return False
