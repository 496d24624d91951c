"""The supervisor's note on a service that stopped says why: the error its log gives, not the
`service_stopped` line its entry point writes last whatever the cause (every crash used to be
reported with that line). A real generator process whose loop keeps failing, a real Redis."""

import asyncio

from spex.proto.names import GEN_CONTROL
from spex.shared.runtime.supervisor import stop_reason
from tests.services.cluster import Cluster
from tests.services.helpers import wait_for


def test_a_crashed_services_note_names_its_error(redis_url):
    async def go():
        cluster = Cluster(redis_url, "processes")
        await cluster.client.r.set(GEN_CONTROL, "not a stream")  # its cancel reader fails on it
        await cluster.start("generator", "gen-0")
        child = cluster.supervisor.children["gen-0"]
        try:
            assert await wait_for(lambda: _noted(child), timeout_s=40)
            return child.history[0]
        finally:
            await cluster.stop()

    note = asyncio.run(go())
    assert "gen-0 exited (status 1)" in note
    assert "its log says why: LoopFailed: " in note and "WRONGTYPE" in note, note
    assert "service_stopped" not in note


def test_an_earlier_runs_error_is_not_this_stops_reason():
    log = "\n".join([
        '{"event": "service_started"}',
        '{"event": "service_failed", "error_type": "LoopFailed", "error": "old"}',
        '{"event": "service_stopped", "status": 1}',
        '{"event": "service_started"}',
        '{"event": "job_reclaimed"}',
    ])  # fmt: skip
    assert stop_reason(log) == '{"event": "job_reclaimed"}'  # killed, say: its last words


async def _noted(child):
    return bool(child.history)
