"""With Redis back after a restart, every request the ingress gets is served: its pooled
connections, all broken by the restart, are retried on fresh ones (no 503). A real ingress
process, a real Redis killed and started again, real HTTP."""

import asyncio
from concurrent.futures import ThreadPoolExecutor

from spex.shared.runtime.redis_server import RedisServer, free_port
from tests.services.cluster import Cluster
from tests.services.helpers import http, wait_http


def test_concurrent_posts_after_a_redis_restart_are_all_accepted(tmp_path):
    server = RedisServer(data_dir=tmp_path / "redis", fsync="always").start()
    port = free_port()
    base = f"http://127.0.0.1:{port}/v1/questions"

    def burst(tag):
        with ThreadPoolExecutor(20) as pool:
            bodies = [{"question": f"{tag} {i}+{i}?", "client_key": f"{tag}-{i}"} for i in range(20)]
            return [status for status, _ in pool.map(lambda b: http("POST", base, b), bodies)]

    async def go():
        cluster = Cluster(server.url, "processes", http_port=port)
        await cluster.start("ingress", "ingress-0")
        await asyncio.to_thread(wait_http, base + "/x")
        try:
            before = await asyncio.to_thread(burst, "before")  # fills the ingress's connection pool
            server.kill()
            await asyncio.sleep(0.5)
            server.start()
            after = await asyncio.to_thread(burst, "after")
            return before, after
        finally:
            await cluster.stop()
            server.stop()

    before, after = asyncio.run(go())
    assert before == [202] * 20
    assert after == [202] * 20, after
