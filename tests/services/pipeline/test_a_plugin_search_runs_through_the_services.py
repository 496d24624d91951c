"""A search plug-in through the real services (processes, Redis, HTTP): loaded by every service
from SPEX_SEARCH_PLUGINS, listed by /v1/models, searched with speculation and checked lossless
by its baseline twin; a search no service knows is a 400 naming those it knows; a coordinator
started without the plug-in answers its question as failed, saying why."""

import asyncio
import time

import pytest

from spex.shared.runtime.redis_server import free_port
from tests.runtime.plugins import EXAMPLE_MODULE, EXAMPLES, registry_restored
from tests.services.cluster import Cluster
from tests.services.helpers import http, wait_http


@pytest.fixture
def plugin_path(monkeypatch):
    """The example on this process's Python path and on its children's."""
    with registry_restored():
        monkeypatch.syspath_prepend(str(EXAMPLES))
        monkeypatch.setenv("PYTHONPATH", str(EXAMPLES))
        yield


async def _answer(base, qid, timeout_s=60.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status, body = await asyncio.to_thread(http, "GET", f"{base}/{qid}")
        if status == 200 and body.get("baseline_twin", {}).get("status") != "searching":
            return body
        await asyncio.sleep(0.1)
    raise TimeoutError(qid)


def test_every_service_serves_the_plugin_and_a_twin_finds_it_lossless(redis_url, plugin_path):
    port = free_port()

    async def go():
        # Time ten times slower than the other pipeline tests': the search lasts a couple of
        # seconds, several of the allocator's rounds, so its budget reaches it whatever their phase
        # (at the usual scale it is answered in 0.2 s, and speculated only when in phase).
        cluster = Cluster(
            redis_url, "processes", http_port=port, search_plugins=EXAMPLE_MODULE, time_scale=0.02
        )
        await cluster.start("ingress", "ingress-0")
        await cluster.start_all()
        base = f"http://127.0.0.1:{port}/v1/questions"
        try:
            await asyncio.to_thread(wait_http, f"{base}/none")
            models = await asyncio.to_thread(http, "GET", f"http://127.0.0.1:{port}/v1/models")
            unknown = await asyncio.to_thread(http, "POST", base, {"question": "1+1?", "algorithm": "greedy"})
            bad = await asyncio.to_thread(
                http, "POST", base, {"question": "1+1?", "algorithm": "pruned_sc", "params": {"depth": 3}}
            )
            asked = {"question": "What is 12 * 13?", "algorithm": "pruned_sc", "target": 8, "seed": 3}
            _, submitted = await asyncio.to_thread(http, "POST", base, {**asked, "baseline_twin": True})
            return models, unknown, bad, await _answer(base, submitted["query_id"])
        finally:
            await cluster.stop()

    models, unknown, bad, answer = asyncio.run(go())
    listed = {m["id"]: m for m in models[1]["data"]}
    assert listed["spex:pruned_sc-8"]["spex"]["origin"] == f"SPEX_SEARCH_PLUGINS {EXAMPLE_MODULE}"
    assert listed["spex:pruned_sc-8"]["spex"]["parameters"] == {"threshold": 0.3, "max_steps": 12}
    assert listed["spex:beam-16"]["spex"]["origin"] == "built-in"
    assert unknown[0] == 400
    assert unknown[1]["error"].startswith("algorithm: unknown 'greedy'; known: beam, best_of_n, dvts, ets, ")
    assert "pruned_sc" in unknown[1]["error"]
    assert bad[0] == 400 and bad[1]["error"].startswith("params: pruned_sc: unknown parameter 'depth'")
    assert answer["status"] == "answered", answer
    assert answer["baseline_twin"]["lossless"] is True and answer["speculative_issued"] > 0


def test_a_coordinator_without_the_plugin_fails_the_question_saying_why(redis_url, plugin_path):
    from spex.services.launcher import service_env
    from spex.shared.runtime.settings import Settings

    port = free_port()

    async def go():
        cluster = Cluster(redis_url, "processes", http_port=port, search_plugins=EXAMPLE_MODULE)
        await cluster.start("ingress", "ingress-0")
        bare = Settings(**{**cluster.settings.__dict__, "search_plugins": "", "consumer": "coord-0"})
        cluster.supervisor.add("coordinator", "coord-0", service_env(bare, "coord-0"))
        for kind in ("generator", "scorer", "allocator"):
            await cluster.start(kind, f"{kind}-0")
        base = f"http://127.0.0.1:{port}/v1/questions"
        try:
            await asyncio.to_thread(wait_http, f"{base}/none")
            status, submitted = await asyncio.to_thread(
                http, "POST", base, {"question": "What is 2 + 2?", "algorithm": "pruned_sc", "target": 4}
            )
            assert status == 202, submitted  # the ingress has the plug-in
            return await _answer(base, submitted["query_id"])
        finally:
            await cluster.stop()

    answer = asyncio.run(go())
    assert answer["status"] == "failed", answer
    assert answer["error"].startswith("rejected: algorithm: unknown 'pruned_sc'; known: beam, ")
