"""The coordinator's five rounds share the queries it holds; whatever order they run in, and
however they overlap, every question is answered once, with the tree an undisturbed run grows.

Two coordinators on a real Redis, a simulated generator, a scorer and an allocator running as
usual; hypothesis draws a schedule of steps, each a set of (coordinator, round) passes run
concurrently (they interleave at every Redis call) or a wait that lets leases lapse, so that
one coordinator takes over the other's queries while the other still acts on them. The
schedule repeats, each time followed by one pass of every round, until every question is
answered; then each question has one answer on the answers stream, without an error, and the
tree digest it has when the coordinators run as services do."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from spex.proto import AnswerResult, decode
from spex.proto.names import ANSWERS, COORDINATOR_GROUP, INGRESS
from spex.services.coordinator import Coordinator
from spex.shared.runtime.connect import redis_client
from spex.shared.runtime.redis_server import RedisServer
from tests.services.cluster import Cluster

ROUNDS = ("intake_round", "inbox_round", "lease_round", "takeover_round", "route_round")
COORDINATORS = 2
LEASE_S = 0.6
WAIT_S = 0.25  # a wait step: three in a row without a lease round lapse a coordinator's leases
QUESTIONS = {"il-0": "What is 2 + 3?", "il-1": "What is 7 * 6?", "il-2": "What is 9 - 4?"}
SEARCH = {"algorithm": "rebase", "target": 4, "seed": 11}
SETTINGS = {"lease_s": LEASE_S, "heartbeat_s": 0.1, "max_target": "4", "block_ms": 20}
DEADLINE_S = 60.0

Step = frozenset[tuple[int, str]]  # passes run together; empty: a wait
steps = st.frozensets(st.tuples(st.integers(0, COORDINATORS - 1), st.sampled_from(ROUNDS)), max_size=4)


@pytest.fixture(scope="module")
def server():
    with RedisServer() as s:
        yield s


async def answers(url: str, schedule: list[Step] | None) -> tuple[dict[str, AnswerResult], Counter[str]]:
    """Each question's answer, and how many answers each has on the answers stream: with
    `schedule`, the coordinators' rounds driven by it; with None, run as services run them."""
    cluster = Cluster(url, "inprocess", supervise=False, **SETTINGS)
    await cluster.client.r.flushall()
    coords: list[Coordinator] = []
    try:
        for kind, name in (("generator", "gen-0"), ("scorer", "scorer-0"), ("allocator", "allocator-0")):
            await cluster.start(kind, name)
        if schedule is None:
            for i in range(COORDINATORS):
                await cluster.start("coordinator", f"coord-{i}")
        else:
            for i in range(COORDINATORS):
                settings = cluster._settings(f"coord-{i}")
                coords.append(Coordinator(redis_client(settings), settings))
                await coords[-1].bus.ensure_group(INGRESS, COORDINATOR_GROUP)
        for qid, question in QUESTIONS.items():
            await cluster.client.submit(question, query_id=qid, **SEARCH)
        deadline = asyncio.get_running_loop().time() + DEADLINE_S
        while not await _all_answered(cluster):
            assert asyncio.get_running_loop().time() < deadline, f"unanswered after {DEADLINE_S} s"
            if schedule is None:
                await asyncio.sleep(0.05)
                continue
            for step in schedule:
                await _run(coords, step)
            await _progress(coords)
        results = {qid: await cluster.client.result(qid) for qid in QUESTIONS}
        on_stream = Counter(
            decode(ANSWERS, fields[b"e"]).query_id for _, fields in await cluster.client.r.xrange(ANSWERS)
        )
    finally:
        await cluster.stop()
        for c in coords:
            await c.store.r.aclose()
    return {q: a for q, a in results.items() if a is not None}, on_stream


async def _run(coords: list[Coordinator], step: Step) -> None:
    if not step:
        await asyncio.sleep(WAIT_S)
        return
    await asyncio.gather(*(getattr(coords[i], name)() for i, name in sorted(step)))


async def _progress(coords: list[Coordinator]) -> None:
    """Every round of every coordinator once, after two lease rounds in a row (the second
    within the renewal window, so no coordinator sheds new questions for a long schedule)."""
    for _ in range(2):
        await asyncio.gather(*(c.lease_round() for c in coords))
    await asyncio.gather(*(getattr(c, name)() for c in coords for name in ROUNDS))


async def _all_answered(cluster: Cluster) -> bool:
    return all([await cluster.client.result(qid) is not None for qid in QUESTIONS])


REFERENCE: dict[str, dict[str, str]] = {}  # server url -> question id -> tree digest, undisturbed


@settings(
    max_examples=8,
    deadline=None,
    derandomize=True,
    database=None,
    phases=(Phase.explicit, Phase.generate),  # no shrinking: each case runs live services
    suppress_health_check=list(HealthCheck),
)
@given(schedule=st.lists(steps, min_size=1, max_size=8))
def test_every_question_is_answered_once_whatever_the_rounds_interleaving(server, schedule):
    if server.url not in REFERENCE:
        plain, _ = asyncio.run(answers(server.url, None))
        REFERENCE[server.url] = {q: a.tree_digest for q, a in plain.items()}
    got, on_stream = asyncio.run(answers(server.url, schedule))
    assert set(got) == set(QUESTIONS)
    assert on_stream == Counter(dict.fromkeys(QUESTIONS, 1)), f"answers per question: {dict(on_stream)}"
    assert all(not a.error and not a.cancelled for a in got.values()), {q: a.error for q, a in got.items()}
    assert {q: a.tree_digest for q, a in got.items()} == REFERENCE[server.url]
