"""ServingEngine over real HTTP against a small server speaking SGLang's native API (0.5.23) as
documented: /server_info with the launch flags, /generate, /abort_request matching ids by
prefix as sglang's scheduler does, /metrics in Prometheus text. The server can start late,
drop a connection, and hold a request until it is aborted; the engine must retry only what
cannot run twice, abort what it gives up on, and report each outcome as the generator reads it.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from spex.shared.runtime.redis_server import free_port
from spex.shared.serving import open_engine
from spex.shared.serving.backend import EngineMisconfigured, EngineUnavailable
from spex.shared.serving.engine import ServingEngine
from spex.shared.serving.sglang import required_flags
from tests.serving.driving import SPECULATIVE, driving, request

# /server_info of a server launched as SPEX documents it (ServerArgs fields, nested sections
# as some releases lay them out).
FLAGS: dict[str, Any] = {
    "model_path": "tiny",
    "enable_metrics": True,
    "disable_radix_cache": False,
    "enable_priority_scheduling": True,
    "schedule_low_priority_values_first": True,
    "enable_deterministic_inference": True,
    "is_embedding": False,
    "internal_states": [{"max_total_num_tokens": 1000}],
}
L = 'model_name="tiny",engine_type="unified",tp_rank="0",pp_rank="0"'
# As sglang's metrics collector writes them: gauges, and counters by label (summed).
METRICS = f"""# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{{{L}}} 3.0
sglang:num_queue_reqs{{{L}}} 2.0
sglang:token_usage{{{L}}} 0.25
sglang:max_total_num_tokens{{{L}}} 1000.0
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{{{L},is_streaming="False"}} 600.0
sglang:prompt_tokens_total{{{L},is_streaming="True"}} 400.0
sglang:prompt_tokens_created{{{L},is_streaming="False"}} 1.7e+09
sglang:cached_tokens_total{{{L},cache_source="device"}} 300.0
sglang:cached_tokens_total{{{L},cache_source="host"}} 100.0
"""
HOLD_CAP_S = 20.0  # a held request answers by itself after this, so no test can hang on it


class FakeSGLang:
    """The server. A request's text says how it is treated: `drop:` closes the connection once
    the request is read; `hold:` answers only when aborted; `late-hold:` too, but registers
    the request only after 0.3 s (sglang tokenizing it: an abort before then is dropped, as
    sglang drops an abort for an id it does not know); anything else answers at once."""

    def __init__(self, info: dict[str, Any]) -> None:
        self.info = info
        self.received: list[tuple[str, str]] = []  # (rid, text) of each /generate, in order
        self.bodies: list[dict[str, Any]] = []
        self.aborts: list[str] = []
        self.held: dict[str, asyncio.Event] = {}
        self.url = ""

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/server_info", self.server_info)
        app.router.add_post("/generate", self.generate)
        app.router.add_post("/abort_request", self.abort_request)
        app.router.add_get("/metrics", self.metrics)
        return app

    async def server_info(self, _: web.Request) -> web.Response:
        return web.json_response(self.info)

    async def generate(self, req: web.Request) -> web.StreamResponse:
        body = await req.json()
        rid, text = body["rid"], body["text"]
        self.received.append((rid, text))
        self.bodies.append(body)
        n = int(body["sampling_params"]["max_new_tokens"])
        if text.startswith("drop:"):
            assert req.transport is not None
            req.transport.close()  # the request was read: the server may be running it
            return web.Response()
        if text.startswith("server-abort:"):  # the server ends it on its own (an abort-all, say)
            return web.json_response(_reply(rid, "x", 1, {"type": "abort", "message": "Aborted"}))
        if text.startswith("late-hold:"):
            await asyncio.sleep(0.3)
        if text.startswith(("hold:", "late-hold:")):
            self.held[rid] = released = asyncio.Event()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(released.wait(), HOLD_CAP_S)
            return web.json_response(_reply(rid, "x" * 5, 5, {"type": "abort", "message": "Aborted"}))
        return web.json_response(_reply(rid, f"echo {text}", n, {"type": "length", "length": n}))

    async def abort_request(self, req: web.Request) -> web.Response:
        prefix = (await req.json())["rid"]
        self.aborts.append(prefix)
        for rid, released in self.held.items():
            if rid.startswith(prefix):  # as sglang's scheduler matches: by prefix
                released.set()
        return web.Response()

    async def metrics(self, _: web.Request) -> web.Response:
        return web.Response(text=METRICS, content_type="text/plain")

    def rids_of(self, text: str) -> list[str]:
        return [rid for rid, t in self.received if t == text]


def _reply(rid: str, text: str, n: int, finish: dict[str, Any]) -> dict[str, Any]:
    logprobs = [[-0.5 - i, 100 + i, None] for i in range(n)]
    return {
        "text": text,
        "meta_info": {
            "id": rid,
            "finish_reason": finish,
            "prompt_tokens": 20,
            "completion_tokens": n,
            "cached_tokens": 12,
            "output_token_logprobs": logprobs,
        },
    }


@contextlib.asynccontextmanager
async def fake_sglang(info: dict[str, Any] | None = None, late_s: float = 0.0) -> AsyncIterator[FakeSGLang]:
    """The server on 127.0.0.1 (an ephemeral port), listening only after `late_s` seconds."""
    server = FakeSGLang(dict(FLAGS) if info is None else info)
    port = free_port()
    server.url = f"http://127.0.0.1:{port}"
    runner = web.AppRunner(server.app(), shutdown_timeout=0.5)
    await runner.setup()

    async def listen() -> None:
        await asyncio.sleep(late_s)
        await web.TCPSite(runner, "127.0.0.1", port).start()

    listening = asyncio.create_task(listen())
    if not late_s:
        await listening
    try:
        yield server
    finally:
        for released in server.held.values():
            released.set()
        await listening
        await runner.cleanup()


def engine(server: FakeSGLang, timeout_s: float = 10.0, deterministic: bool = False) -> ServingEngine:
    e = open_engine("sglang", server.url, timeout_s, deterministic=deterministic)
    e.poll_s = 0.05
    return e


def test_a_server_that_starts_late_is_waited_for_and_a_request_sent_once() -> None:
    async def main() -> None:
        async with fake_sglang(late_s=0.5) as server:
            e = engine(server)
            async with driving(e, start=False) as driven:
                e.submit(request("job-1", "what is 1+1?", 4))  # sent while nothing listens
                await e.start(wait_s=5.0)
                [c] = await driven.wait("job-1", timeout_s=5.0)
            assert c.reason == "finished" and c.text == "echo what is 1+1?"
            assert (c.generated, c.prompt_tokens, c.cached_tokens, c.stop_reason) == (4, 20, 12, "length")
            assert c.logprob_mean == pytest.approx(-2.0) and c.logprob_min == pytest.approx(-3.5)
            assert len(server.rids_of("what is 1+1?")) == 1  # refused connections carry no work
            assert server.aborts == []

    asyncio.run(main())


def test_a_server_that_never_comes_up_is_unavailable() -> None:
    async def main() -> None:
        e = open_engine("sglang", f"http://127.0.0.1:{free_port()}", 10.0)
        start = time.monotonic()
        with pytest.raises(EngineUnavailable, match="not reachable"):
            await e.start(wait_s=0.5)
        assert time.monotonic() - start < 2.0
        await e.close()

    asyncio.run(main())


def test_a_dropped_connection_is_not_retried_but_aborted_and_fails_the_job() -> None:
    async def main() -> None:
        async with fake_sglang() as server:
            e = engine(server)
            async with driving(e) as driven:
                e.submit(request("job-1", "drop: now", 8))
                [c] = await driven.wait("job-1", timeout_s=5.0)
            [rid] = server.rids_of("drop: now")  # once: the server may have run it
            assert c.reason == "error" and c.text  # the reason, for the dead letter
            assert server.aborts == [rid]  # stopped there before giving up on it

    asyncio.run(main())


def test_a_request_past_its_timeout_is_aborted_and_fails_the_job() -> None:
    async def main() -> None:
        async with fake_sglang() as server:
            e = engine(server, timeout_s=0.5)
            async with driving(e) as driven:
                start = time.monotonic()
                e.submit(request("job-1", "hold: forever", 8))
                [c] = await driven.wait("job-1", timeout_s=5.0)
                elapsed = time.monotonic() - start
            [rid] = server.rids_of("hold: forever")
            assert c.reason == "error" and c.text == (
                f"sglang at {server.url}: no reply within 0.5 s for 64 tokens after a prompt of 8 "
                "(SPEX_ENGINE_TIMEOUT_S caps it at 0.5 s)"
            )  # the server, the limit and what set it: no bare `TimeoutError`
            assert 0.4 < elapsed < 3.0
            assert server.aborts == [rid]

    asyncio.run(main())


def test_a_request_may_take_time_in_proportion_to_its_tokens_up_to_the_cap() -> None:
    e = open_engine("sglang", "http://127.0.0.1:1", 600.0)
    one = (("q", 1),)
    assert e.request_timeout_s(request("a", "x", max_new_tokens=8, prompt=one)) == 68.02  # 60 s + 1 s a token
    assert e.request_timeout_s(request("b", "x", max_new_tokens=256, prompt=one)) == 316.02
    long = (("q", 1024), ("step", 1024))  # 20 ms a prompt token: long prompts queue behind each other
    assert e.request_timeout_s(request("d", "x", max_new_tokens=32, prompt=long)) == pytest.approx(132.96)
    assert e.request_timeout_s(request("c", "x", max_new_tokens=4096)) == 600.0  # never past the cap


def test_an_abort_nobody_asked_for_fails_the_job_instead_of_cancelling_it() -> None:
    async def main() -> None:
        async with fake_sglang() as server:
            e = engine(server)
            async with driving(e) as driven:
                e.submit(request("job-1", "server-abort: now", 8))
                [c] = await driven.wait("job-1", timeout_s=5.0)
            assert c.reason == "error" and "aborted" in c.text  # dead-lettered: its query hears

    asyncio.run(main())


def test_an_aborted_request_comes_back_with_what_it_generated_and_stops_only_itself() -> None:
    async def main() -> None:
        async with fake_sglang() as server:
            e = engine(server)
            async with driving(e) as driven:
                # "job-1" is a prefix of "job-10": their server ids must not be.
                e.submit(request("job-1", "hold: one", 8))
                e.submit(request("job-10", "hold: ten", 8))
                await driven.until(lambda: len(server.held) == 2, 5.0, "both requests held")
                assert e.abort("job-1") == []  # the reply comes back with what was generated
                [c] = await driven.wait("job-1", timeout_s=5.0)
                assert c.reason == "abort" and c.generated == 5 and c.stop_reason == ""
                assert "job-10" not in driven.done and e.load().spec == 0 and e.load().primary == 1
                assert e.abort("job-1") == []  # twice: nothing more
                e.abort("job-10")
                [c10] = await driven.wait("job-10", timeout_s=5.0)
            assert c10.reason == "abort"
            aborted = list(dict.fromkeys(server.aborts))  # an abort may be repeated: see below
            assert aborted == [*server.rids_of("hold: one"), *server.rids_of("hold: ten")]

    asyncio.run(main())


def test_an_abort_the_server_dropped_is_sent_again_until_the_request_ends() -> None:
    async def main() -> None:
        async with fake_sglang() as server:
            e = engine(server)
            async with driving(e) as driven:
                e.submit(request("job-1", "late-hold: tokenizing", 8))
                await driven.until(lambda: server.received, 5.0, "the request sent")
                e.abort("job-1")  # reaches the server before it knows the id
                [c] = await driven.wait("job-1", timeout_s=5.0)
            [rid] = server.rids_of("late-hold: tokenizing")
            assert c.reason == "abort" and c.generated == 5  # stopped, not run to its end
            assert len(server.aborts) >= 2 and set(server.aborts) == {rid}

    asyncio.run(main())


def test_a_request_aborted_before_it_reached_the_server_ends_at_once() -> None:
    async def main() -> None:
        async with fake_sglang(late_s=0.4) as server:
            e = engine(server)
            async with driving(e, start=False) as driven:
                e.submit(request("job-1", "never sent", 8))
                await asyncio.sleep(0.1)  # refused, waiting to retry
                [c] = e.abort("job-1")
                assert c.reason == "abort" and c.generated == 0
                await asyncio.sleep(0.05)
                assert "job-1" not in driven.done  # reported once, by abort()
            assert server.received == [] and server.aborts == []

    asyncio.run(main())


def test_server_ids_are_32_hex_digits_unique_per_job_and_per_engine() -> None:
    jobs = ["job-1", "job-10", "job-1/a", "job-2", "q/1/n", "q/1/n1"] + [f"bulk-{i}" for i in range(14)]

    async def main() -> dict[str, str]:
        async with fake_sglang() as server:
            rids: dict[str, str] = {}
            for attempt in ("first", "restarted"):  # a restarted worker: the same job ids
                e = engine(server)
                async with driving(e) as driven:
                    for job in jobs:
                        e.submit(request(job, f"{attempt} {job}", 2))
                    await driven.wait(*jobs, timeout_s=10.0)
                for job in jobs:
                    [rids[f"{attempt} {job}"]] = server.rids_of(f"{attempt} {job}")
            return rids

    rids = asyncio.run(main())
    assert all(re.fullmatch(r"[0-9a-f]{32}", rid) for rid in rids.values())
    assert len(set(rids.values())) == len(rids) == 2 * len(jobs)
    values = sorted(rids.values())
    assert not any(b.startswith(a) for a, b in zip(values, values[1:]))  # no id prefixes another


@pytest.mark.parametrize(
    ("missing", "flag"),
    [
        ({"schedule_low_priority_values_first": False}, "--schedule-low-priority-values-first"),
        ({"enable_priority_scheduling": False}, "--enable-priority-scheduling"),
        ({"enable_metrics": False}, "--enable-metrics"),
        ({"disable_radix_cache": True}, "no --disable-radix-cache"),
        ({"enable_deterministic_inference": False}, "--enable-deterministic-inference"),
    ],
)
def test_start_refuses_a_server_without_a_flag_and_names_it(missing: dict[str, bool], flag: str) -> None:
    async def main() -> None:
        async with fake_sglang(info=FLAGS | missing) as server:
            e = engine(server, deterministic=True)
            with pytest.raises(EngineMisconfigured) as err:
                await e.start(wait_s=5.0)
            await e.close()
        assert str(err.value).endswith(f"start the server with {flag}")  # that one, and only it
        assert flag in {f for _, f in required_flags(reward=False, deterministic=True).values()}

    asyncio.run(main())


def test_load_counts_this_workers_jobs_and_reads_the_servers_metrics() -> None:
    async def main() -> None:
        async with fake_sglang() as server:
            e = engine(server)
            async with driving(e) as driven:
                e.submit(request("primary", "hold: p", 8, prompt=(("q", 12), ("n1", 8))))
                for i in range(2):
                    e.submit(request(f"spec-{i}", f"hold: s{i}", 8, priority=SPECULATIVE))
                await driven.until(lambda: e.load().running == 3, 5.0, "metrics polled")
                load = e.load()
                for rid in ("primary", "spec-0", "spec-1"):
                    e.abort(rid)
                await driven.wait("primary", "spec-0", "spec-1", timeout_s=5.0)
            assert (load.primary, load.primary_ctx, load.spec) == (1, 20, 2)
            assert (load.running, load.waiting) == (3, 2)
            assert (load.kv_held, load.kv_capacity) == (250, 1000)
            assert (load.prompt_tokens, load.cached_tokens) == (1000, 400)
            assert load.prefix_cache_hit_rate == pytest.approx(0.4)
            assert e.load().primary == e.load().spec == 0

    asyncio.run(main())
