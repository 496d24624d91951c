"""`python -m spex.bench.soak`: the pipeline under a steady load for a long time, then idle
past the answers' TTL: does what it holds come back?

It starts every service (`spex up`'s launcher, an embedded Redis, a short result TTL), submits
questions over HTTP at a steady rate for `--minutes`, then waits out the TTL. Every
`--every` seconds it samples Redis (keys, used memory, the length of every stream) and each
service's resident memory, and it follows the `answers` stream to count what was answered.
The report compares the last sample (idle, past the TTL) with the first after a warm-up (idle
too: one wave of questions answered and expired, so imports and caches are loaded), and each
stream's longest length with its stated bound (docs/guides/operations.md, "What Redis holds").
`--mix` draws each question's search from `MIX` in turn (a mixed load) instead of one; the
coordinator's resident memory is held to `COORDINATOR_TOLERANCE` (its figures: before any
question, after the warm-up, its peak under load, and at the end).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypedDict, cast

import aiohttp
import redis.asyncio as aioredis

from spex.proto import decode
from spex.proto.names import ANSWERS
from spex.services.launcher import up
from spex.shared.runtime.connect import redis_client
from spex.shared.runtime.redis_server import free_port
from spex.shared.runtime.replies import StreamRead
from spex.shared.runtime.settings import Settings

__all__ = ["main", "run_soak"]

TOLERANCE = 0.10  # "back within 10% of the start"
COORDINATOR_TOLERANCE = 0.05  # the coordinator's resident memory: back within 5%
# The searches `--mix` draws from in turn: wide and narrow, tree and sampling searches.
MIX = (("rebase", 16), ("rstar", 10), ("ets", 8), ("rest", 5), ("rebase", 64), ("rebase", 4))
INBOXES = "{q:<id>}:in (longest)"


class Sample(TypedDict):
    """Redis and the services at one moment of the run."""

    t_s: float
    keys: int
    used_memory_mib: float
    streams: dict[str, int]  # each stream's length; the queries' inboxes as their longest
    inboxes: int
    rss_mib: dict[str, float]  # each service's resident memory, by consumer name
    submitted: int
    answered: int


class PhasedSample(Sample):
    phase: str  # cold, warm-up, warm-up expiring, load, expiring


class Run(TypedDict):
    samples: list[PhasedSample]
    start: PhasedSample  # after the warm-up's questions expired
    end: PhasedSample
    statuses: dict[int, int]  # the submissions' HTTP statuses, counted
    submitted: int
    answered: int


class CoordinatorRss(TypedDict):
    cold: float | None
    start: float | None
    peak: float | None
    end: float | None
    back: bool


class Verdict(TypedDict):
    """Each figure at the start and the end, and whether the end is back within TOLERANCE."""

    keys: tuple[int, int, bool]
    used_memory_mib: tuple[float, float, bool]
    rss_mib: dict[str, tuple[float | None, float | None, bool]]
    coordinator_rss_mib: CoordinatorRss
    longest_stream: dict[str, int]
    streams_at_end: dict[str, int]
    lost: int  # accepted, never answered


class Report(TypedDict):
    minutes: float
    rate_per_s: float
    ttl_s: int
    searches: list[str]
    time_scale: float
    wall_s: int
    submitted: int
    answered: int
    http_statuses: dict[int, int]
    verdict: Verdict
    samples: list[PhasedSample]


def service_pids() -> dict[str, int]:
    """This process's service children (`python -m spex.services.*`), by consumer name."""
    out: dict[str, int] = {}
    for task in Path(f"/proc/{os.getpid()}/task").glob("*"):
        for pid in (task / "children").read_text().split():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
                env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"spex.services." in cmd:
                name = next((e[14:].decode() for e in env if e.startswith(b"SPEX_CONSUMER=")), pid)
                out[str(name)] = int(pid)
    return out


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def sample(r: aioredis.Redis, t0: float, answered: int, submitted: int) -> Sample:
    streams: dict[str, int] = {}
    inboxes: list[int] = []  # the queries' own inboxes: how many, and the longest
    async for key in r.scan_iter(count=1000):
        if await r.type(key) == b"stream":
            name, length = key.decode(), int(await r.xlen(key))
            if name.startswith("{q:"):
                inboxes.append(length)
            else:
                streams[name] = length
    streams[INBOXES] = max(inboxes, default=0)
    memory = await r.info("memory")
    return {
        "t_s": round(time.monotonic() - t0, 1),
        "keys": int(await r.dbsize()),
        "used_memory_mib": round(memory["used_memory"] / 2**20, 2),
        "streams": streams,
        "inboxes": len(inboxes),
        "rss_mib": {name: round(rss_mib(pid), 1) for name, pid in sorted(service_pids().items())},
        "submitted": submitted,
        "answered": answered,
    }


class _Follower:
    """Counts the answers on the `answers` stream (each query once)."""

    def __init__(self, r: aioredis.Redis) -> None:
        self.r = r
        self.last: str | bytes = "$"
        self.seen: set[str] = set()

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            replies = cast(StreamRead, await self.r.xread({ANSWERS: self.last}, count=500, block=500))
            for _, entries in replies or []:
                for entry_id, fields in entries:
                    self.last = entry_id
                    self.seen.add(decode(ANSWERS, fields[b"e"]).query_id)


async def _submit(session: aiohttp.ClientSession, url: str, i: int, args: argparse.Namespace) -> int:
    algorithm, target = MIX[i % len(MIX)] if args.mix else (args.algorithm, args.target)
    body = {"question": f"soak question {i}: {i} + {i}?", "algorithm": algorithm, "target": target, "seed": i}
    async with session.post(url, json=body) as resp:
        await resp.read()
        return resp.status


async def drive(settings: Settings, args: argparse.Namespace, say: Callable[[str], object]) -> Run:
    r = redis_client(settings)
    url = f"http://{settings.http_host}:{settings.http_port}/v1/questions"
    follower, stop = _Follower(r), asyncio.Event()
    following = asyncio.create_task(follower.run(stop))
    samples: list[PhasedSample] = []
    statuses: dict[int, int] = {}
    t0 = time.monotonic()
    async with aiohttp.ClientSession() as session:

        async def wave(n: int, first: int, rate: float, phase: str) -> None:
            next_sample = time.monotonic()
            for i in range(first, first + n):
                await asyncio.sleep(max(0.0, t0_wave + (i - first) / rate - time.monotonic()))
                status = await _submit(session, url, i, args)
                statuses[status] = statuses.get(status, 0) + 1
                if time.monotonic() >= next_sample:
                    samples.append({**await sample(r, t0, len(follower.seen), i + 1), "phase": phase})
                    done = len(follower.seen)
                    say(f"{phase}: {samples[-1]['t_s']:.0f} s, {i + 1} submitted, {done} answered")
                    next_sample += args.every

        async def idle(seconds: float, phase: str) -> None:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                await asyncio.sleep(min(args.every, max(0.0, end - time.monotonic())))
                samples.append(
                    {**await sample(r, t0, len(follower.seen), sum(statuses.values())), "phase": phase}
                )
                say(f"{phase}: {samples[-1]['t_s']:.0f} s, {samples[-1]['keys']} keys")

        samples.append({**await sample(r, t0, 0, 0), "phase": "cold"})  # before any question
        warm = int(args.rate * 30)
        t0_wave = time.monotonic()
        await wave(warm, 0, args.rate, "warm-up")
        await idle(settings.result_ttl_s + 2 * args.every, "warm-up expiring")
        start = samples[-1]
        total = int(args.rate * args.minutes * 60)
        t0_wave = time.monotonic()
        await wave(total, warm, args.rate, "load")
        await idle(settings.result_ttl_s + 3 * args.every, "expiring")
    stop.set()
    await following
    await r.aclose()
    return {"samples": samples, "start": start, "end": samples[-1], "statuses": statuses,
            "submitted": warm + total, "answered": len(follower.seen)}  # fmt: skip


def _verdict(run: Run) -> Verdict:
    start, end = run["start"], run["end"]

    def back(a: float, b: float) -> bool:
        return b <= a * (1 + TOLERANCE) + 1e-9

    rss = {n: (start["rss_mib"].get(n), end["rss_mib"].get(n)) for n in end["rss_mib"]}
    longest: dict[str, int] = {}
    for s in run["samples"]:
        for name, length in s["streams"].items():
            longest[name] = max(longest.get(name, 0), length)
    return {
        "keys": (start["keys"], end["keys"], back(start["keys"], end["keys"])),
        "used_memory_mib": (
            start["used_memory_mib"],
            end["used_memory_mib"],
            back(start["used_memory_mib"], end["used_memory_mib"]),
        ),  # fmt: skip
        "rss_mib": {n: (a, b, a is not None and b is not None and back(a, b)) for n, (a, b) in rss.items()},
        "coordinator_rss_mib": _coordinator(run),
        "longest_stream": longest,
        "streams_at_end": end["streams"],
        "lost": run["statuses"].get(202, 0) - run["answered"],  # accepted, never answered
    }


def _coordinator(run: Run) -> CoordinatorRss:
    """coord-0's resident memory: before any question, after the warm-up, its peak under load
    and at the end, and whether the end is within COORDINATOR_TOLERANCE of the warm-up's."""
    rss = [s["rss_mib"].get("coord-0") for s in run["samples"]]
    load = [r for s, r in zip(run["samples"], rss, strict=True) if s["phase"] == "load" and r is not None]
    start, end = run["start"]["rss_mib"].get("coord-0"), run["end"]["rss_mib"].get("coord-0")
    held = start is not None and end is not None and end <= start * (1 + COORDINATOR_TOLERANCE)
    return {"cold": rss[0], "start": start, "peak": max(load, default=None), "end": end, "back": held}


def run_soak(args: argparse.Namespace, say: Callable[[str], object] = print) -> Report:
    settings = Settings(http_port=free_port(), result_ttl_s=args.ttl, time_scale=args.time_scale)
    data = Path(args.data_dir) if args.data_dir else None
    started = time.monotonic()
    with up(settings, generators=args.generators, data_dir=data) as live:
        run = asyncio.run(drive(live, args, say))
    verdict = _verdict(run)
    searches = MIX if args.mix else ((args.algorithm, args.target),)
    report: Report = {
        "minutes": args.minutes, "rate_per_s": args.rate, "ttl_s": args.ttl,
        "searches": [f"{a}-{t}" for a, t in searches], "time_scale": args.time_scale,
        "wall_s": round(time.monotonic() - started),
        "submitted": run["submitted"], "answered": run["answered"], "http_statuses": run["statuses"],
        "verdict": verdict, "samples": run["samples"],
    }  # fmt: skip
    return report


def _plot(report: Report, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = report["samples"]
    t = [s["t_s"] / 60 for s in samples]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    axes[0].plot(t, [s["keys"] for s in samples])
    axes[0].set_title("Redis keys")
    axes[1].plot(t, [s["used_memory_mib"] for s in samples])
    axes[1].set_title("Redis used memory (MiB)")
    for name in samples[-1]["rss_mib"]:
        axes[2].plot(t, [s["rss_mib"].get(name) for s in samples], label=name)
    axes[2].set_title("service RSS (MiB)")
    axes[2].legend(fontsize=7)
    for ax in axes:
        ax.set_xlabel("minutes")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m spex.bench.soak", description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=20.0, help="minutes of steady load")
    p.add_argument("--rate", type=float, default=2.0, help="questions a second")
    p.add_argument("--ttl", type=int, default=120, help="SPEX_RESULT_TTL_S for the run")
    p.add_argument("--every", type=float, default=30.0, help="seconds between samples")
    p.add_argument("--algorithm", default="rebase")
    p.add_argument("--target", type=int, default=4)
    p.add_argument("--mix", action="store_true", help="each question's search drawn from MIX in turn")
    p.add_argument("--time-scale", type=float, default=0.01)
    p.add_argument("--generators", type=int, default=1)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--json", default="soak.json")
    p.add_argument("--plot", default=None)
    args = p.parse_args(argv)
    if args.minutes <= 0 or args.rate <= 0 or args.ttl < 1 or args.every <= 0:
        p.error("--minutes, --rate, --ttl and --every: must be positive")
    report = run_soak(args, say=lambda m: print(m, flush=True))
    Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    if args.plot:
        _plot(report, args.plot)
    v = report["verdict"]
    print(
        json.dumps(
            {
                "keys": v["keys"],
                "used_memory_mib": v["used_memory_mib"],
                "rss_mib": v["rss_mib"],
                "coordinator_rss_mib": v["coordinator_rss_mib"],
                "lost": v["lost"],
            },
            indent=1,
        )
    )
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
