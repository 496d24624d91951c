"""Which generator worker runs a job: prefix affinity by consistent hashing.

A query's jobs share its path's prefix (the question, then the steps), and only the worker
that ran the parent holds that prefix in its engine's cache. So every job of a query goes to
one worker: the owner of the query id on a hash ring over the live workers (`Ring`). When a
worker dies or joins, only the queries it owned (or now owns) move: about 1/N of them.

Hashing alone spreads a few queries unevenly (16 queries over 4 workers: often 6 on one and
2 on another), and the busiest worker sets the pace. So a query is placed as in consistent
hashing with bounded loads (Mirrokni, Thorup and Zadimoghaddam, 2018): on the first worker
clockwise from its point that serves fewer than (1 + ε) times the mean queries per worker,
and it stays there (`current`) while that worker has room. A worker with as many jobs as its
slots is full: the job goes to the least-loaded worker with room, and when every worker is
full, to the pool's shared stream, which any worker with room reads (and whose lag an
autoscaler scales on). Affinity off sends every job to the least-loaded worker: the cache
then hits only by chance.

Pure: the caller says which workers are live and how loaded (`Load`).
"""

from __future__ import annotations

import bisect
import hashlib
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

__all__ = ["BOUND", "SHARED", "Load", "Ring", "route"]

SHARED = ""  # route(): no worker has room (or none is live): the pool's shared stream
VNODES = 64  # points per worker on the ring: load spread within a few percent
BOUND = 0.25  # ε: a worker serves up to (1 + ε) × the mean queries before a new one moves on


def _point(key: str) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")


class Ring:
    """A consistent-hash ring over worker names."""

    def __init__(self, workers: Iterable[str] = (), vnodes: int = VNODES) -> None:
        self.vnodes = vnodes
        self.workers: frozenset[str] = frozenset()
        self._points: list[int] = []
        self._owners: list[str] = []
        self.update(workers)

    def update(self, workers: Iterable[str]) -> bool:
        """Set the live workers; True if they changed (the ring was rebuilt)."""
        live = frozenset(workers)
        if live == self.workers:
            return False
        self.workers = live
        points = sorted((_point(f"{w}#{i}"), w) for w in live for i in range(self.vnodes))
        self._points = [p for p, _ in points]
        self._owners = [w for _, w in points]
        return True

    def owner(self, key: str) -> str | None:
        """The worker that owns `key` (None when no worker is live)."""
        return next(self.walk(key), None)

    def walk(self, key: str) -> Iterator[str]:
        """Every live worker once, clockwise from `key`'s point: its owner first."""
        if not self._points:
            return
        start = bisect.bisect(self._points, _point(key))
        seen: set[str] = set()
        for j in range(len(self._points)):
            worker = self._owners[(start + j) % len(self._points)]
            if worker not in seen:
                seen.add(worker)
                yield worker
                if len(seen) == len(self.workers):
                    return


@dataclass(frozen=True)
class Load:
    jobs: int  # jobs the worker holds (running or queued in its engine)
    slots: int  # jobs it takes at most (0: unknown, never saturated)
    queries: int = 0  # distinct queries those jobs belong to

    @property
    def room(self) -> int:
        return 1 << 30 if self.slots <= 0 else self.slots - self.jobs


def route(
    query_id: str,
    ring: Ring,
    loads: Mapping[str, Load],
    affinity: bool = True,
    current: str | None = None,
    bound: float = BOUND,
) -> str:
    """The worker that should run the next job of `query_id` (placed on `current` so far),
    or SHARED."""
    held = {w: loads.get(w, Load(0, 0)) for w in ring.workers}
    if not held:
        return SHARED
    if affinity:
        if current in held and held[current].room > 0:
            return current
        mean = (sum(load.queries for load in held.values()) + 1) / len(held)
        cap = math.ceil((1 + bound) * mean)
        for worker in ring.walk(query_id):
            if held[worker].room > 0 and held[worker].queries < cap:
                return worker
    # No affinity, or every worker over the bound: the one with the fewest jobs and room
    # (ties by name, so it is repeatable).
    candidates = [(load.jobs, w) for w, load in held.items() if load.room > 0]
    return min(candidates)[1] if candidates else SHARED
