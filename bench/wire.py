"""Step texts on the wire: inline in every job, or stored once in Redis and referenced?

Measures, on an embedded Redis over loopback: the encoded size of a generation job carrying
its path's step texts inline, by depth; the bus hop (XADD → blocked XREADGROUP) for such a
job; and what references would add per job instead — one MGET of the path's texts (and a SET
per generated step, not counted here). Writes a JSON file.

    python -m spex.bench.wire [--json docs/wire.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import redis.asyncio as aioredis

from spex.proto import GenerateRequest, encode
from spex.proto.names import SINGLE, gen_jobs
from spex.shared.runtime.bus import Bus
from spex.shared.runtime.redis_server import RedisServer

__all__ = ["measure"]

STEP_CHARS = 1000  # ~256 tokens of English/LaTeX: the default step limit
DEPTHS = (1, 5, 10, 25, 50)
ROUNDS = 300


def job(depth: int, i: int) -> GenerateRequest:
    step = ("x = \\frac{a}{b} + " * 64)[:STEP_CHARS]
    return GenerateRequest(
        msg_id=f"m{depth}-{i}",
        query_id="q",
        job_id=f"j{i}",
        node_id="n",
        parent_id="p",
        child_index=0,
        action="expand",
        prompt_node_ids=["r"] * (depth + 1),
        prompt_tokens=[256] * (depth + 1),
        seed=1,
        content="real",
        question="What is the value of $x$?" * 4,
        steps=[step] * depth,
    )


async def _hop(bus: Bus, reader: Bus, depth: int) -> float:
    stream, group = gen_jobs(f"wire{depth}"), "wire"
    await reader.ensure_group(stream, group)
    hops = []
    for i in range(ROUNDS):
        task = asyncio.create_task(reader.read([stream], group, count=1, block_ms=1000))
        await asyncio.sleep(0.0005)
        t0 = time.perf_counter()
        await bus.publish(stream, job(depth, i))
        (d,) = await task
        hops.append(time.perf_counter() - t0)
        await reader.ack(d, group)
    return float(np.percentile(hops, 50)) * 1e3


async def _mget(r: aioredis.Redis, depth: int) -> float:
    keys = [f"text:{i}" for i in range(depth)]
    await r.mset({k: "x" * STEP_CHARS for k in keys})
    times = []
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        await r.mget(keys)
        times.append(time.perf_counter() - t0)
    return float(np.percentile(times, 50)) * 1e3


async def _measure(url: str) -> dict[str, object]:
    r = aioredis.Redis.from_url(url)
    bus = Bus(aioredis.Redis.from_url(url), "w", partitions=SINGLE)  # a single Redis at `url`
    reader = Bus(aioredis.Redis.from_url(url), "r", partitions=SINGLE)
    rows = []
    small = await _hop(bus, reader, 0)
    for depth in DEPTHS:
        rows.append(
            {
                "depth": depth,
                "inline_bytes": len(encode(job(depth, 0))),
                "inline_hop_p50_ms": await _hop(bus, reader, depth),
                "reference_mget_p50_ms": await _mget(r, depth),
            }
        )
    for client in (r, bus.r, reader.r):
        await client.aclose()
    return {"step_chars": STEP_CHARS, "empty_path_hop_p50_ms": small, "rows": rows}


def measure() -> dict[str, Any]:
    with RedisServer() as server:
        return asyncio.run(_measure(server.url))


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m spex.bench.wire")
    p.add_argument("--json", default="docs/wire.json")
    out = measure()
    path = Path(p.parse_args().json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"empty path: hop {out['empty_path_hop_p50_ms']:.3f} ms")
    for row in out["rows"]:
        inline = f"inline {row['inline_bytes']:>7,} B, hop {row['inline_hop_p50_ms']:.3f} ms"
        refs = f"references: one MGET {row['reference_mget_p50_ms']:.3f} ms more per job"
        print(f"depth {row['depth']:>2}: {inline} | {refs}")


if __name__ == "__main__":
    main()
