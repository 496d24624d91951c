"""The capacity model (issue #23): how many coordinators, scorers, allocators and Redis shards a
number of GPUs needs, from figures measured here.

`python -m spex.bench.capacity --json F` measures, on this machine:

- **live**: the services answering with the simulated GPU nearly instant (`live_coordinator`):
  inbox events per CPU-second of the coordinator, and the CPU seconds every other process and
  Redis (its INFO) spent per event on the same run; one run per search of `SEARCHES`.
- **per GPU**: each search's events per GPU-second at the calibrated node rates: the
  virtual-time run of the same questions on one simulated GPU gives its makespan, and the live
  run the events the same questions made (the same seeds: the same trees).
- **allocator**: the budget allocator's round (its telemetry read, the allocation, every changed
  share sent) with 100, 1,000 and 10,000 live queries on a real Redis.
- **durable writes**: a job's result published on a test cluster with and without `WAIT`.

and writes them with the table the docs quote: for 100, 1,000 and 10,000 GPUs, the processes
of each kind at `HEADROOM` of their measured capacity.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import time
from dataclasses import replace
from typing import Any

from spex.bench.results import summarize, write_json
from spex.bench.vtime import BenchConfig, run_bench
from spex.proto import QueryStatsEvent, WorkerLoadEvent, names
from spex.proto.names import Partitions
from spex.shared.runtime.connect import redis_client
from spex.shared.runtime.redis_server import RedisServer, redis_binaries
from spex.shared.runtime.settings import Settings
from spex.shared.runtime.workers import WorkerRegistry

__all__ = ["allocator_rounds", "capacity_table", "main", "per_gpu"]

SEARCHES = (("rebase", 16), ("rstar", 10))
GPUS = (100, 1_000, 10_000)
QUERIES = (100, 1_000, 10_000)
HEADROOM = 0.5  # each process and shard planned at half its measured capacity
BATCH = 16  # questions in flight per GPU in the model (the live and virtual-time runs' batch)


def per_gpu(algorithm: str, target: int, questions: int = 32) -> dict[str, Any]:
    """One search's figures: the live run's events and CPU, the virtual-time makespan of the
    same questions on one GPU, and what they make per GPU-second."""
    from spex.bench.distributed import live_coordinator

    cfg = BenchConfig(algorithm=algorithm, target=target, questions=questions, batch_size=BATCH, mode="spex")
    live = live_coordinator(cfg)
    simulated = summarize(run_bench(replace(cfg)))
    per_s = live["events"] / simulated.makespan_s
    return {
        "search": f"{algorithm}-{target}",
        "questions": questions,
        "live": live,
        "makespan_gpu_s": simulated.makespan_s,
        "profile": simulated.profile,
        "nodes": simulated.nodes_generated,
        "spec_issued": simulated.spec_issued,
        "events_per_gpu_s": per_s,
    }


async def _allocator_round_s(url: str, queries: int, workers: int) -> dict[str, float]:
    from spex.services.allocator import Allocator

    settings = Settings(redis_url=url, consumer="alloc-bench")
    r, parts = redis_client(settings), Partitions(settings.partitions)
    await r.flushall()
    async with r.pipeline(transaction=False) as pipe:  # live queries
        for i in range(queries):
            pipe.set(names.query_request(f"q{i:06d}", parts), b"x")
        await pipe.execute()
    registry = WorkerRegistry(r, parts)
    for w in range(workers):  # and live workers (for the whole run)
        load = WorkerLoadEvent(
            msg_id=f"load/{w}", query_id="", worker=f"gen-{w}", primary=8, primary_ctx=4096, spec=4,
            running=12, waiting=0, kv_held=8192, kv_capacity=200_000,
        )  # fmt: skip
        await registry.report(load, ttl_ms=3_600_000)
    allocator = Allocator(r, settings)

    def telemetry(hit: float) -> None:
        now = time.monotonic()
        for i in range(queries):
            qid = f"q{i:06d}"
            event = QueryStatsEvent(
                msg_id=f"s/{qid}", query_id=qid, running=[], offers=[(hit + i * 0.01) % 1.0] * (1 + i % 7),
                prefix_tokens=512 + i % 1024, active_jobs=i % 3, worker=f"gen-{i % workers}",
            )  # fmt: skip
            allocator.latest[qid] = (now, event)

    out: dict[str, float] = {}
    for label, hit in (("first", 0.3), ("unchanged", 0.3), ("changed", 0.6)):
        telemetry(hit)
        before = dict(allocator.published)
        wall, cpu = time.perf_counter(), time.process_time()
        await allocator._publish()
        out[f"{label}_round_s"] = time.perf_counter() - wall
        out[f"{label}_round_cpu_s"] = time.process_time() - cpu
        out[f"{label}_updates"] = float(sum(1 for q, v in allocator.published.items() if before.get(q) != v))
    await r.aclose()
    return out


def allocator_rounds(sizes: tuple[int, ...] = QUERIES, workers: int = 64) -> dict[str, Any]:
    """The allocator's round time at each number of live queries (a real Valkey, loopback)."""
    with RedisServer(redis_binaries().get("valkey")) as server:
        return {str(n): asyncio.run(_allocator_round_s(server.url, n, workers)) for n in sizes}


async def _publish_ms(url: str, n: int) -> dict[str, list[float]]:
    from spex.proto import GenerateResult
    from spex.shared.runtime.bus import Bus

    settings = Settings(redis_url=url, redis_cluster=True, partitions=8)
    r, parts = redis_client(settings), Partitions(settings.partitions)
    bus = Bus(r, "capacity", partitions=parts)
    durable = bus._durable
    out: dict[str, list[float]] = {}
    for label in ("durable", "plain", "durable", "plain"):
        bus._durable = durable if label == "durable" else None
        times = []
        for i in range(n):
            qid = f"{label}-{len(out.get(label, []))}-{i}"
            result = GenerateResult(
                msg_id=f"{qid}/r", query_id=qid, job_id="j", node_id="n", text="x" * 200, tokens=50
            )
            start = time.perf_counter()
            await bus.publish(names.query_inbox(qid, parts), result)
            times.append(time.perf_counter() - start)
        times.sort()
        out.setdefault(label, []).extend([1e3 * times[n // 2], 1e3 * times[int(0.99 * n)]])
    await r.aclose()
    return out


def durable_publish_ms(n: int = 400) -> dict[str, list[float]]:
    """What a durable write costs on a cluster (three primaries, three replicas, loopback): a
    job's result published `n` times one at a time, with WAIT (durable) and without (plain),
    each twice: [median ms, p99 ms] per pass."""
    from spex.shared.runtime.redis_cluster import RedisCluster

    with RedisCluster() as cluster:
        return asyncio.run(_publish_ms(cluster.url, n))


def capacity_table(searches: list[dict[str, Any]], allocator: dict[str, Any]) -> list[dict[str, Any]]:
    """For each search and GPU count: events per second, and the processes and shards that
    carry them at HEADROOM. A scorer's CPU per event is the live run's (a reward model's own
    GPU time is not the scorer process's)."""
    rows = []
    for s in searches:
        live = s["live"]
        events = live["events"]
        coord_rate = live["events_per_cpu_s"] * HEADROOM
        scorer_rate = events / live["cpu_s"]["scorer-0"] * HEADROOM
        shard_rate = live["events_per_redis_cpu_s"] * HEADROOM
        for gpus in GPUS:
            rate = gpus * s["events_per_gpu_s"]
            live_queries = gpus * BATCH
            round_s = _interpolate(allocator, live_queries)
            rows.append({
                "search": s["search"], "gpus": gpus, "events_per_s": round(rate),
                "coordinators": math.ceil(rate / coord_rate), "scorers": math.ceil(rate / scorer_rate),
                "redis_shards": math.ceil(rate / shard_rate), "partitions": 4 * math.ceil(rate / shard_rate),
                "live_queries": live_queries, "allocator_round_s": round(round_s, 4),
                "allocators": 1,
            })  # fmt: skip
    return rows


def _interpolate(allocator: dict[str, Any], queries: int) -> float:
    """The allocator's changed-shares round at `queries`, linear in the measured points (and
    past the last one)."""
    points = sorted((int(n), v["changed_round_s"]) for n, v in allocator.items())
    (n0, t0), (n1, t1) = points[-2], points[-1]
    for (a, ta), (b, tb) in zip(points, points[1:], strict=False):
        if queries <= b:
            (n0, t0), (n1, t1) = (a, ta), (b, tb)
            break
    return max(0.0, t0 + (t1 - t0) * (queries - n0) / (n1 - n0))


def main(argv: list[str] | None = None) -> int:
    about = (__doc__ or "").split("\n")[0]
    parser = argparse.ArgumentParser(prog="python -m spex.bench.capacity", description=about)
    parser.add_argument("--json", default="results/capacity.json", help="results file")
    parser.add_argument("--questions", type=int, default=32, help="questions of each live run")
    args = parser.parse_args(argv)
    allocator = allocator_rounds()
    durable = durable_publish_ms()
    searches = [per_gpu(a, t, args.questions) for a, t in SEARCHES]
    table = capacity_table(searches, allocator)
    out = {
        "searches": searches, "allocator": allocator, "durable_publish_ms": durable, "headroom": HEADROOM,
        "table": table,
    }  # fmt: skip
    write_json(out, args.json)
    for row in table:
        print(row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
