"""Wire fuzzing: extreme-but-valid messages and arbitrary bytes on every stream a service reads.

The real services run in-process on a real Redis while hypothesis XADDs fuzzed entries into
the streams they read (`{"e": payload}`, sometimes no `e`). After each batch: the service is
alive, no loop or handler of it logged a failure, every entry of a grouped stream was delivered
and is no longer pending (acknowledged after its handler, or dead-lettered: every entry that
does not decode is in `dlq:<stream>`, every dead letter has a reason), and once the fuzzing
is over a normal question is still answered. The pure tests at the end hold the codec to its
contract: `decode` raises nothing but ProtocolError, and what `encode` accepts round-trips.
"""

from __future__ import annotations

import asyncio
import time
import traceback
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import msgspec
import pytest
import redis
import redis.asyncio as aioredis
import structlog
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from spex.proto import (
    AnswerResult,
    BudgetUpdateEvent,
    CancelRequest,
    GenerateRequest,
    GenerateResult,
    JobFailedEvent,
    ProtocolError,
    QueryStatsEvent,
    ScoreRequest,
    ScoreResult,
    SubmissionError,
    SubmitQuestionRequest,
    WorkerLoadEvent,
    decode,
    encode,
    submission,
)
from spex.proto.names import (
    ALLOCATOR_LEASE,
    COORDINATOR_GROUP,
    DEFAULT_POOL,
    GEN_CONTROL,
    GENERATOR_GROUP,
    INGRESS,
    KEYS,
    QUERY_STATS,
    SCORE_JOBS,
    SCORER_GROUP,
    STREAMS,
    dead_letter,
    gen_jobs,
    message_types,
    query_inbox,
    query_request,
    reply_key,
    worker_load,
)
from spex.shared.runtime.redis_server import RedisServer
from tests.fuzz import strategies as fz
from tests.fuzz.harness import CASES, NOTES, Loop, count
from tests.services.cluster import Cluster

# Small and fast: a sim second is 2 ms, heartbeats every 0.1 s (so a job whose handler failed
# is reclaimed and retried, then dead-lettered, within a second), searches of at most 4.
CLUSTER_SETTINGS = {
    "time_scale": 0.002,
    "block_ms": 50,
    "heartbeat_s": 0.1,
    "lease_s": 1.0,
    "max_target": "4",
    "max_deliveries": 3,
}
FUZZ = settings(
    max_examples=30,
    deadline=None,
    derandomize=True,  # the same cases on every run (CI is deterministic)
    database=None,
    phases=(Phase.explicit, Phase.generate),  # no shrinking: each case runs against live services
    suppress_health_check=list(HealthCheck),
)
BATCH = 25  # fuzzed entries per case, at most
# Events a service logs when a loop, a job's completion or one message's handler raised, or
# when it died: with Redis up, fuzzed input must never cause one. (A handler that raises
# leaves its entry to be retried and parked as "delivered N times", the real reason lost; an
# inbox event that raises is skipped unrecorded.)
FAILURE_EVENTS = ("loop_failed", "completion_failed", "service_failed", "handler_failed", "event_failed")
DRAIN_S = 20.0
# Hypothesis warns that a falsifying example of a megabyte has a long repr: it is meant to.
pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")


# ---------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def loop():
    runner = Loop()
    yield runner
    runner.close()


@pytest.fixture(scope="module")
def server():
    """One Redis for the module (the suite's `redis_url` is parametrized over server kinds)."""
    with RedisServer() as s:
        yield s


@pytest.fixture
def fuzz(loop, server):
    client = redis.Redis.from_url(server.url)
    client.flushall()
    client.close()
    with structlog.testing.capture_logs() as logs:
        f = Fuzz(loop, server.url, logs)
        try:
            yield f
        finally:
            f.close()


class Fuzz:
    """A cluster of in-process services on the module's Redis, driven from the test thread."""

    def __init__(self, loop: Loop, url: str, logs: list[dict[str, Any]]) -> None:
        self.loop, self.logs = loop, logs
        self.cluster = Cluster(url, "inprocess", supervise=False, **CLUSTER_SETTINGS)
        self.r: aioredis.Redis = aioredis.Redis.from_url(url)

    def run(self, coro: Any, timeout_s: float = 60.0) -> Any:
        return self.loop.run(coro, timeout_s)

    def start(self, *services: tuple[str, str]) -> None:
        for kind, name in services:
            self.run(self.cluster.start(kind, name))

    def service(self, name: str) -> Any:
        return self.cluster.service(name)

    def close(self) -> None:
        async def stop() -> None:
            for name, (task, _, _) in list(self.cluster.tasks.items()):
                if task.done():  # it died (the test has failed on it): stop the others
                    del self.cluster.tasks[name]
            try:
                await self.cluster.stop()
            finally:
                await self.r.aclose()

        self.run(stop())

    # ------------------------------------------------------------------ checks
    def healthy(self, since: int = 0) -> None:
        """Every service task still runs and no loop logged a failure (since log entry `since`)."""

        async def tasks() -> list[str]:
            dead = []
            for name, (task, _, _) in self.cluster.tasks.items():
                if task.done():
                    exc = None if task.cancelled() else task.exception()
                    where = "".join(traceback.format_exception(exc)[-6:]) if exc else "cancelled"
                    dead.append(f"{name}: {exc!r}\n{where}")
            return dead

        dead = self.run(tasks())
        assert not dead, f"service tasks ended: {dead}"
        failures = [e for e in list(self.logs)[since:] if e.get("event") in FAILURE_EVENTS]
        assert not failures, f"a loop failed on fuzzed input: {failures[:3]}"

    def add(self, stream: str, batch: list[dict[str, bytes]]) -> list[tuple[str, dict[str, bytes]]]:
        """XADD the entries; their ids, each with its fields."""

        async def go() -> list[Any]:
            async with self.r.pipeline(transaction=False) as pipe:
                for fields in batch:
                    pipe.xadd(stream, fields)
                return await pipe.execute()

        return [(_s(i), f) for i, f in zip(self.run(go()), batch)]

    def drained(
        self,
        stream: str,
        group: str,
        added: list[tuple[str, dict[str, bytes]]],
        held: Callable[[], set[str]] = set,
        timeout_s: float = DRAIN_S,
    ) -> None:
        """Wait until the group was delivered every entry of `added` and none is pending but
        those `held()` (jobs the service is legitimately still running; called on the loop)."""
        ours = {i for i, _ in added}
        last = max((i for i, _ in added), key=_sid)

        async def go() -> tuple[bool, set[str]]:
            deadline = asyncio.get_running_loop().time() + timeout_s
            while True:
                groups = {_s(g["name"]): g for g in await self.r.xinfo_groups(stream)}
                g = groups.get(group)
                delivered = g is not None and _sid(_s(g["last-delivered-id"])) >= _sid(last)
                pending: Any = await self.r.xpending_range(stream, group, "-", "+", 100_000) if g else []
                stuck = ({_s(p["message_id"]) for p in pending} & ours) - held()
                if delivered and not stuck:
                    return True, set()
                if asyncio.get_running_loop().time() > deadline:
                    return delivered, stuck
                await asyncio.sleep(0.02)

        delivered, stuck = self.run(go(), timeout_s + 10)
        assert delivered, f"{stream}: the {group!r} group was not delivered every entry"
        assert not stuck, f"{stream}: {len(stuck)} entries still pending, e.g. {sorted(stuck)[:3]}"

    def dead_letters(self, stream: str) -> dict[str, dict[bytes, bytes]]:
        """entry id -> the fields of its dead letter, for every entry parked from `stream`."""

        async def go() -> Any:
            return await self.r.xrange(dead_letter(stream))

        return {_s(f[b"id"]): f for _, f in self.run(go())}

    def check_dead_letters(
        self, stream: str, added: Iterable[tuple[str, dict[str, bytes]]], grouped: bool = True
    ) -> int:
        """Every entry that does not decode was parked, and every parked one has a reason;
        returns how many of `added` were parked. (An inbox entry is parked just after the
        coordinator moved past it, not atomically with that: a missing one is waited for.)"""
        added = list(added)
        must = {entry_id for entry_id, fields in added if not _decodes(stream, fields)}
        for _ in range(100):
            dlq = self.dead_letters(stream)
            if must <= set(dlq):
                break
            time.sleep(0.02)
        for entry_id, fields in added:
            if entry_id in must and entry_id not in dlq:
                pytest.fail(f"{stream} {entry_id}: undecodable entry {fields!r:.300} was not dead-lettered")
            if entry_id in dlq:
                reason = dlq[entry_id][b"reason"].decode()
                assert reason.strip(), f"{stream} {entry_id}: dead-lettered without a reason"
                if grouped:
                    assert dlq[entry_id][b"stream"].decode() == stream
        return sum(1 for entry_id, _ in added if entry_id in dlq)

    def known_queries(self, n: int) -> list[str]:
        """Query ids whose request is stored (so jobs and budgets for them are not dropped)."""
        qids = [f"fz-{uuid.uuid4().hex[:8]}" for _ in range(n)]

        async def go() -> None:
            for qid in qids:
                req = SubmitQuestionRequest(msg_id=f"m-{qid}", query_id=qid, question="What is 2+2?")
                await self.r.set(query_request(qid), encode(req))

        self.run(go())
        return qids

    def answered(self, *missing: tuple[str, str]) -> AnswerResult:
        """Start the services `missing` from the pipeline, submit a normal question: it is
        answered, without an error."""
        self.start(*missing)

        async def go() -> AnswerResult | None:
            qid = await self.cluster.client.submit("What is 3 + 4?", algorithm="rebase", target=2)
            return await self.cluster.client.result(qid, timeout_s=30)

        answer = self.run(go(), 45)
        assert answer is not None, "a normal question was not answered after the fuzzing"
        assert answer.error == "", answer.error
        self.healthy()
        return answer


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _sid(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def _decodes(stream: str, fields: dict[str, bytes]) -> bool:
    if "e" not in fields:
        return False
    try:
        decode(stream, fields["e"])
    except Exception:  # noqa: BLE001 - any failure (the pure test below holds it to ProtocolError)
        return False
    return True


def _batches(
    types: tuple[type, ...], ids: Sequence[str], query_ids: Sequence[str] = (), max_size: int = BATCH
) -> st.SearchStrategy[Any]:
    entries = fz.entry_fields(types, ids, query_ids)
    return st.lists(entries, min_size=max_size // 3, max_size=max_size)


# Payloads every grouped stream gets once, before the generated cases: the nastiest shapes.
SEEDS: list[dict[str, bytes]] = [
    {"e": b""},
    {"e": b"\x91" * 5_000 + b"\xc0"},  # nested past the recursion limit
    {"e": b"\x81\xa1a" * 2_000 + b"\xc0"},
    {"e": b"x" * (fz.MAX_MESSAGE_BYTES + 1)},  # over the message limit
    {"x": b"no body"},
]


# ---------------------------------------------------------------------------- grouped streams


def test_generator_survives_fuzzed_jobs_and_cancellations(fuzz):
    test = "generator gen:jobs:default + gen:control"
    stream = gen_jobs(DEFAULT_POOL)
    fuzz.start(("generator", "gen-0"))
    gen = fuzz.service("gen-0")
    known = fuzz.known_queries(3)
    ids = ["j-0", "j-1", "n-0", "root", known[0]]
    everything: list[tuple[str, dict[str, bytes]]] = []

    def running() -> set[str]:  # called on the loop
        return {d.entry_id for d, _, _ in gen.running.values()}

    def control_read_to(last: str) -> None:
        async def go() -> bool:
            deadline = asyncio.get_running_loop().time() + DRAIN_S
            while asyncio.get_running_loop().time() < deadline:
                if gen._control_last != "$" and _sid(_s(gen._control_last)) >= _sid(last):
                    return True
                await asyncio.sleep(0.02)
            return False

        assert fuzz.run(go()), "the generator did not read the control stream to its end"

    # Jobs the fuzzing found the generator crashing or failing on, each one field off a job
    # that runs (behind a long one, so the engine is busy decoding when they arrive).
    job = _job(known[0])
    bad = {
        "sim_style": msgspec.structs.replace(job, job_id="j-style", sim_style="zigzag"),
        "prompt_tokens": msgspec.structs.replace(
            job, job_id="j-empty", prompt_node_ids=["root"], prompt_tokens=[0], max_new_tokens=1
        ),
    }
    seeded = fuzz.add(stream, [*SEEDS, {"e": encode(job)}, *({"e": encode(m)} for m in bad.values())])
    fuzz.drained(stream, GENERATOR_GROUP, seeded, held=running)
    fuzz.check_dead_letters(stream, seeded)
    fuzz.healthy()
    reasons = {_s(f[b"id"]): f[b"reason"].decode() for f in fuzz.dead_letters(stream).values()}
    for (entry_id, _), field in zip(seeded[-len(bad) :], bad):
        assert reasons.get(entry_id, "").startswith(f"{field}:"), (field, reasons.get(entry_id))
    everything += seeded

    @FUZZ
    @given(
        jobs=_batches((GenerateRequest, CancelRequest), ids, known),
        control=st.lists(fz.entry_fields((CancelRequest,), ids, known), max_size=5),
    )
    def case(jobs, control):
        since = len(fuzz.logs)
        added = fuzz.add(stream, jobs)
        if control:
            sent = fuzz.add(GEN_CONTROL, control)
            control_read_to(sent[-1][0])
        fuzz.drained(stream, GENERATOR_GROUP, added, held=running)
        fuzz.check_dead_letters(stream, added)
        fuzz.healthy(since)
        everything.extend(added)
        count(test, 1, len(jobs) + len(control))

    case()
    fuzz.drained(stream, GENERATOR_GROUP, everything)  # nothing left running, nothing pending
    NOTES[test] = f"gen-0: {gen.summary()}"
    fuzz.answered(("coordinator", "coord-0"), ("scorer", "scorer-0"), ("allocator", "allocator-0"))
    assert CASES[test]["examples"] >= 25


def test_scorer_survives_fuzzed_score_jobs(fuzz):
    test = "scorer score:jobs"
    fuzz.start(("scorer", "scorer-0"))
    scorer = fuzz.service("scorer-0")
    known = fuzz.known_queries(3)
    ids = ["j-0", "n-0", "root", known[0]]
    everything: list[tuple[str, dict[str, bytes]]] = []

    def pending() -> set[str]:  # called on the loop
        return {d.entry_id for d, _ in scorer.pending.values()}

    seeded = fuzz.add(SCORE_JOBS, SEEDS)
    fuzz.drained(SCORE_JOBS, SCORER_GROUP, seeded, held=pending)
    fuzz.check_dead_letters(SCORE_JOBS, seeded)
    fuzz.healthy()
    everything += seeded

    @FUZZ
    @given(jobs=_batches((ScoreRequest,), ids, known))
    def case(jobs):
        since = len(fuzz.logs)
        added = fuzz.add(SCORE_JOBS, jobs)
        fuzz.drained(SCORE_JOBS, SCORER_GROUP, added, held=pending)
        fuzz.check_dead_letters(SCORE_JOBS, added)
        fuzz.healthy(since)
        everything.extend(added)
        count(test, 1, len(jobs))

    case()
    fuzz.drained(SCORE_JOBS, SCORER_GROUP, everything)
    NOTES[test] = f"scorer-0: {scorer.summary()}"
    fuzz.answered(("coordinator", "coord-0"), ("generator", "gen-0"), ("allocator", "allocator-0"))
    assert CASES[test]["examples"] >= 25


def test_coordinator_survives_fuzzed_submissions(fuzz):
    """Fuzzed questions on the ingress stream, with the whole pipeline running: a bad one is
    dead-lettered with its reason (and answered as rejected), a searchable one is answered."""
    test = "coordinator ingress:new"
    fuzz.start(
        ("coordinator", "coord-0"),
        ("generator", "gen-0"),
        ("scorer", "scorer-0"),
        ("allocator", "allocator-0"),
    )
    # Mostly fresh query ids (a rejected question keeps its id answered), a few shared ones.
    ids = [*(f"fz-{i:04d}" for i in range(500)), "fz.c", "FZ:d", "x" * 64]
    limits = fuzz.cluster.settings.limits
    everything: list[tuple[str, dict[str, bytes]]] = []
    searchable: set[str] = set()

    seeded = fuzz.add(INGRESS, SEEDS)
    fuzz.drained(INGRESS, COORDINATOR_GROUP, seeded)
    fuzz.check_dead_letters(INGRESS, seeded)
    fuzz.healthy()

    @FUZZ
    @given(entries=_batches((SubmitQuestionRequest,), [], ids, max_size=12))
    def case(entries):
        since = len(fuzz.logs)
        added = fuzz.add(INGRESS, entries)
        fuzz.drained(INGRESS, COORDINATOR_GROUP, added)
        fuzz.check_dead_letters(INGRESS, added)
        dlq = fuzz.dead_letters(INGRESS)
        for entry_id, fields in added:
            if not _decodes(INGRESS, fields):
                continue
            req = decode(INGRESS, fields["e"])
            assert isinstance(req, SubmitQuestionRequest)
            try:
                submission.validate(req, limits)
            except SubmissionError:
                assert entry_id in dlq, f"an invalid question was not dead-lettered: {req!r:.300}"
                continue
            if entry_id not in dlq:
                searchable.add(req.query_id)
        fuzz.healthy(since)
        everything.extend(added)
        count(test, 1, len(entries))

    case()

    async def answers() -> list[str]:
        """The searchable questions not answered (or failed) within the drain time."""
        deadline = asyncio.get_running_loop().time() + DRAIN_S
        while True:
            left = [q for q in sorted(searchable) if not await fuzz.r.exists(reply_key(q))]
            if not left or asyncio.get_running_loop().time() > deadline:
                return left
            await asyncio.sleep(0.05)

    unanswered = fuzz.run(answers(), DRAIN_S + 10)
    assert not unanswered, f"searchable fuzzed questions never answered: {unanswered}"
    coord = fuzz.service("coord-0")
    NOTES[test] = f"searchable questions answered: {len(searchable)}; coord-0: {coord.summary()}"
    fuzz.drained(INGRESS, COORDINATOR_GROUP, everything)
    fuzz.answered()
    assert CASES[test]["examples"] >= 25


# ---------------------------------------------------------------------------- streams read without a group


def test_coordinator_survives_a_fuzzed_inbox(fuzz):
    """Fuzzed results, budgets, cancellations and failures in a live query's inbox (its real
    job and node ids among the ids drawn): every undecodable entry is parked in
    `dlq:{q:<id>}:in` with a reason, and the query still gets its answer."""
    test = "coordinator {q:<id>}:in"
    fuzz.start(("coordinator", "coord-0"))
    coord = fuzz.service("coord-0")

    async def adopted(qid: str) -> Any:
        deadline = asyncio.get_running_loop().time() + DRAIN_S
        # Adopted once its first jobs are all published (the ids drawn must not depend on
        # how far the adoption got when we looked).
        while qid not in coord.queries or coord.queries[qid].replaying:
            assert asyncio.get_running_loop().time() < deadline, f"{qid} was not adopted"
            await asyncio.sleep(0.01)
        return coord.queries[qid]

    async def job_ids(qid: str) -> list[str]:
        out: set[str] = set()
        for stream in (gen_jobs(DEFAULT_POOL), SCORE_JOBS):
            for _, fields in await fuzz.r.xrange(stream):
                msg = decode(stream, fields[b"e"])
                if msg.query_id == qid and isinstance(msg, GenerateRequest | ScoreRequest):
                    out |= {msg.job_id, msg.node_id, *msg.prompt_node_ids}
        return sorted(out)

    async def settle(qid: str, query: Any, last: str) -> bool:
        """Wait until the query applied its inbox to `last`, or finished; True if it finished."""
        deadline = asyncio.get_running_loop().time() + DRAIN_S
        while True:
            if qid not in coord.queries:
                return True
            if _sid(query.last_id) >= _sid(last):
                return False
            assert asyncio.get_running_loop().time() < deadline, f"{qid}: the inbox was not read"
            await asyncio.sleep(0.01)

    async def answer(qid: str) -> AnswerResult | None:
        if qid in coord.queries:
            await fuzz.cluster.client.cancel(qid)
        return await fuzz.cluster.client.result(qid, timeout_s=DRAIN_S)

    @FUZZ
    @given(data=st.data())
    def case(data):
        since = len(fuzz.logs)
        qid = fuzz.run(fuzz.cluster.client.submit("What is 5 + 6?", algorithm="rebase", target=4))
        query = fuzz.run(adopted(qid))
        ids = [qid, *fuzz.run(job_ids(qid))]
        types = message_types(query_inbox(qid))
        entries = data.draw(_batches(types, ids, [qid]), label="entries")
        inbox = query_inbox(qid)
        added = fuzz.add(inbox, entries)
        fuzz.run(settle(qid, query, added[-1][0]), DRAIN_S + 10)
        applied = [(i, f) for i, f in added if _sid(i) <= _sid(query.last_id)]
        fuzz.check_dead_letters(inbox, applied, grouped=False)
        result = fuzz.run(answer(qid), DRAIN_S + 10)
        assert result is not None, f"{qid}: no answer after its inbox was fuzzed"
        fuzz.healthy(since)
        count(test, 1, len(entries))

    case()
    NOTES[test] = f"coord-0: {coord.summary()}"
    fuzz.answered(("generator", "gen-0"), ("scorer", "scorer-0"), ("allocator", "allocator-0"))
    assert CASES[test]["examples"] >= 25


def test_allocator_survives_fuzzed_stats_and_worker_loads(fuzz):
    """Fuzzed query stats (stats:queries) and generator loads (worker:<id>:load keys): the
    allocator drops what does not decode, clamps what does, and keeps allocating."""
    test = "allocator stats:queries + worker:<id>:load"
    fuzz.start(("allocator", "allocator-0"))
    alloc = fuzz.service("allocator-0")
    ids = fuzz.known_queries(4)

    async def read_to(last: str | None, rounds: int) -> bool:
        """Wait until the allocator read the stream to `last` (None: any entry), then
        finished `rounds` more allocation rounds."""
        deadline = asyncio.get_running_loop().time() + DRAIN_S
        while asyncio.get_running_loop().time() < deadline:
            seen = alloc._last
            if seen != "$" and (last is None or _sid(_s(seen)) >= _sid(last)):
                break
            if last is None:  # it reads from "$": keep writing until it has seen one entry
                await fuzz.r.xadd(QUERY_STATS, {"e": encode(_stats(ids[0]))})
            await asyncio.sleep(0.02)
        else:
            return False
        start = alloc.rounds
        while alloc.rounds < start + rounds:
            if asyncio.get_running_loop().time() > deadline:
                return False
            await asyncio.sleep(0.01)
        return True

    def set_loads(loads: list[tuple[str, bytes]]) -> None:
        async def go() -> None:
            for worker, payload in loads:
                await fuzz.r.set(worker_load(worker), payload, px=500)

        fuzz.run(go())

    assert fuzz.run(fuzz.cluster._wait_for(ALLOCATOR_LEASE)) is None
    assert fuzz.run(read_to(None, 1)), "the allocator never read a stats entry"
    worker_ids = st.one_of(st.sampled_from(["gen-0", "gen-1"]), fz.strings(short=True))
    load_payloads = st.one_of(
        fz.encoded(fz.plausible(WorkerLoadEvent)),
        fz.encoded(fz.message(WorkerLoadEvent)),
        fz.arbitrary_payload((WorkerLoadEvent,)),
    )

    @FUZZ
    @given(
        stats=_batches((QueryStatsEvent,), [], ids),
        loads=st.lists(st.tuples(worker_ids, load_payloads), max_size=4),
    )
    def case(stats, loads):
        since = len(fuzz.logs)
        set_loads(loads)
        added = fuzz.add(QUERY_STATS, stats)
        assert fuzz.run(read_to(added[-1][0], 2), DRAIN_S + 10), "the allocator stopped allocating"
        fuzz.healthy(since)
        count(test, 1, len(stats) + len(loads))

    case()

    async def budgets() -> list[BudgetUpdateEvent]:
        out = []
        for qid in ids:
            for _, fields in await fuzz.r.xrange(query_inbox(qid)):
                msg = decode(query_inbox(qid), fields[b"e"])
                if isinstance(msg, BudgetUpdateEvent):
                    out.append(msg)
        return out

    published = fuzz.run(budgets())
    assert published, "the allocator published no budget for the known queries"
    NOTES[test] = f"allocator-0: {alloc.summary()}; budgets published: {len(published)}"
    assert all(b.share >= 0 and b.k_total >= 1 for b in published), published[:3]
    fuzz.answered(("coordinator", "coord-0"), ("generator", "gen-0"), ("scorer", "scorer-0"))
    assert CASES[test]["examples"] >= 25


def _job(qid: str) -> GenerateRequest:
    """A generation job of the synthetic workload the generator runs (a long one)."""
    return GenerateRequest(
        msg_id=f"{qid}/j-long/gen",
        query_id=qid,
        job_id="j-long",
        node_id="n-long",
        parent_id="root",
        child_index=0,
        action="expand",
        prompt_node_ids=["root"],
        prompt_tokens=[300],
        seed=1,
        max_new_tokens=256,
    )


def _stats(qid: str) -> QueryStatsEvent:
    return QueryStatsEvent(
        msg_id=f"stats/{qid}/warm-up",
        query_id=qid,
        candidates=2,
        hit_rate=0.5,
        prefix_tokens=100,
        active_jobs=1,
    )


# ---------------------------------------------------------------------------- the codec, pure

PURE = settings(
    max_examples=1_000,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
NAMES = fz.concrete_names()
# Each message type, with every stream or key that carries it.
CARRIERS = {
    cls: [n for n in NAMES if cls in message_types(n)]
    for cls in fz.ALL_MESSAGES
    if any(cls in ts for table in (STREAMS, KEYS) for ts in table.values())
}


def test_every_message_type_has_a_carrier_and_a_strategy():
    assert set(CARRIERS) == set(fz.ALL_MESSAGES), "a message that no stream or key carries"
    assert {AnswerResult, GenerateResult, JobFailedEvent, ScoreResult} <= set(CARRIERS)


@PURE
@given(
    payload=st.one_of(fz.arbitrary_payload(oversize=True), fz.encoded(fz.any_message())),
    name=st.sampled_from([*NAMES, "no:such:stream", ""]),
)
def test_decode_raises_only_protocol_errors(payload, name):
    count("codec decode", 1, 1)
    try:
        msg = decode(name, payload)
    except ProtocolError as exc:
        assert str(exc), "a ProtocolError without a reason"
        return
    assert type(msg) in message_types(name)


@PURE
@given(msg=st.one_of(fz.any_message(), fz.any_message(surrogates=True)))
def test_encode_round_trips_or_raises_protocol_error(msg):
    count("codec encode", 1, 1)
    try:
        payload = encode(msg)
    except ProtocolError as exc:
        assert str(exc)
        return
    for name in CARRIERS[type(msg)]:
        back = decode(name, payload)
        assert fz.same(back, msg), f"{type(msg).__name__} changed on {name}"
        assert msgspec.msgpack.encode(back) == payload


@PURE
@given(msg=fz.any_message(), wrapper=st.sampled_from(sorted(NAMES)))
def test_a_message_decodes_only_where_its_type_is_carried(msg, wrapper):
    count("codec names", 1, 1)
    payload = msgspec.msgpack.encode(msg)
    try:
        back = decode(wrapper, payload)
    except ProtocolError:
        assert type(msg) not in message_types(wrapper) or len(payload) > fz.MAX_MESSAGE_BYTES
        return
    assert type(back) is type(msg) and fz.same(back, msg)
