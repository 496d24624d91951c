"""The virtual-time loop: Q questions, B in flight, through the coordinator core, the simulated
generator engine(s) and the simulated reward engine.

With several generator workers (`workers`), each job goes where the services would send it
(`spex.shared.core.routing`): the query's worker on the hash ring (affinity), or the least
loaded one; T2 then divides each worker's spare capacity among the queries routed to it.

Discrete-event loop: advance every engine to the earliest next event, feed the completions
to their queries' machines in a fixed order, submit the commands they return at that same
instant (one handler per command type), re-divide the speculative budget (T2: `budget`), and
start a new question whenever one finishes. Nothing reads the wall clock but the `wall_s`
field, so the same arguments give the same results.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from spex.bench.vtime.bookkeeping import EngineBook, GenJob, RequestId, ScoreJob
from spex.bench.vtime.budget import Budget
from spex.bench.vtime.config import BenchConfig
from spex.bench.vtime.content import make_content, make_engines, sim_generator
from spex.bench.vtime.metrics import CriticalPath, GovernorRow, QueryRecord, RunMetrics, SpecTotals
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
from spex.shared.core.routing import SHARED, Load, Ring, route
from spex.shared.core.speculation import PredictorFactory, SpecPolicy, predictor_factory
from spex.shared.engine.api import SERVERS, Completion, Engine, EngineFailed
from spex.shared.roofline.measured import load_measured

__all__ = ["BenchResult", "EngineFailed", "run_bench"]


@dataclass
class BenchResult:
    config: BenchConfig
    records: list[QueryRecord]
    makespan_s: float
    wall_s: float
    gen: Engine
    prm: Engine | None
    gens: list[Engine]  # every generator worker's engine (`gen` is the first)
    tpots_s: list[float]  # primary jobs only
    level_batches: list[tuple[int, float, float]]  # (width, first-quarter batch, last-quarter batch)
    tokens_all: int  # every token the generator produced, cancelled jobs' partial output included
    spec_tokens: int  # tokens of speculative jobs (completed or cancelled)
    cancel_latencies_s: list[float]
    spec: SpecTotals
    critical_path: CriticalPath
    pool_peak: int  # the largest speculative pool T2 divided
    starved_rounds: int  # budget rounds a query that could speculate got nothing, another > 1
    share_rounds: int  # budget rounds × queries that could speculate
    slack: list[float]  # each worker's slack at the end (the governor's, or the fixed one)
    governor: list[GovernorRow]  # worker 0's governor as the run went


class _Run:
    def __init__(
        self,
        cfg: BenchConfig,
        predictor: PredictorFactory | None,
        on_finish: Callable[[QueryMachine], None] | None,
    ) -> None:
        cfg.validate()
        self.cfg = cfg
        self.config = cfg.search_config()
        self.policy = SpecPolicy(cfg.speculating, cfg.cache_nodes, cfg.max_amplification)
        self.predictor = predictor or predictor_factory(cfg.predictor)
        self.on_finish = on_finish
        self.profile = cfg.sim_profile()
        self.measured = load_measured(cfg.profile_file) if cfg.profile_file else None
        self.gen, self.prm = make_engines(cfg)
        try:
            self._setup(cfg)
        except BaseException:  # a server's connections and thread are not left behind
            self.close()
            raise

    def _setup(self, cfg: BenchConfig) -> None:
        self.gens: list[Engine] = [self.gen, *(sim_generator(cfg) for _ in range(cfg.workers - 1))]
        # A level's batch at B=1, from the engine's decode runs (a server's are not seen).
        traced = cfg.batch_size == 1 and cfg.workers == 1 and cfg.backend not in SERVERS
        self.gen.trace = [] if traced else None
        self.names = [f"gen-{i}" for i in range(cfg.workers)]
        self.ring = Ring(self.names)
        self.index = {name: i for i, name in enumerate(self.names)}
        self.placed: dict[str, int] = {}  # query id -> the worker its jobs go to (affinity)
        self.placed_on = [0] * cfg.workers  # queries placed on each worker
        self.content = make_content(cfg, self.gen, self.prm)
        if self.measured is not None and hasattr(self.gen, "step_model"):
            self.gen.step_model = self.measured
        self.questions = self.content.questions
        self.by_id = {q.query_id: q for q in self.questions}
        self.machines: dict[str, QueryMachine] = {}
        self.next_question = 0
        self.books = [EngineBook() for _ in self.gens]  # per worker; scores in the first
        self.book = self.books[0]
        self.where: dict[str, int] = {}  # generation request id -> its worker
        self.metrics = RunMetrics(self.gen.trace is not None, exact_rewards=cfg.content == "synthetic")
        self.budget = Budget(cfg, self.profile, self.measured, self.gens, self.books, self.metrics)
        self.interpreters: dict[type, Callable[[Any, str, float], int]] = {  # one per Command type
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
        engines = [*self.gens, *([self.prm] if self.prm is not None else [])]
        while self.machines:
            times = [t for t in (e.next_event_s() for e in engines) if t is not None]
            if not times:
                raise RuntimeError("simulation stalled: queries are waiting but no engine has work")
            now = min(times)
            queued = self._queued if any(g.waiting for g in self.gens) else None
            self.metrics.account(now, self.machines, queued)
            done: list[tuple[int, Completion]] = []
            for i, engine in enumerate(engines):
                done.extend((i, c) for c in engine.advance_to(now))
            done.sort(key=lambda item: (item[1].time_s, item[0], item[1].rid))
            for i, completion in done:
                # A real engine's step ends after it started (at `now`): what it finished is
                # known from its end on. (The simulator's steps end at `now` itself.)
                t = max(now, completion.time_s)
                last = max(last, t)
                if i < len(self.gens):
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
            gens=self.gens,
            tpots_s=m.tpots_s,
            level_batches=m.level_batches(self.gen.trace),
            tokens_all=m.tokens_all,
            spec_tokens=m.spec_tokens,
            cancel_latencies_s=m.cancel_latencies_s,
            spec=m.spec,
            critical_path=m.critical,
            pool_peak=m.pool_peak,
            starved_rounds=m.starved_rounds,
            share_rounds=m.share_rounds,
            slack=[self.budget.slack(w) for w in range(len(self.gens))],
            governor=m.governor,
        )

    def close(self) -> None:
        """Let go of the engines that hold something outside this process (a server's
        connections and the thread that talks to it)."""
        for engine in (self.gen, self.prm):  # only these can be real (several workers: sim only)
            if engine is not None:
                engine.close()

    # ------------------------------------------------------------------ queries
    def _start_query(self, now: float) -> None:
        question = self.questions[self.next_question]
        self.next_question += 1
        machine = QueryMachine(
            question.query_id,
            question.prompt_tokens,
            self.cfg.search_config(*self.cfg.search_of(question.query_id)),
            self.cfg.seed,
            self.cfg.reward,
            speculation=self.policy,
            early_stop=self.cfg.early_stop,
            predictor=self.predictor,
            same_answer=self.content.same_answer,
        )
        self.machines[question.query_id] = machine
        self._execute(question.query_id, machine.start(now), now)

    def _queued(self, query_id: str, job_id: str) -> bool:
        rid = str(RequestId("gen", query_id, job_id))
        return self.gens[self.where.get(rid, 0)].is_waiting(rid)

    def _on_generated(self, c: Completion, now: float) -> None:
        if c.reason == "error":  # a server failed it: the run measures nothing any more
            raise EngineFailed(f"the engine failed request {c.rid}: {c.text}")
        job = self.books[self.where.pop(c.rid)].pop_job(c.rid)
        self.metrics.generation_done(job, c)
        machine = self.machines.get(job.rid.query_id)
        if machine is None or c.reason == "abort":
            self.content.forget(self.by_id[job.rid.query_id], c.rid)
            if machine is not None:
                machine.on_cancelled(c.generated)
            return
        step = self.content.generated(self.by_id[job.rid.query_id], job.path, c)
        self.metrics.need_progressed(now)
        commands = machine.on_generated(
            job.job_id, job.node_id, step.text, step.tokens, step.finish_reason, step.mean_logprob, now
        )
        self._execute(job.rid.query_id, commands, now)

    def _on_scored(self, c: Completion, now: float) -> None:
        if c.reason == "error":
            raise EngineFailed(f"the reward engine failed request {c.rid}: {c.text}")
        score = self.book.pop_score(c.rid)
        qid = score.rid.query_id
        machine = self.machines.get(qid)
        if machine is None:
            return
        reward = self.content.reward(self.by_id[qid], score.path, c)
        self._execute(qid, machine.on_scored(score.path[-1], reward, now), now)

    # ------------------------------------------------------------------ commands
    def _execute(self, query_id: str, commands: list[Command], now: float) -> None:
        primaries = sum(self.interpreters[type(cmd)](cmd, query_id, now) for cmd in commands)
        self.metrics.need_issued(primaries, now)

    def _generate(self, cmd: GenerateCommand, query_id: str, now: float) -> int:
        """Submit a generation; returns 1 if it is a primary job (for the level batches)."""
        path = [n.id for n in cmd.node.path()]
        rid = RequestId("gen", query_id, cmd.job_id)
        primary = cmd.priority == PRIMARY
        w = self._route(query_id)
        self.where[str(rid)] = w
        self.books[w].add_job(GenJob(rid, cmd.node.id, path, primary, sum(t for _, t in cmd.prompt)))
        self.gens[w].submit(self.content.generate(self.by_id[query_id], cmd, str(rid)), now)
        return int(primary)

    def _route(self, query_id: str) -> int:
        if len(self.gens) == 1:
            return 0
        slots = self.cfg.worker_slots or 1 << 20  # no limit: room still ranks by load
        loads = {
            name: Load(len(self.books[i].jobs), slots, self.placed_on[i]) for i, name in enumerate(self.names)
        }
        current = self.placed.get(query_id)
        worker = route(
            query_id, self.ring, loads, self.cfg.affinity, None if current is None else self.names[current]
        )
        if worker == SHARED:  # every worker is full: the one with the fewest jobs takes it
            worker = min(self.names, key=lambda n: (loads[n].jobs, n))
        if self.cfg.affinity and current is None:
            self.placed[query_id] = self.index[worker]
            self.placed_on[self.index[worker]] += 1
        return self.index[worker]

    def _score(self, cmd: ScoreCommand, query_id: str, now: float) -> int:
        if self.prm is None:
            raise RuntimeError("score command without a reward engine")
        rid = RequestId("score", query_id, cmd.node.id)
        if self.book.add_score(ScoreJob(rid, [n.id for n in cmd.node.path()])):
            self.prm.submit(self.content.score(self.by_id[query_id], cmd, str(rid)), now)
        return 0

    def _cancel(self, cmd: CancelCommand, query_id: str, now: float) -> int:
        rid = RequestId("gen", query_id, cmd.job_id)
        w = self.where.get(str(rid))
        job = None if w is None else self.books[w].job(rid)
        if w is not None and job is not None and job.cancelled_s is None:
            job.cancelled_s = now
            for c in self.gens[w].abort(str(rid), now):
                self._on_generated(c, now)
        return 0

    def _promote(self, cmd: PromoteCommand, query_id: str, now: float) -> int:
        rid = RequestId("gen", query_id, cmd.job_id)
        w = self.where.get(str(rid))
        if w is None:
            return 0
        self.gens[w].promote(str(rid), now)
        job = self.books[w].job(rid)
        if job is not None:
            self.books[w].promote(job)
        return 0

    def _finish(self, cmd: FinishCommand, query_id: str, now: float) -> int:
        machine = self.machines.pop(query_id)
        if query_id in self.placed:
            self.placed_on[self.placed.pop(query_id)] -= 1
        correct = self.content.correct(machine.answer, self.by_id[query_id])
        self.metrics.query_done(machine, correct, now)
        if self.on_finish is not None:
            self.on_finish(machine)
        if self.next_question < len(self.questions):
            self._start_query(now)
        return 0

    # ------------------------------------------------------------------ T2
    def _rebudget(self, now: float) -> None:
        """Each query's new speculative share (`budget.Budget.shares`), to its machine."""
        shares = self.budget.shares(now, self.machines, self.placed)
        if shares is None:
            return
        for qid, machine in list(self.machines.items()):
            commands = machine.on_budget(shares[qid], now)
            if commands:
                self._execute(qid, commands, now)


def run_bench(
    cfg: BenchConfig,
    on_finish: Callable[[QueryMachine], None] | None = None,
    predictor: PredictorFactory | None = None,
) -> BenchResult:
    """Run `cfg` in virtual time. `on_finish` sees each query's machine as it finishes (for
    progress bars and for drivers that read the final trees); `predictor` replaces the one
    `cfg.predictor` names (the oracle bound)."""
    run = _Run(cfg, predictor, on_finish)
    try:
        return run.run()
    finally:
        run.close()
