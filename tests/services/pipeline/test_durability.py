"""`spex up` on a data directory: stopped with questions in flight, started again on the same
directory, it answers every one of them (the embedded Redis keeps an append-only file)."""

import asyncio

from spex.proto.names import SINGLE
from spex.services.launcher import up
from spex.shared.runtime.client import IngressClient
from spex.shared.runtime.connect import redis_client
from spex.shared.runtime.redis_server import free_port
from spex.shared.runtime.settings import Settings
from spex.shared.sim.workload import SyntheticWorkload, WorkloadKnobs
from tests.services.helpers import answers_by_query
from tests.services.workload import virtual_time

QUESTIONS = 4


def test_restarting_spex_up_on_the_same_data_dir_resumes_every_pending_question(tmp_path):
    settings = Settings(time_scale=0.1, http_port=free_port(), heartbeat_s=0.5, lease_s=2.0)
    workload = SyntheticWorkload(WorkloadKnobs(), 0)

    async def submit(live):
        client = IngressClient(redis_client(live), partitions=SINGLE)
        for i in range(QUESTIONS):
            q = workload.query(i)
            await client.submit(
                q.text, query_id=q.query_id, algorithm="rebase", target=8, seed=0, mode="spex",
                prompt_tokens=q.prompt_tokens,
            )  # fmt: skip
        await asyncio.sleep(0.5)  # under way, not done
        done = sum([await client.result(f"q{i:05d}") is not None for i in range(QUESTIONS)])
        await client.aclose()
        return done

    async def collect(live):
        client = IngressClient(redis_client(live), partitions=SINGLE)
        answers = {f"q{i:05d}": await client.result(f"q{i:05d}", timeout_s=60) for i in range(QUESTIONS)}
        counts = await answers_by_query(client.r)
        await client.aclose()
        return answers, counts

    with up(settings, data_dir=tmp_path) as live:
        done_before = asyncio.run(submit(live))
    with up(settings, data_dir=tmp_path) as live:
        answers, counts = asyncio.run(collect(live))

    assert done_before < QUESTIONS  # the first `spex up` stopped with questions in flight
    assert all(a is not None for a in answers.values())
    assert {q: (a.answer, a.tree_digest) for q, a in answers.items()} == virtual_time(
        "rebase", 8, QUESTIONS, "spex"
    )
    assert set(counts.values()) == {1}
    assert (tmp_path / "redis.password").stat().st_mode & 0o077 == 0  # the secret is private
