"""`spex up` and `spex demo`: a real Redis (embedded by default) and every service as its own
process, with health checks and a clean shutdown on Ctrl-C."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, replace
from pathlib import Path

import redis.asyncio as aioredis
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from spex.shared.runtime.client import IngressClient
from spex.shared.runtime.redis_server import RedisServer, free_port
from spex.shared.runtime.settings import ENV, Settings
from spex.shared.sim.workload import SyntheticWorkload, WorkloadKnobs

__all__ = ["demo", "up"]


@contextlib.contextmanager
def up(
    settings: Settings,
    redis_url: str | None = None,
    generators: int = 1,
    coordinators: int = 1,
    console: Console | None = None,
) -> Iterator[Settings]:
    """Start Redis (unless `redis_url`) and the services; stop them all on exit."""
    server = None if redis_url else RedisServer().start()
    settings = replace(settings, redis_url=redis_url or server.url)  # type: ignore[union-attr]
    logs = tempfile.TemporaryDirectory(prefix="spex-up-")
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        names = [("coordinator", f"coord-{i}") for i in range(coordinators)]
        names += [("generator", f"gen-{i}") for i in range(generators)]
        names += [("scorer", "scorer-0"), ("allocator", "allocator-0"), ("ingress", "ingress-0")]
        for kind, name in names:
            env = dict(os.environ)
            for var, (field, _) in ENV.items():
                env[var] = str(asdict(settings)[field])
            env["SPEX_CONSUMER"] = name
            log = Path(logs.name, f"{name}.log").open("wb")  # noqa: SIM115 - closed with the directory
            procs[name] = subprocess.Popen(
                [sys.executable, "-m", f"spex.services.{kind}"], env=env, stderr=log
            )
        _wait_healthy(procs, Path(logs.name))
        if console:
            console.print(f"[bold]spex up[/]: Redis at {settings.redis_url}; services: {', '.join(procs)}")
            console.print(f"HTTP ingress: http://127.0.0.1:{settings.http_port}/v1/questions")
        yield settings
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        if server is not None:
            server.stop()
        logs.cleanup()


def _wait_healthy(procs: dict[str, subprocess.Popen[bytes]], logs: Path, timeout_s: float = 30.0) -> None:
    """Every service has logged `service_started` (and none has exited)."""
    deadline = time.monotonic() + timeout_s
    waiting = set(procs)
    while waiting and time.monotonic() < deadline:
        for name in list(waiting):
            if procs[name].poll() is not None:
                tail = (logs / f"{name}.log").read_text()[-400:]
                raise RuntimeError(f"service {name} exited at start: {tail}")
            if b"service_started" in (logs / f"{name}.log").read_bytes():
                waiting.discard(name)
        time.sleep(0.05)
    if waiting:
        raise RuntimeError(f"services not healthy after {timeout_s} s: {', '.join(sorted(waiting))}")


def serve_forever(settings: Settings, redis_url: str | None, generators: int, console: Console) -> int:
    stop = False

    def on_signal(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    with up(settings, redis_url, generators, console=console):
        console.print("running; Ctrl-C stops every service")
        while not stop:
            time.sleep(0.2)
    console.print("stopped")
    return 0


def demo(settings: Settings, questions: int, algorithm: str, target: int, console: Console) -> int:
    """Run a small question set through the pipeline, baseline then SPEX; print the answers,
    throughput and speedup (throughput in simulated GPU time, from wall time / time scale)."""
    workload = SyntheticWorkload(WorkloadKnobs(), 0)
    synthetic = [workload.query(i) for i in range(questions)]
    results = {}
    settings = replace(settings, http_port=free_port())
    for mode in ("baseline", "spex"):  # a fresh Redis and fresh services for each
        with up(settings, console=console) as live:
            results[mode] = asyncio.run(_run_mode(live, synthetic, algorithm, target, mode, console))
    base, spex = results["baseline"], results["spex"]
    table = Table(
        "question", "answer (baseline)", "answer (SPEX)", "same tree", title=f"{algorithm}-{target}"
    )
    for question in synthetic:
        a, b = base["answers"][question.query_id], spex["answers"][question.query_id]
        same = a is not None and b is not None and a.tree_digest == b.tree_digest
        table.add_row(
            question.query_id,
            str(a.answer if a else "—"),
            str(b.answer if b else "—"),
            "yes" if same else "no",
        )
    console.print(table)
    scale = settings.time_scale
    qpm = {m: questions / (r["wall_s"] / scale) * 60 for m, r in results.items()}
    console.print(
        f"throughput (simulated GPU time): baseline {qpm['baseline']:.2f} questions/min, "
        f"SPEX {qpm['spex']:.2f} questions/min — speedup {qpm['spex'] / qpm['baseline']:.2f}×"
    )
    return 0


async def _run_mode(
    settings: Settings, synthetic: list, algorithm: str, target: int, mode: str, console: Console
) -> dict:
    client = IngressClient(aioredis.Redis.from_url(settings.redis_url))
    start = time.monotonic()
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    answers = {}
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task(f"{mode} {algorithm}-{target}", total=len(synthetic))
        qids = [
            await client.submit(
                q.text,
                query_id=q.query_id,
                algorithm=algorithm,
                target=target,
                seed=0,
                mode=mode,
                prompt_tokens=q.prompt_tokens,
            )
            for q in synthetic
        ]
        for question, qid in zip(synthetic, qids, strict=True):
            answers[question.query_id] = await client.result(qid, timeout_s=300)
            progress.advance(task)
    await client.r.aclose()
    return {"answers": answers, "wall_s": time.monotonic() - start}
