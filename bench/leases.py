"""`python -m spex.bench.leases`: N questions submitted at once to ONE coordinator — does it
keep the leases on all of them?

For each N of `--in-flight` it starts Redis and the services (`spex up`'s launcher: real
processes, the simulated engine at `--time-scale`, one coordinator), submits N questions at
once through the ingress client, follows the `answers` stream until all N are answered, and
reads the coordinator's log: its `lease_lost` lines (a lease that lapsed while it held the
query: the query is adopted again and its inbox replayed) and its `query_adopted` lines (a
question adopted once is 1 adoption a question). The table gives, per N: lease losses,
adoptions a question, the first answer's time and the throughput (answered / wall seconds
from the submission to the last answer) and the CPU seconds every process (Redis included)
spent a question — on a shared machine the throughput follows what else runs, the CPU a
question costs does not; the JSON adds each process's CPU seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

import redis.asyncio as aioredis

from spex.bench.distributed import _cpu_s, _redis_cpu_s
from spex.bench.soak import service_pids
from spex.proto import Limits, decode
from spex.proto.names import ANSWERS, Partitions
from spex.services.launcher import up
from spex.shared.runtime.client import IngressClient
from spex.shared.runtime.connect import redis_client
from spex.shared.runtime.redis_server import free_port
from spex.shared.runtime.replies import StreamRead
from spex.shared.runtime.settings import Settings

__all__ = ["main", "run_leases"]

SUBMITTERS = 32  # submissions at once (within the Redis client's connection pool)
PER_CLIENT = 500  # questions per client name (each client is held to its own in-flight limit)
COLUMNS = (
    "in_flight", "lease_losses", "adoptions_per_question", "intake_pauses", "first_answer_s", "wall_s",
    "q_per_s", "cpu_s_per_question",
)  # fmt: skip


async def _follow(r: aioredis.Redis, want: set[str], t0: float, timeout_s: float) -> tuple[float, float]:
    """Read the answers stream until every query of `want` is answered: (first answer s, last
    answer s), from `t0`."""
    last: str | bytes = "0"
    seen: set[str] = set()
    first = 0.0
    deadline = t0 + timeout_s
    while not want <= seen:
        if time.monotonic() > deadline:
            late = len(want - seen)
            raise TimeoutError(f"{late} of {len(want)} questions not answered in {timeout_s:.0f} s")
        replies = cast(StreamRead, await r.xread({ANSWERS: last}, count=1000, block=500))
        for _, entries in replies or []:
            for entry_id, fields in entries:
                last = entry_id
                qid = decode(ANSWERS, fields[b"e"]).query_id
                if qid in want and qid not in seen:
                    seen.add(qid)
                    first = first or time.monotonic() - t0
    return first, time.monotonic() - t0


async def drive(live: Settings, n: int, args: argparse.Namespace) -> dict[str, float]:
    r = redis_client(live)
    limit, parts = max(live.backlog_limit, n), Partitions(live.partitions)
    client = IngressClient(r, backlog_limit=limit, limits=Limits(), partitions=parts)
    connections = asyncio.Semaphore(SUBMITTERS)

    async def submit(i: int) -> str:
        async with connections:
            return await client.submit(
                f"leases question {i}: {i} + {i}?", client=f"bench-{i // PER_CLIENT}",
                algorithm=args.algorithm, target=args.target, seed=i,
            )  # fmt: skip

    t0 = time.monotonic()
    qids = await asyncio.gather(*(submit(i) for i in range(n)))
    submitted_s = time.monotonic() - t0
    first, wall = await _follow(r, set(qids), t0, args.timeout)
    await client.aclose()
    return {"submit_s": round(submitted_s, 2), "first_answer_s": round(first, 2), "wall_s": round(wall, 2)}


def _count(log: str, event: str) -> int:
    """Lines of the coordinator's log (structlog JSON lines) whose event is `event`."""
    return log.count(f'"event": "{event}"')


def run_one(n: int, args: argparse.Namespace) -> dict[str, object]:
    settings = Settings(http_port=free_port(), time_scale=args.time_scale, backlog_limit=max(10_000, n))
    with tempfile.TemporaryDirectory(prefix="spex-leases-") as scratch:
        data = Path(scratch)
        with up(settings, generators=args.generators, data_dir=data) as live:
            pids = service_pids()
            cpu0, redis0 = {name: _cpu_s(pid) for name, pid in pids.items()}, _redis_cpu_s(live)
            run = asyncio.run(drive(live, n, args))
            cpu = {name: round(_cpu_s(pid) - cpu0[name], 1) for name, pid in pids.items()}
            cpu["redis"] = round(_redis_cpu_s(live) - redis0, 1)
        log = (data / "logs" / "coord-0.log").read_text(errors="replace")
        losses, adoptions = _count(log, "lease_lost"), _count(log, "query_adopted")
        paused = _count(log, "intake_paused")
    return {
        "in_flight": n,
        "lease_losses": losses,
        "adoptions_per_question": round(adoptions / n, 2),
        "intake_pauses": paused,
        **run,
        "q_per_s": round(n / run["wall_s"], 2),
        "cpu_s": cpu,
        "cpu_s_per_question": round(sum(cpu.values()) / n, 4),
    }


def run_leases(args: argparse.Namespace) -> dict[str, object]:
    rows = []
    for n in args.in_flight:
        rows.append(run_one(n, args))
        print(json.dumps(rows[-1]), flush=True)
    return {
        "algorithm": args.algorithm, "target": args.target, "time_scale": args.time_scale,
        "generators": args.generators, "coordinators": 1, "rows": rows,
    }  # fmt: skip


def table(report: dict[str, Any]) -> str:
    """The rows as a Markdown table."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---:|" * len(COLUMNS)]
    lines += ["| " + " | ".join(str(row.get(c, "")) for c in COLUMNS) + " |" for row in report["rows"]]
    return "\n".join(lines)


def _in_flight(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError("a comma-separated list of counts, e.g. 200,400,800") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("each count at least 1")
    return values


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m spex.bench.leases", description=__doc__.split("\n")[0])
    p.add_argument("--in-flight", type=_in_flight, default=[200, 400, 800], help="N at once, a run each")
    p.add_argument("--algorithm", default="rebase")
    p.add_argument("--target", type=int, default=4)
    p.add_argument("--time-scale", type=float, default=0.01, help="SPEX_TIME_SCALE of the run")
    p.add_argument("--generators", type=int, default=1)
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds to wait for one run's answers")
    p.add_argument("--json", default="leases.json")
    p.add_argument("--markdown", default=None, help="also write the table here (Markdown)")
    args = p.parse_args(argv)
    if args.time_scale <= 0 or args.generators < 1 or args.timeout <= 0:
        p.error("--time-scale, --generators and --timeout: must be positive")
    report = run_leases(args)
    Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    print(table(report))
    if args.markdown:
        Path(args.markdown).write_text(table(report) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
