"""`python -m spex.bench.sizing`: what Redis keeps per question, by search and by key kind.

It starts every service (`spex up`'s launcher, an embedded Redis, the simulated engine),
answers a few questions of each search in turn, and once each is answered reads
`MEMORY USAGE` of every key the question left (`{q:<id>}:<kind>`, grouped by kind), and of
its entry on the answers stream. A key that expires within `SEARCH_KEPT_S` (what only the
search read, let go soon after the answer) is counted apart from what the question keeps for
the result TTL. docs/capacity.md ("Sizing Redis") turns the figures into bytes per hour of
traffic and a `maxmemory`.

`--peak` measures instead what a question holds while it is searched, everything counted:
`questions` of one search at a time, on a stack of their own, Redis's `used_memory` sampled
until they are answered; the peak less what Redis held before them, a question. With `--chars`
each question is that long (`--chars 0` beside it gives what its prompt adds: how many copies
of it Redis holds at once). The ingress's reserve (`spex.shared.runtime.reserve`) is set from
these figures.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import re
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import redis.asyncio as aioredis

from spex.bench.chaos.incidents import long_question
from spex.proto import AnswerResult
from spex.proto.names import ANSWERS, Partitions
from spex.services.coordinator.store import SEARCH_KEPT_S
from spex.services.launcher import up
from spex.shared.runtime.client import IngressClient
from spex.shared.runtime.connect import redis_client
from spex.shared.runtime.redis_server import free_port
from spex.shared.runtime.settings import Settings
from spex.shared.sim.workload import SyntheticWorkload, WorkloadKnobs

__all__ = ["SEARCHES", "main", "measure"]

SEARCHES = (("rebase", 16), ("rebase", 64), ("rebase", 256), ("rstar", 10), ("ets", 16))
PEAK_EVERY_S = 0.01  # how often `--peak` reads Redis's memory
SETTLE_S = 1.0  # after the answers: late writes (a tree's last events, cancels) land
_KIND = re.compile(r"^(?:\{p\d+\})?\{q:(.+?)\}:(.+)$")


def key_kind(name: str) -> tuple[str, str] | None:
    """(query id, kind) of a query's key (`{q:<id>}:tree` -> (id, "tree")), else None."""
    m = _KIND.match(name)
    return (m.group(1), m.group(2)) if m else None


async def kept(r: aioredis.Redis, qids: set[str]) -> dict[str, dict[str, int]]:
    """Kind -> {"bytes", "keys", "brief"} over the keys of `qids` (MEMORY USAGE, every element
    counted; brief: the keys that expire within SEARCH_KEPT_S)."""
    out: dict[str, dict[str, int]] = {}
    async for key in r.scan_iter(match="*{q:*", count=1000):
        parsed = key_kind(key.decode())
        if parsed is None or parsed[0] not in qids:
            continue
        size = int(await r.memory_usage(key, samples=0) or 0)
        row = out.setdefault(parsed[1], {"bytes": 0, "keys": 0, "brief": 0})
        row["bytes"] += size
        row["keys"] += 1
        row["brief"] += 0 < int(await r.ttl(key)) <= SEARCH_KEPT_S
    return out


async def one_search(
    client: IngressClient, algorithm: str, target: int, questions: int, first: int
) -> dict[str, object]:
    workload = SyntheticWorkload(WorkloadKnobs(), 0)
    qids = []
    for i in range(first, first + questions):
        q = workload.query(i)
        qids.append(
            await client.submit(
                q.text,
                query_id=f"{q.query_id}-{algorithm}{target}",
                algorithm=algorithm,
                target=target,
                prompt_tokens=q.prompt_tokens,
            )  # fmt: skip
        )
    started = time.monotonic()
    answers = [await client.result(q, timeout_s=600) for q in qids]
    wall_s = time.monotonic() - started
    await asyncio.sleep(SETTLE_S)
    kinds = await kept(client.r, set(qids))
    total = sum(row["bytes"] for row in kinds.values())
    brief = {k for k, row in kinds.items() if row["brief"] == row["keys"]}
    kept_total = sum(row["bytes"] for k, row in kinds.items() if k not in brief)
    per_answer = int(await client.r.memory_usage(ANSWERS, samples=0) or 0) / max(
        1, await client.r.xlen(ANSWERS)
    )
    return {
        "search": f"{algorithm}-{target}",
        "questions": questions,
        "answered": sum(a is not None and not a.error for a in answers),
        "nodes_per_question": round(sum(a.nodes for a in answers if a) / questions, 1),
        "wall_s": round(wall_s, 1),
        "bytes_per_question": round(total / questions),
        "kept_bytes_per_question": round(kept_total / questions),
        "by_kind": {k: round(v["bytes"] / questions) for k, v in sorted(kinds.items())},
        "brief_kinds": sorted(brief),
        "answers_stream_bytes_per_answer": round(per_answer),
    }


async def peak(
    client: IngressClient, algorithm: str, target: int, questions: int, chars: int
) -> dict[str, object]:
    """What `questions` of one search hold in Redis at their peak, a question (see the module's
    docstring); `chars`: each question's length (0: the workload's own, a line)."""
    r = client.r
    workload = SyntheticWorkload(WorkloadKnobs(), 0)
    before = int((await r.info("memory"))["used_memory"])
    high = before
    qids = []
    for i in range(questions):
        q = workload.query(i)
        text = long_question(i, chars) if chars else q.text
        qids.append(
            await client.submit(text, query_id=f"{q.query_id}-peak", algorithm=algorithm, target=target)
        )

    async def answered() -> list[AnswerResult | None]:
        return [await client.result(q, timeout_s=600) for q in qids]

    waiting = asyncio.create_task(answered())
    while not waiting.done():
        high = max(high, int((await r.info("memory"))["used_memory"]))
        await asyncio.sleep(PEAK_EVERY_S)
    answers = await waiting
    held = (high - before) / questions
    return {
        "search": f"{algorithm}-{target}",
        "chars": chars,
        "questions": questions,
        "answered": sum(a is not None and not a.error for a in answers),
        "peak_bytes_per_question": round(held),
        "peak_bytes_per_target": round(held / target),
    }


def _client(settings: Settings) -> IngressClient:
    parts = Partitions(settings.partitions)
    return IngressClient(redis_client(settings), settings.backlog_limit, settings.limits, partitions=parts)


async def measure(
    settings: Settings,
    questions: int,
    say: Callable[[str], object],
    searches: tuple[tuple[str, int], ...] = SEARCHES,
) -> list[dict[str, object]]:
    client = _client(settings)
    rows = []
    try:
        for n, (algorithm, target) in enumerate(searches):
            rows.append(await one_search(client, algorithm, target, questions, n * questions))
            say(json.dumps(rows[-1]))
    finally:
        await client.aclose()
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m spex.bench.sizing", description=__doc__.split("\n")[0])
    p.add_argument("--questions", type=int, default=4, help="questions of each search")
    p.add_argument("--time-scale", type=float, default=0.002)
    p.add_argument("--generators", type=int, default=2)
    p.add_argument(
        "--peak", action="store_true", help="what a question holds at its peak, everything counted"
    )
    p.add_argument(
        "--chars", type=int, nargs="+", default=[0], help="--peak: each question's length (0: short)"
    )
    p.add_argument("--searches", nargs="+", default=None, help="ALGORITHM-TARGET each (default: the table's)")
    p.add_argument("--json", default="sizing.json")
    args = p.parse_args(argv)
    if args.questions < 1 or args.time_scale <= 0 or args.generators < 1 or min(args.chars) < 0:
        p.error("--questions, --time-scale and --generators: must be positive (--chars at least 0)")
    searches: tuple[tuple[str, int], ...] = SEARCHES
    if args.searches:
        try:
            searches = tuple((a, int(t)) for a, _, t in (s.rpartition("-") for s in args.searches))
        except ValueError:
            p.error("--searches: ALGORITHM-TARGET each, e.g. rebase-64")
    settings = Settings(http_port=free_port(), time_scale=args.time_scale)
    if not args.peak:
        with up(settings, generators=args.generators) as live:
            rows = asyncio.run(measure(live, args.questions, lambda m: print(m, flush=True), searches))
    else:
        rows = []
        for (algorithm, target), chars in itertools.product(searches, args.chars):
            with up(replace(settings, http_port=free_port()), generators=args.generators) as live:
                rows.append(asyncio.run(_peak_on(live, algorithm, target, args.questions, chars)))
            print(json.dumps(rows[-1]), flush=True)
    result = {"time_scale": args.time_scale, "peak": args.peak, "rows": rows}
    Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.json}")
    return 0


async def _peak_on(
    settings: Settings, algorithm: str, target: int, questions: int, chars: int
) -> dict[str, object]:
    client = _client(settings)
    try:
        return await peak(client, algorithm, target, questions, chars)
    finally:
        await client.aclose()


if __name__ == "__main__":
    sys.exit(main())
