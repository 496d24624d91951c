"""`spex chaos`: the pipeline under a seeded random schedule of faults while questions arrive,
then the invariants — no question lost or failed, none answered twice, every tree equal to the
fault-free (virtual-time) run's; with Redis out of memory among the faults (`oom`), the
ingress refused new questions with 503 meanwhile (`oom.out_of_memory`).

The schedule is a function of the seed alone: the same seed gives the same faults at the same
offsets against the same services (which events they interrupt depends on timing, so a run
is reproducible in its faults, not in its interleavings).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import cast

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from spex.bench.chaos.oom import out_of_memory
from spex.bench.chaos.rig import Rig
from spex.bench.vtime import BenchConfig, run_bench
from spex.proto import AnswerResult, decode
from spex.proto.names import ANSWERS
from spex.shared.core.spec.early_stop import EarlyStop
from spex.shared.runtime.availability import refusal
from spex.shared.runtime.replies import Entry
from spex.shared.runtime.settings import Settings
from spex.shared.sim.workload import SyntheticWorkload, WorkloadKnobs

__all__ = ["ChaosReport", "Fault", "run_chaos", "schedule"]

FAULT_KINDS = {"kill": 0.3, "stall": 0.3, "partition": 0.3, "redis": 0.1}
# On a cluster: no per-service partition (no proxy); a primary killed or stalled instead.
CLUSTER_FAULT_KINDS = {"kill": 0.3, "stall": 0.3, "redis": 0.2, "stall_redis": 0.2}
# The supervisor's own SIGKILL and restart (every service stops with it): `--supervisor-faults`.
SUPERVISOR_WEIGHT = 0.05
# Redis out of memory for a while (`--oom-faults`): every write refused, then memory back.
OOM_WEIGHT = 0.1
SETTLE_S = 120.0  # after the last fault: how long every question may take to be answered


@dataclass(frozen=True)
class Fault:
    at_s: float
    kind: str  # kill | stall | partition | redis | stall_redis | supervisor | oom
    target: str  # a service name, or "redis"
    duration_s: float = 0.0  # how long a stall, partition, Redis outage or full Redis lasts

    def __str__(self) -> str:
        lasting = f" for {self.duration_s:.1f} s" if self.duration_s else ""
        return f"{self.at_s:7.1f} s  {self.kind:9} {self.target}{lasting}"


@dataclass
class ChaosReport:
    seed: int
    questions: int
    faults: list[Fault]
    lost: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # answered with an error (a platform fault's)
    # What the ingress answered while Redis was out of memory: a 503 that names memory, with
    # Retry-After (as it should), or anything else (wrongly).
    refused: list[str] = field(default_factory=list)
    refused_wrongly: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    differing: list[str] = field(default_factory=list)
    restarts: dict[str, int] = field(default_factory=dict)
    early_stopped: int = 0  # answers T3 stopped early (with --early-stop)
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not (self.lost or self.failed or self.refused_wrongly or self.duplicated or self.differing)

    def by_kind(self) -> dict[str, int]:
        return dict(Counter(f.kind for f in self.faults))


def schedule(
    seed: int,
    duration_s: float,
    names: list[str],
    faults_per_min: float,
    supervisor: bool = False,
    cluster: bool = False,
    oom: bool = False,
) -> list[Fault]:
    """Faults at exponential gaps over `duration_s`, kinds by FAULT_KINDS' weights (on a
    cluster CLUSTER_FAULT_KINDS'; and the supervisor's restart, with `supervisor`; and Redis
    out of memory, with `oom`)."""
    rng = random.Random(seed)
    out: list[Fault] = []
    t = 0.0
    base = CLUSTER_FAULT_KINDS if cluster else FAULT_KINDS
    kinds_weights = {**base}
    if supervisor:
        kinds_weights["supervisor"] = SUPERVISOR_WEIGHT
    if oom:
        kinds_weights["oom"] = OOM_WEIGHT
    kinds, weights = zip(*kinds_weights.items(), strict=True)
    while True:
        t += rng.expovariate(faults_per_min / 60.0)
        if t >= duration_s:
            return out
        kind = rng.choices(kinds, weights)[0]
        if kind == "redis":
            out.append(Fault(t, kind, "redis", rng.uniform(0.2, 1.5)))
        elif kind == "stall_redis":  # under the 1 s node timeout or well past it
            out.append(Fault(t, kind, "redis", rng.uniform(0.3, 3.0)))
        elif kind == "supervisor":
            out.append(Fault(t, kind, "supervisor", rng.uniform(0.2, 2.0)))
        elif kind == "oom":  # often past a lease (2 s) and a peer's reclaim (3 × 0.5 s)
            out.append(Fault(t, kind, "redis", rng.uniform(1.0, 5.0)))
        elif kind == "kill":
            out.append(Fault(t, kind, rng.choice(names)))
        else:  # long enough, often, to outlast a heartbeat (3 × 0.5 s) or a lease (2 s)
            out.append(Fault(t, kind, rng.choice(names), rng.uniform(0.5, 4.0)))


async def run_chaos(
    seed: int,
    duration_s: float,
    questions: int,
    algorithm: str = "rebase",
    target: int = 8,
    mode: str = "spex",
    faults_per_min: float = 6.0,
    time_scale: float = 0.01,
    early_stop: bool = False,
    supervisor_faults: bool = False,
    say=print,  # noqa: ANN001 - a print-like callable
    cluster: bool = False,
    oom_faults: bool = False,
) -> ChaosReport:
    if oom_faults and cluster:
        raise ValueError("--oom-faults: on one Redis only, not with --cluster")
    settings = Settings(time_scale=time_scale, heartbeat_s=0.5, lease_s=2.0, block_ms=100)
    counts = {"ingress": 1} if oom_faults else None  # the out-of-memory fault asks it over HTTP
    rig = Rig(settings, counts, say=lambda msg: say(f"  supervisor: {msg}"), cluster=cluster)
    started = time.monotonic()
    rig.start()
    try:
        await asyncio.to_thread(rig.wait_started)
        faults = schedule(seed, duration_s, rig.names, faults_per_min, supervisor_faults, cluster, oom_faults)
        report = ChaosReport(seed, questions, faults)
        workload = SyntheticWorkload(WorkloadKnobs(), seed)
        asked = [workload.query(i) for i in range(questions)]
        t0 = time.monotonic()
        submitter = asyncio.create_task(
            _submit(rig, asked, algorithm, target, mode, seed, early_stop, 0.8 * duration_s, t0)
        )
        await _inject(rig, faults, t0, say, report)
        qids = await submitter
        await asyncio.to_thread(rig.heal_all)
        say(f"faults done after {time.monotonic() - t0:.0f} s; waiting for every answer")
        answers = await _answers(rig, qids)
        expected = _expected(algorithm, target, questions, mode, seed, early_stop)
        report.lost = [q for q in qids if answers.get(q) is None]
        report.failed = [q for q, a in answers.items() if a is not None and a.error]
        report.differing = [
            q
            for q, a in answers.items()
            if a is not None and (a.answer, a.tree_digest, a.early_stopped) != expected[q]
        ]
        report.early_stopped = sum(1 for a in answers.values() if a is not None and a.early_stopped)
        report.duplicated = [q for q, n in (await _answer_counts(rig)).items() if n > 1]
        report.restarts = {n: c.restarts for n, c in rig.supervisor.children.items()}
        report.wall_s = time.monotonic() - started
        return report
    finally:
        await asyncio.to_thread(rig.stop)


async def _submit(
    rig: Rig,
    asked: list,
    algorithm: str,
    target: int,
    mode: str,
    seed: int,
    early_stop: bool,
    spread_s: float,
    t0: float,
) -> list[str]:
    """Submit every question at an even pace over `spread_s`, retrying through outages (a
    retry is idempotent: same query id, same client key)."""
    assert rig.client is not None
    qids = []
    for i, q in enumerate(asked):
        await asyncio.sleep(max(0.0, t0 + i * spread_s / len(asked) - time.monotonic()))
        while True:
            try:
                qids.append(
                    await rig.client.submit(
                        q.text,
                        query_id=q.query_id,
                        algorithm=algorithm,
                        target=target,
                        seed=seed,
                        mode=mode,
                        prompt_tokens=q.prompt_tokens,
                        early_stop=early_stop,
                    )  # fmt: skip
                )
                break
            except (RedisConnectionError, RedisTimeoutError, RedisClusterException):  # a failover's too
                await asyncio.sleep(0.2)
            except ResponseError as exc:  # Redis refusing writes (out of memory): not kept, retried
                if refusal(exc) is None:
                    raise
                await asyncio.sleep(0.2)
    return qids


async def _inject(rig: Rig, faults: list[Fault], t0: float, say, report: ChaosReport) -> None:  # noqa: ANN001
    undo: list[asyncio.Task[None]] = []
    for fault in faults:
        await asyncio.sleep(max(0.0, t0 + fault.at_s - time.monotonic()))
        say(f"  fault {fault}")
        if fault.kind == "redis":
            await asyncio.to_thread(rig.restart_redis, fault.duration_s)
        elif fault.kind == "stall_redis":
            await asyncio.to_thread(rig.stall_redis, fault.duration_s)
        elif fault.kind == "supervisor":
            await asyncio.to_thread(rig.restart_supervisor, fault.duration_s)
        elif fault.kind == "oom":
            full = out_of_memory(rig, fault.duration_s, report.refused, report.refused_wrongly)
            undo.append(asyncio.create_task(full))
        elif fault.kind == "kill":
            await asyncio.to_thread(rig.kill, fault.target)
        elif fault.kind == "stall":
            rig.stall(fault.target)
            undo.append(asyncio.create_task(_later(fault.duration_s, rig.resume, fault.target)))
        else:
            await asyncio.to_thread(rig.partition, fault.target)
            undo.append(asyncio.create_task(_later(fault.duration_s, rig.heal, fault.target)))
    await asyncio.gather(*undo)


async def _later(delay_s: float, action, name: str) -> None:  # noqa: ANN001
    await asyncio.sleep(delay_s)
    await asyncio.to_thread(action, name)


async def _answers(rig: Rig, qids: list[str]) -> dict[str, AnswerResult | None]:
    assert rig.client is not None
    deadline = time.monotonic() + SETTLE_S
    out: dict[str, AnswerResult | None] = {}
    for qid in qids:
        out[qid] = await rig.client.result(qid, timeout_s=max(0.1, deadline - time.monotonic()))
    return out


async def _answer_counts(rig: Rig) -> Counter[str]:
    assert rig.client is not None
    counts: Counter[str] = Counter()
    entries: list[Entry] = []
    for part in rig.client.partitions.spread(ANSWERS):
        entries += cast(list[Entry], await rig.client.r.xrange(part))
    for _, fields in entries:
        answer = decode(ANSWERS, fields[b"e"])
        counts[answer.query_id] += 1
    return counts


def _expected(
    algorithm: str, target: int, questions: int, mode: str, seed: int, early_stop: bool
) -> dict[str, tuple]:
    """The fault-free trees: the virtual-time run of the same questions and seeds."""
    config = BenchConfig(
        algorithm=algorithm, target=target, questions=questions, batch_size=questions, mode=mode, seed=seed,
        early_stop=EarlyStop(enabled=early_stop),
    )  # fmt: skip
    return {r.query_id: (r.answer, r.digest, r.early_stopped) for r in run_bench(config).records}
