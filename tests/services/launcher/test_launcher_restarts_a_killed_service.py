"""`spex up`'s own supervisor brings a SIGKILLed service back, and every question is answered
once with the fault-free tree."""

import asyncio
import os
import signal
from pathlib import Path

from spex.proto.names import SCORE_JOBS
from spex.shared.runtime.redis_server import free_port
from tests.services.cluster import Cluster
from tests.services.helpers import answers_by_query, wait_for
from tests.services.workload import submit_all, virtual_time


def test_spex_up_restarts_a_killed_scorer_and_every_question_is_answered():
    """`spex up`'s own supervisor (not the test's) brings the only scorer back."""
    import io

    from rich.console import Console

    from spex.proto.names import Partitions
    from spex.services.launcher import up
    from spex.shared.runtime.connect import redis_client
    from spex.shared.runtime.settings import Settings

    out = io.StringIO()

    async def go(live):
        cluster = Cluster(live.redis_url, "processes", supervise=False)
        cluster.client = cluster.client.__class__(redis_client(live), partitions=Partitions(live.partitions))
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
