"""The virtual-time loop: Q questions, B in flight, through the coordinator core, the simulated
generator engine and the simulated reward engine.

Discrete-event loop: advance every engine to the earliest next event, feed the completions
to their queries' machines in a fixed order, submit the commands they return at that same
instant (one handler per command type), re-divide the speculative budget (T2), and start a
new question whenever one finishes. Nothing reads the wall clock but the `wall_s` field, so
the same arguments give the same results.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from spex.bench.vtime.bookkeeping import EngineBook, GenJob, RequestId, ScoreJob
from spex.bench.vtime.config import BenchConfig
from spex.bench.vtime.content import make_content, make_engines
from spex.bench.vtime.metrics import CriticalPath, QueryRecord, RunMetrics, SpecTotals
from spex.proto.messages import PRIMARY
from spex.shared.core.commands import (
    CancelCommand,
    Command,
    FinishCommand,
    GenerateCommand,
    PromoteCommand,
    ScoreCommand,
)
from spex.shared.core.machine import QueryMachine
from spex.shared.core.spec.budget import Demand, allocate, even_split, hit_rate_estimate
from spex.shared.core.speculation import PredictorFactory, SpecPolicy, algorithm_predictor
from spex.shared.engine.api import Completion, Engine
from spex.shared.roofline.capacity import speculative_pool
from spex.shared.roofline.hardware import parse_profile
from spex.shared.sim.engine import SimEngine

__all__ = ["BenchResult", "run_bench"]


@dataclass
class BenchResult:
    config: BenchConfig
    records: list[QueryRecord]
    makespan_s: float
    wall_s: float
    gen: Engine
    prm: Engine | None
    tpots_s: list[float]  # primary jobs only
    level_batches: list[tuple[int, float, float]]  # (width, first-quarter batch, last-quarter batch)
    tokens_all: int  # every token the generator produced, cancelled jobs' partial output included
    spec_tokens: int  # tokens of speculative jobs (completed or cancelled)
    cancel_latencies_s: list[float]
    spec: SpecTotals
    critical_path: CriticalPath
    pool_peak: int  # the largest speculative pool T2 divided


class _Run:
    def __init__(
        self, cfg: BenchConfig, predictor: PredictorFactory, on_finish: Callable[[QueryMachine], None] | None
    ) -> None:
        cfg.validate()
        self.cfg = cfg
        self.config = cfg.search_config()
        self.policy = SpecPolicy(cfg.speculating, cfg.cache_nodes, cfg.max_amplification)
        self.predictor = predictor
        self.profile = parse_profile(cfg.profile)
        self.gen, self.prm = make_engines(cfg)
        self.gen.trace = [] if cfg.batch_size == 1 else None
        self.content = make_content(cfg, self.gen, self.prm)
        self.questions = self.content.questions
        self.by_id = {q.query_id: q for q in self.questions}
        self.machines: dict[str, QueryMachine] = {}
        self.next_question = 0
        self.on_finish = on_finish
        self.book = EngineBook()
        self.metrics = RunMetrics(trace_levels=self.gen.trace is not None)
        self._handlers: dict[type, Callable[[Any, str, float], int]] = {
            GenerateCommand: self._generate,
            ScoreCommand: self._score,
            CancelCommand: self._cancel,
            PromoteCommand: self._promote,
            FinishCommand: self._finish,
        }

    def run(self) -> BenchResult:
        wall0 = time.perf_counter()
        now = last = 0.0
        for _ in range(min(self.cfg.batch_size, self.cfg.questions)):
            self._start_query(now)
        self._rebudget(now)
        engines = [e for e in (self.gen, self.prm) if e is not None]
        while self.machines:
            times = [t for t in (e.next_event_s() for e in engines) if t is not None]
            if not times:
                raise RuntimeError("simulation stalled: queries are waiting but no engine has work")
            now = min(times)
            self.metrics.account(now, self.machines, self._queued)
            done: list[tuple[int, Completion]] = []
            for i, engine in enumerate(engines):
                done.extend((i, c) for c in engine.advance_to(now))
            done.sort(key=lambda item: (item[1].time_s, item[0], item[1].rid))
            for i, completion in done:
                # A real engine's step ends after it started (at `now`): what it finished is
                # known from its end on. (The simulator's steps end at `now` itself.)
                t = max(now, completion.time_s)
                last = max(last, t)
                if engines[i] is self.gen:
                    self._on_generated(completion, t)
                else:
                    self._on_scored(completion, t)
            self._rebudget(now)
        m = self.metrics
        return BenchResult(
            config=self.cfg,
            records=m.ordered(q.query_id for q in self.questions),
            makespan_s=max(now, last),
            wall_s=time.perf_counter() - wall0,
            gen=self.gen,
            prm=self.prm,
            tpots_s=m.tpots_s,
            level_batches=m.level_batches(self.gen.trace),
            tokens_all=m.tokens_all,
            spec_tokens=m.spec_tokens,
            cancel_latencies_s=m.cancel_latencies_s,
            spec=m.spec,
            critical_path=m.critical,
            pool_peak=m.pool_peak,
        )

    # ------------------------------------------------------------------ queries
    def _start_query(self, now: float) -> None:
        question = self.questions[self.next_question]
        self.next_question += 1
        machine = QueryMachine(
            question.query_id,
            question.prompt_tokens,
            self.config,
            self.cfg.seed,
            self.cfg.reward,
            speculation=self.policy,
            early_stop=self.cfg.early_stop,
            predictor=self.predictor,
        )
        self.machines[question.query_id] = machine
        self._execute(question.query_id, machine.start(now), now)

    def _queued(self, query_id: str, job_id: str) -> bool:
        return self.gen.is_waiting(str(RequestId("gen", query_id, job_id)))

    def _on_generated(self, c: Completion, now: float) -> None:
        job = self.book.pop_job(c.rid)
        self.metrics.generation_done(job, c)
        machine = self.machines.get(job.rid.query_id)
        if machine is None:
            return
        if c.reason == "abort":
            machine.on_cancelled(c.generated)
            return
        step = self.content.generated(self.by_id[job.rid.query_id], job.path, c)
        self.metrics.need_progressed(now)
        commands = machine.on_generated(
            job.job_id, job.node_id, step.text, step.tokens, step.finish_reason, step.mean_logprob, now
        )
        self._execute(job.rid.query_id, commands, now)

    def _on_scored(self, c: Completion, now: float) -> None:
        score = self.book.pop_score(c.rid)
        qid = score.rid.query_id
        machine = self.machines.get(qid)
        if machine is None:
            return
        reward = self.content.reward(self.by_id[qid], score.path, c)
        self._execute(qid, machine.on_scored(score.path[-1], reward, now), now)

    # ------------------------------------------------------------------ commands
    def _execute(self, query_id: str, commands: list[Command], now: float) -> None:
        primaries = sum(self._handlers[type(cmd)](cmd, query_id, now) for cmd in commands)
        self.metrics.need_issued(primaries, now)

    def _generate(self, cmd: GenerateCommand, query_id: str, now: float) -> int:
        """Submit a generation; returns 1 if it is a primary job (for the level batches)."""
        path = [n.id for n in cmd.node.path()]
        rid = RequestId("gen", query_id, cmd.job_id)
        primary = cmd.priority == PRIMARY
        self.book.add_job(GenJob(rid, cmd.node.id, path, primary, sum(t for _, t in cmd.prompt)))
        self.gen.submit(self.content.generate(self.by_id[query_id], cmd, str(rid)), now)
        return int(primary)

    def _score(self, cmd: ScoreCommand, query_id: str, now: float) -> int:
        if self.prm is None:
            raise RuntimeError("score command without a reward engine")
        rid = RequestId("score", query_id, cmd.node.id)
        if self.book.add_score(ScoreJob(rid, [n.id for n in cmd.node.path()])):
            self.prm.submit(self.content.score(self.by_id[query_id], cmd, str(rid)), now)
        return 0

    def _cancel(self, cmd: CancelCommand, query_id: str, now: float) -> int:
        rid = RequestId("gen", query_id, cmd.job_id)
        job = self.book.job(rid)
        if job is not None and job.cancelled_s is None:
            job.cancelled_s = now
            for c in self.gen.abort(str(rid), now):
                self._on_generated(c, now)
        return 0

    def _promote(self, cmd: PromoteCommand, query_id: str, now: float) -> int:
        rid = RequestId("gen", query_id, cmd.job_id)
        self.gen.promote(str(rid), now)
        job = self.book.job(rid)
        if job is not None:
            self.book.promote(job)
        return 0

    def _finish(self, cmd: FinishCommand, query_id: str, now: float) -> int:
        machine = self.machines.pop(query_id)
        correct = self.content.correct(machine.answer, self.by_id[query_id])
        self.metrics.query_done(machine, correct, now)
        if self.on_finish is not None:
            self.on_finish(machine)
        if self.next_question < len(self.questions):
            self._start_query(now)
        return 0

    # ------------------------------------------------------------------ T2
    def _pool(self) -> int:
        """Speculative jobs the generator can take now (see `speculative_pool`)."""
        book = self.book
        k_total = self.cfg.k_total
        if k_total is None and not isinstance(self.gen, SimEngine):
            k_total = self.cfg.max_running  # no roofline model of a real engine: its batch is the pool
        if k_total is not None:
            return max(0, k_total - book.primary_in_flight)
        contexts = [m.context_tokens for m in self.machines.values()]
        return speculative_pool(
            self.profile,
            book.primary_in_flight,
            book.primary_ctx,
            sum(contexts) / len(contexts),
            self.cfg.tpot_slack,
            self.gen.held_tokens,
            book.speculative_jobs,
            self.config.max_step_tokens,
        )

    def _rebudget(self, now: float) -> None:
        """T2: divide the speculative pool among the queries."""
        if not self.cfg.speculating or not self.machines:
            return
        pool = self._pool()
        self.metrics.pool_peak = max(self.metrics.pool_peak, pool)
        kv = self.profile.model.kv_bytes_per_token
        demands = [
            Demand(
                qid,
                m.spec_candidates(pool),
                hit_rate_estimate(m.stats.spec_adopted, m.stats.spec_issued),
                m.context_tokens * kv,
            )
            for qid, m in self.machines.items()
        ]
        if self.cfg.t2:
            shares = allocate(demands, pool, self.profile.model.resident_bytes, self.cfg.temperature)
        else:
            shares = even_split(demands, pool)
        for qid, machine in list(self.machines.items()):
            commands = machine.on_budget(shares[qid], now)
            if commands:
                self._execute(qid, commands, now)


def run_bench(
    cfg: BenchConfig,
    on_finish: Callable[[QueryMachine], None] | None = None,
    predictor: PredictorFactory = algorithm_predictor,
) -> BenchResult:
    """Run `cfg` in virtual time. `on_finish` sees each query's machine as it finishes (for
    progress bars and for drivers that read the final trees); `predictor` replaces the
    algorithms' own speculation hooks (the oracle bound)."""
    return _Run(cfg, predictor, on_finish).run()
