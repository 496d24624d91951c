"""What the fuzz tests share: an event loop in a thread (the services run on it while
hypothesis drives them from the test's thread), the count of cases each test ran, and `Fuzz`,
the in-process services on a real Redis that the wire fuzz tests XADD their entries to.

The wire tests' contract, checked after each batch: the service is alive, no loop or handler
of it logged a failure, every entry of a grouped stream was delivered and is no longer pending
(acknowledged after its handler, or dead-lettered: every entry that does not decode is in
`dlq:<stream>`, every dead letter has a reason), and once the fuzzing is over a normal
question is still answered.
"""

from __future__ import annotations

import asyncio
import threading
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, TypeVar

import pytest
import redis.asyncio as aioredis
from hypothesis import HealthCheck, Phase, settings

from spex.proto import AnswerResult, SubmitQuestionRequest, decode, encode
from spex.proto.names import SINGLE, dead_letter, query_request
from tests.fuzz.strategies import SEED_ENTRIES
from tests.services.cluster import Cluster

__all__ = [
    "CASES",
    "CLUSTER_SETTINGS",
    "DRAIN_S",
    "FAILURE_EVENTS",
    "FUZZ",
    "NOTES",
    "Fuzz",
    "Loop",
    "as_text",
    "count",
    "decodes",
    "entry_order",
]

T = TypeVar("T")

# test name -> examples (hypothesis cases) and entries (fuzzed messages) it ran; the fuzz
# conftest prints them at the end of the session.
CASES: dict[str, Counter[str]] = {}
NOTES: dict[str, str] = {}  # test name -> one line more for the summary (what the fuzzing reached)

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
# Events a service logs when a loop, a job's completion or one message's handler raised, or
# when it died: with Redis up, fuzzed input must never cause one. (A handler that raises
# leaves its entry to be retried and parked as "delivered N times", the real reason lost; an
# inbox event that raises is skipped unrecorded.)
FAILURE_EVENTS = ("loop_failed", "completion_failed", "service_failed", "handler_failed", "event_failed")
DRAIN_S = 20.0


def count(test: str, examples: int = 0, entries: int = 0) -> None:
    c = CASES.setdefault(test, Counter())
    c["examples"] += examples
    c["entries"] += entries


class Loop:
    """An asyncio event loop running in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="fuzz-loop", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float = 60.0) -> T:
        """Run `coro` on the loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def close(self) -> None:
        async def _cancel_rest() -> None:
            rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in rest:
                task.cancel()
            await asyncio.gather(*rest, return_exceptions=True)

        self.run(_cancel_rest(), timeout_s=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


def as_text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def entry_order(entry_id: str) -> tuple[int, int]:
    """A stream entry id as (milliseconds, sequence), to compare ids in stream order."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def decodes(stream: str, fields: dict[str, bytes]) -> bool:
    """Whether the entry has an `e` field that decodes as a message of `stream`."""
    if "e" not in fields:
        return False
    try:
        decode(stream, fields["e"])
    except Exception:  # noqa: BLE001 - any failure (test_codec_contract.py holds it to ProtocolError)
        return False
    return True


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

        return [(as_text(i), f) for i, f in zip(self.run(go()), batch)]

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
        last = entry_order(max((i for i, _ in added), key=entry_order))

        async def go() -> tuple[bool, set[str]]:
            deadline = asyncio.get_running_loop().time() + timeout_s
            while True:
                groups = {as_text(g["name"]): g for g in await self.r.xinfo_groups(stream)}
                g = groups.get(group)
                delivered = g is not None and entry_order(as_text(g["last-delivered-id"])) >= last
                pending: Any = await self.r.xpending_range(stream, group, "-", "+", 100_000) if g else []
                stuck = ({as_text(p["message_id"]) for p in pending} & ours) - held()
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

        return {as_text(f[b"id"]): f for _, f in self.run(go())}

    def check_dead_letters(
        self, stream: str, added: Iterable[tuple[str, dict[str, bytes]]], grouped: bool = True
    ) -> int:
        """Every entry that does not decode was parked, and every parked one has a reason;
        returns how many of `added` were parked. (An inbox entry is parked just after the
        coordinator moved past it, not atomically with that: a missing one is waited for.)"""
        added = list(added)
        must = {entry_id for entry_id, fields in added if not decodes(stream, fields)}
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

    def seeded(
        self,
        stream: str,
        group: str,
        extra: Iterable[dict[str, bytes]] = (),
        held: Callable[[], set[str]] = set,
    ) -> list[tuple[str, dict[str, bytes]]]:
        """XADD the nastiest entries (`SEED_ENTRIES`, then `extra`) to a grouped stream, wait
        until they are drained, check their dead letters and the services' health; their ids."""
        added = self.add(stream, [*SEED_ENTRIES, *extra])
        self.drained(stream, group, added, held=held)
        self.check_dead_letters(stream, added)
        self.healthy()
        return added

    def known_queries(self, n: int) -> list[str]:
        """Query ids whose request is stored (so jobs and budgets for them are not dropped)."""
        qids = [f"fz-{uuid.uuid4().hex[:8]}" for _ in range(n)]

        async def go() -> None:
            for qid in qids:
                req = SubmitQuestionRequest(msg_id=f"m-{qid}", query_id=qid, question="What is 2+2?")
                await self.r.set(query_request(qid, SINGLE), encode(req))

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
