"""The worker registry on a real Redis: a report registers its worker and makes it live for its
TTL; a worker whose load key expired is dead but still registered (its stream may hold jobs);
a dead one is forgotten only once dead long enough, and never while it reports again; a report
that does not decode makes its worker not live, and is told."""

import asyncio

import redis.asyncio as aioredis

from spex.proto import WorkerLoadEvent
from spex.proto.names import GEN_WORKERS, SINGLE, worker_load
from spex.shared.runtime.workers import WorkerRegistry


def load(worker: str, jobs: int) -> WorkerLoadEvent:
    return WorkerLoadEvent(
        msg_id=f"load/{worker}/{jobs}", query_id="", worker=worker, primary=0, primary_ctx=0, spec=0,
        running=0, waiting=0, kv_held=0, kv_capacity=0, jobs=jobs, slots=4,
    )  # fmt: skip


async def scenario(redis_url: str) -> dict:
    r = aioredis.from_url(redis_url)
    try:
        registry = WorkerRegistry(r, SINGLE)
        await registry.report(load("gen-a", 1), ttl_ms=60_000)
        await registry.report(load("gen-b", 2), ttl_ms=60_000)
        await registry.report(load("gen-c", 3), ttl_ms=50)
        await asyncio.sleep(0.2)  # gen-c's key expires: dead
        out: dict = {"live": {w: e.jobs for w, e in (await registry.live()).items()}}
        out["dead"] = await registry.dead()
        out["dead_besides_c"] = await registry.dead(besides="gen-c")
        out["forgotten_early"] = await registry.forget("gen-c")  # dead 0.2 s: not yet
        out["forgotten_live"] = await registry.forget("gen-a", dead_s=0.0)  # live: never
        out["forgotten"] = await registry.forget("gen-c", dead_s=0.1)
        await r.set(worker_load("gen-b"), b"not a message")
        told: list[tuple[str, str]] = []
        out["live_after"] = sorted(await registry.live(lambda w, why: told.append((w, why))))
        out["told"] = [w for w, _ in told]
        out["registered"] = sorted(m.decode() for m in await r.zrange(GEN_WORKERS, 0, -1))
        return out
    finally:
        await r.aclose()


def test_the_registry_registers_reports_lists_and_forgets(redis_url):
    out = asyncio.run(scenario(redis_url))
    assert out["live"] == {"gen-a": 1, "gen-b": 2}
    assert out["dead"] == ["gen-c"] and out["dead_besides_c"] == []
    assert (out["forgotten_early"], out["forgotten_live"], out["forgotten"]) == (False, False, True)
    assert out["live_after"] == ["gen-a"] and out["told"] == ["gen-b"]
    assert out["registered"] == ["gen-a", "gen-b"]
