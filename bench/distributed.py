"""`spex bench --distributed`: the virtual-time workload through the real services, side by side
with the virtual-time prediction for the same seeds, plus the runtime's own overheads (bus hop
latency, coordinator events per second)."""

from __future__ import annotations

import asyncio
import math
import os
import socket
import time
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import numpy as np
import redis.asyncio as aioredis
from rich.console import Console
from rich.table import Table

from spex.bench.results import summarize
from spex.bench.vtime import BenchConfig, run_bench
from spex.proto import ScoreResult
from spex.proto.names import SINGLE, Partitions, query_inbox
from spex.services.launcher import up
from spex.shared.runtime.bus import Bus
from spex.shared.runtime.client import IngressClient
from spex.shared.runtime.connect import redis_client
from spex.shared.runtime.redis_server import RedisServer
from spex.shared.runtime.settings import Settings
from spex.shared.sim.workload import SyntheticQuestion, SyntheticWorkload, WorkloadKnobs

__all__ = ["choose_time_scale", "drive", "live_coordinator", "run_distributed"]


async def drive(live: Settings, cfg: BenchConfig, mode: str) -> dict[str, Any]:
    """Keep `batch_size` questions in flight until all are answered (`live`: the settings
    `up` yields, with the Redis URL and password)."""
    client = IngressClient(redis_client(live), partitions=Partitions(live.partitions))
    workload = SyntheticWorkload(WorkloadKnobs(), cfg.seed)
    synthetic = [workload.query(cfg.first_question + i) for i in range(cfg.questions)]
    sem = asyncio.Semaphore(cfg.batch_size)
    answers: dict[str, Any] = {}
    latencies: list[float] = []

    async def one(question: SyntheticQuestion) -> None:
        async with sem:
            t0 = time.monotonic()
            qid = await client.submit(
                question.text,
                query_id=question.query_id,
                algorithm=cfg.algorithm,
                target=cfg.target,
                seed=cfg.seed,
                mode=mode,
                prompt_tokens=question.prompt_tokens,
            )
            answers[qid] = await client.result(qid, timeout_s=600)
            latencies.append(time.monotonic() - t0)

    start = time.monotonic()
    await asyncio.gather(*(one(q) for q in synthetic))
    wall = time.monotonic() - start
    await client.aclose()
    return {"answers": answers, "wall_s": wall, "latencies_s": latencies}


async def bus_hop_latency(url: str, n: int = 500) -> tuple[float, float]:
    """p50/p99 seconds from XADD to delivery through a blocked XREADGROUP, on loopback."""
    stream, group = query_inbox("hop", SINGLE), "hop"  # a single Redis at `url`
    producer = Bus(aioredis.Redis.from_url(url), "producer", partitions=SINGLE)
    consumer = Bus(aioredis.Redis.from_url(url), "consumer", partitions=SINGLE)
    await consumer.ensure_group(stream, group)
    hops: list[float] = []
    for i in range(n):
        reader = asyncio.create_task(consumer.read([stream], group, count=1, block_ms=1000))
        await asyncio.sleep(0.0005)  # let the reader block first
        t0 = time.perf_counter()
        await producer.publish(
            stream, ScoreResult(msg_id=f"hop{i}", query_id="hop", job_id="j", node_id="n", reward=0)
        )
        (d,) = await reader
        hops.append(time.perf_counter() - t0)
        await consumer.ack(d, group)
    await producer.r.aclose()
    await consumer.r.aclose()
    return float(np.percentile(hops, 50)), float(np.percentile(hops, 99))


async def coordinator_events_per_s(live: Settings, cfg: BenchConfig) -> tuple[float, int]:
    """Events one coordinator process handles per second: replay every finished query's inbox
    (the takeover path) into a fresh coordinator, which re-runs each search and re-dispatches
    its jobs (dropped as duplicates), Redis round trips included."""
    from spex.proto import SubmitQuestionRequest, decode
    from spex.proto.names import query_lease, query_request, reply_key
    from spex.services.coordinator import Coordinator

    client, parts = redis_client(live), Partitions(live.partitions)
    coord = Coordinator(client, replace(live, consumer="replayer"))
    requests = []
    async for key in client.scan_iter(match=query_request.glob(parts)):
        blob = cast(bytes, await client.get(key))  # found by the scan just now
        req = decode(key.decode(), blob)
        assert isinstance(req, SubmitQuestionRequest)
        requests.append(req)
        await client.delete(reply_key(req.query_id, parts), query_lease(req.query_id, parts))
    start = time.perf_counter()
    for req in requests:
        await coord.adopter.adopt(req)
    elapsed = time.perf_counter() - start
    await client.aclose()
    return coord.driver.events / elapsed, coord.driver.events


PILOT_SCALE = 0.002  # wall s per simulated s of the pilot: Python overhead dominates it
OVERHEAD_BOUND = 0.10  # the chosen scale keeps overhead under this share of simulated time


def choose_time_scale(cfg: BenchConfig, console: Console | None = None) -> dict[str, float]:
    """The time scale at which the services' own overhead stays under OVERHEAD_BOUND of the
    simulated time, by measurement: run SPEX (the busier side) at PILOT_SCALE, where the wall
    time is nearly all overhead, take overhead = wall − PILOT_SCALE × predicted makespan, and
    pick the scale that makes it OVERHEAD_BOUND of the simulated time (rounded up)."""
    predicted = run_bench(replace(cfg, mode="spex")).makespan_s
    with up(Settings(time_scale=PILOT_SCALE), generators=1, console=console) as live:
        wall = asyncio.run(drive(live, cfg, "spex"))["wall_s"]
    overhead = max(0.0, wall - PILOT_SCALE * predicted)
    need = max(overhead / (OVERHEAD_BOUND * predicted), 0.005)
    step = 10.0 ** math.floor(math.log10(need))
    scale = round(math.ceil(need / step) * step, 6)  # one significant digit, rounded up
    return {"time_scale": scale, "pilot_wall_s": wall, "pilot_overhead_s": overhead, "predicted_s": predicted}


def live_coordinator(cfg: BenchConfig, time_scale: float = 0.0005, generators: int = 2) -> dict[str, Any]:
    """Events one coordinator process handles while answering (not replaying): the services
    at a time scale where the simulated GPU is nearly instant, `cfg`'s questions with SPEX,
    the coordinator's own count of inbox events (its /metrics) over its CPU seconds; and the
    CPU seconds every other process (and Redis, by its INFO) spent on the same run."""
    port = _free_port()
    with up(Settings(time_scale=time_scale, metrics_port=port), generators=generators) as live:
        pids = {name: _pid_of(name, port + i) for i, name in enumerate(_services(generators))}
        cpu0 = {name: _cpu_s(pid) for name, pid in pids.items()}
        redis0, events0 = _redis_cpu_s(live), _events(port)
        t0 = time.monotonic()
        run = asyncio.run(drive(live, cfg, "spex"))
        wall = time.monotonic() - t0
        cpu = {name: _cpu_s(pid) - cpu0[name] for name, pid in pids.items()}
        redis_cpu, events = _redis_cpu_s(live) - redis0, _events(port) - events0
    coord = cpu["coord-0"]
    return {
        "events": events,
        "coordinator_cpu_s": coord,
        "wall_s": wall,
        "events_per_cpu_s": events / coord if coord else 0.0,
        "events_per_wall_s": events / wall if wall else 0.0,
        "questions": float(len(run["answers"])),
        "cpu_s": cpu,
        "redis_cpu_s": redis_cpu,
        "events_per_redis_cpu_s": events / redis_cpu if redis_cpu else 0.0,
    }


def _services(generators: int) -> list[str]:
    """The consumer names `up` gives its services, in the order it numbers their metrics ports."""
    from spex.services.launcher import service_names

    return service_names(generators, 1)


def _redis_cpu_s(live: Settings) -> float:
    """The CPU seconds Redis has spent (user + system), by its own INFO."""
    import redis

    with redis.Redis.from_url(live.redis_url, password=live.password() or None) as client:
        info: Any = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pid_of(consumer: str, metrics_port: int) -> int:
    """The pid of the service process this `spex up` started as `consumer`, told apart from any
    other stack's by its metrics port (Linux /proc)."""
    want = {f"SPEX_CONSUMER={consumer}".encode(), f"SPEX_METRICS_PORT={metrics_port}".encode()}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            env = set((proc / "environ").read_bytes().split(b"\0"))
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if want <= env and b"spex.services" in cmdline:
            return int(proc.name)
    raise RuntimeError(f"no process for {consumer} with metrics port {metrics_port}")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _events(port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return sum(
        float(line.rpartition(" ")[2])
        for line in text.splitlines()
        if line.startswith("spex_messages_total{") and 'service="coordinator"' in line
    )


def run_distributed(cfg: BenchConfig, time_scale: float | None, console: Console) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if time_scale is None:
        out["pilot"] = choose_time_scale(cfg, console)
        time_scale = out["pilot"]["time_scale"]
        console.print(
            f"time scale {time_scale} (pilot: {out['pilot']['pilot_overhead_s']:.1f} s of overhead "
            f"for {out['pilot']['predicted_s']:.0f} simulated s)"
        )
    settings = Settings(time_scale=time_scale)
    out["time_scale"] = time_scale
    for mode in ("baseline", "spex"):
        predicted = summarize(run_bench(replace(cfg, mode=mode)))
        with up(settings, generators=1, console=console) as live:  # a service restarted is said
            run = asyncio.run(drive(live, cfg, mode))
            if mode == "spex":
                out["coordinator_events_per_s"], out["replayed_events"] = asyncio.run(
                    coordinator_events_per_s(live, cfg)
                )
        simulated_s = run["wall_s"] / time_scale
        answers = run["answers"]
        expected = predicted.answers
        same = all(a is not None and a.answer == expected[q] for q, a in answers.items())
        out[mode] = {
            "throughput_qpm": cfg.questions / simulated_s * 60,
            "throughput_qpm_predicted": predicted.throughput_qpm,
            "latency_p50_s": float(np.percentile(run["latencies_s"], 50)) / time_scale,
            "latency_p50_s_predicted": predicted.latency_p50_s,
            "same_answers": same,
            "trees_digest_equal": _digests(answers) == _vt_digests(cfg, mode),
        }
    out["speedup"] = out["spex"]["throughput_qpm"] / out["baseline"]["throughput_qpm"]
    out["speedup_predicted"] = (
        out["spex"]["throughput_qpm_predicted"] / out["baseline"]["throughput_qpm_predicted"]
    )
    out["live_coordinator"] = live_coordinator(replace(cfg, batch_size=max(cfg.batch_size, 16)))
    with RedisServer() as server:
        out["bus_hop_p50_ms"], out["bus_hop_p99_ms"] = (
            1e3 * x for x in asyncio.run(bus_hop_latency(server.url))
        )
    table = Table("", "baseline", "SPEX", title=f"distributed vs virtual time: {cfg.algorithm}-{cfg.target}, "
                  f"B={cfg.batch_size}, {cfg.questions} questions")  # fmt: skip
    for key in ("throughput_qpm", "throughput_qpm_predicted", "latency_p50_s", "latency_p50_s_predicted"):
        table.add_row(key, f"{out['baseline'][key]:.2f}", f"{out['spex'][key]:.2f}")
    table.add_row(
        "answers and trees equal virtual time",
        *(str(out[m]["trees_digest_equal"]) for m in ("baseline", "spex")),
    )
    console.print(table)
    lc = out["live_coordinator"]
    console.print(
        f"speedup {out['speedup']:.2f}× distributed vs {out['speedup_predicted']:.2f}× predicted "
        f"(time scale {time_scale}); bus hop p50 {out['bus_hop_p50_ms']:.3f} ms, "
        f"p99 {out['bus_hop_p99_ms']:.3f} ms; coordinator while answering "
        f"{lc['events_per_cpu_s']:.0f} events per CPU-s ({lc['events']:.0f} events, "
        f"{lc['events_per_wall_s']:.0f}/s wall); replaying {out['coordinator_events_per_s']:.0f} events/s"
    )
    return out


def _digests(answers: dict[str, Any]) -> dict[str, str]:
    return {q: a.tree_digest for q, a in answers.items() if a is not None}


def _vt_digests(cfg: BenchConfig, mode: str) -> dict[str, str]:
    return {r.query_id: r.digest for r in run_bench(replace(cfg, mode=mode)).records}
