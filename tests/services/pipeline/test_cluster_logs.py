"""A service process logs to a file of its own, kept for a failed test's report."""

import asyncio
import time

from spex.shared.runtime.redis_server import free_port
from tests.services.cluster import Cluster


def test_a_service_process_logs_to_a_file_kept_for_the_failure_report(redis_url):
    async def go():
        cluster = Cluster(redis_url, "processes", http_port=free_port())
        await cluster.start("scorer", "scorer-0")
        deadline = time.monotonic() + 20
        while "service_started" not in cluster.logs() and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        await cluster.stop()
        return cluster.logs()

    logs = asyncio.run(go())
    assert "----- scorer-0 -----" in logs
    assert "service_started" in logs and "service_stopped" in logs  # read after the directory is gone
