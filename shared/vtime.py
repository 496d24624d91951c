"""The virtual-time driver: Q questions, B in flight, through the coordinator core, the
simulated generator engine and the simulated reward engine.

Discrete-event loop: advance every engine to the earliest next event, feed the completions
to their queries' machines in a fixed order, submit the commands they return at that same
instant, re-divide the speculative budget (T2), and start a new question whenever one
finishes. Nothing reads the wall clock but the `wall_s` field, so the same arguments give the
same results.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from proto.messages import PRIMARY
from shared.coordinator import (
    CancelCommand,
    Command,
    FinishCommand,
    GenerateCommand,
    PromoteCommand,
    QueryMachine,
    ScoreCommand,
    SpecPolicy,
)
from shared.ids import digest
from shared.search import SearchConfig, make_algorithm
from shared.search.base import ALGORITHMS
from shared.sim.engine import Completion, EngineConfig, SimEngine, SimRequest
from shared.sim.hardware import parse_profile
from shared.sim.workload import QuerySpec, SyntheticWorkload, WorkloadKnobs
from shared.spec.budget import Demand, allocate, even_split, hit_rate_estimate, speculative_pool
from shared.spec.early_stop import EarlyStop
from shared.tree import Tree

__all__ = ["BenchConfig", "BenchResult", "run_bench"]

MODES = ("baseline", "spex")


@dataclass(frozen=True)
class BenchConfig:
    algorithm: str = "rebase"
    target: int = 16
    batch_size: int = 1
    questions: int = 16
    seed: int = 0
    profile: str = "Llemma-7B@A6000"
    reward_profile: str | None = None  # None: Llemma-7B PRM on its own GPU of the same kind
    reward: str = "prm"
    answer_selection: str | None = None
    knobs: WorkloadKnobs = field(default_factory=WorkloadKnobs)
    engine: EngineConfig = field(default_factory=EngineConfig)
    params: dict[str, float] = field(default_factory=dict)
    # --- SPEX
    mode: str = "baseline"
    t1: bool = True  # intra-query speculation
    t2: bool = True  # softmax budget across queries (else an even split)
    early_stop: EarlyStop = field(default_factory=EarlyStop)  # T3
    max_amplification: float | None = None
    k_total: int | None = None  # static concurrency cap; None: the live roofline pool
    tpot_slack: float = 0.10  # speculation may grow a decode step by at most this fraction
    temperature: float = 0.5  # τ of the T2 softmax
    cache_nodes: int = 256

    def validate(self) -> None:
        """Raise ValueError naming the first bad field."""
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm: unknown {self.algorithm!r}; known: {', '.join(sorted(ALGORITHMS))}")
        for name in ("target", "batch_size", "questions"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be at least 1, not {getattr(self, name)}")
        if self.reward not in ("prm", "logprob"):
            raise ValueError(f"reward: must be 'prm' or 'logprob', not {self.reward!r}")
        if self.mode not in MODES:
            raise ValueError(f"mode: must be one of {MODES}, not {self.mode!r}")
        if self.max_amplification is not None and self.max_amplification < 1:
            raise ValueError(f"max_amplification: must be at least 1, not {self.max_amplification}")
        if self.k_total is not None and self.k_total < 1:
            raise ValueError(f"k_total: must be at least 1, not {self.k_total}")
        if self.temperature <= 0:
            raise ValueError(f"temperature: must be positive, not {self.temperature}")
        if self.early_stop.alpha <= 0:
            raise ValueError(f"early_stop_alpha: must be positive, not {self.early_stop.alpha}")
        parse_profile(self.profile)
        parse_profile(self.reward_profile_name)
        # Build one algorithm to check its parameters (unknown names fail here, by name).
        config = SearchConfig(self.algorithm, self.target, self.answer_selection, params=dict(self.params))
        make_algorithm(Tree("check", 0, 1), config)

    @property
    def reward_profile_name(self) -> str:
        return self.reward_profile or f"Llemma-7B@{self.profile.partition('@')[2]}"

    @property
    def speculating(self) -> bool:
        return self.mode == "spex" and self.t1


@dataclass
class QueryRecord:
    query_id: str
    answer: str | None
    correct: bool
    latency_s: float
    nodes: int
    tokens: int
    digest: str
    early_stopped: bool


@dataclass
class SpecTotals:
    issued: int = 0
    adopted: int = 0
    cancelled: int = 0
    evicted: int = 0
    tokens_consumed: int = 0  # speculative tokens the searches used
    by_distance: dict[int, list[int]] = field(default_factory=dict)  # distance -> [issued, adopted]


@dataclass
class CriticalPath:
    """Query-seconds the searches spent blocked, by what they waited for."""

    generation_s: float = 0.0  # a primary generation running
    adopted_s: float = 0.0  # a speculative generation the search adopted, still running
    admission_s: float = 0.0  # a needed generation queued for an engine slot / KV
    reward_s: float = 0.0  # a reward (PRM score) pending

    def add(self, kind: str, dt: float) -> None:
        setattr(self, kind, getattr(self, kind) + dt)


@dataclass
class BenchResult:
    config: BenchConfig
    records: list[QueryRecord]
    makespan_s: float
    wall_s: float
    gen: SimEngine
    prm: SimEngine | None
    tpots_s: list[float]  # primary jobs only
    level_batches: list[tuple[int, float, float]]  # (width, first-quarter batch, last-quarter batch)
    tokens_all: int  # every token the generator produced, cancelled jobs' partial output included
    spec_tokens: int  # tokens of speculative jobs (completed or cancelled)
    cancel_latencies_s: list[float]
    spec: SpecTotals
    critical_path: CriticalPath
    pool_peak: int  # the largest speculative pool T2 divided


@dataclass
class _Job:
    query_id: str
    node_id: str
    job_id: str
    path: list[str]
    primary: bool
    prompt_tokens: int = 0
    cancelled_s: float | None = None
    promoted: bool = False  # a speculative job the search adopted (not a primary for TPOT)


class _Run:
    def __init__(self, cfg: BenchConfig, on_finish: Callable[[int], None] | None) -> None:
        cfg.validate()
        self.cfg = cfg
        self.config = SearchConfig(
            algorithm=cfg.algorithm,
            target=cfg.target,
            answer_selection=cfg.answer_selection,
            max_step_tokens=cfg.knobs.step_token_cap,
            params=dict(cfg.params),
        )
        self.spec_policy = SpecPolicy(cfg.speculating, cfg.cache_nodes, cfg.max_amplification)
        style = ALGORITHMS[cfg.algorithm].family
        self.workload = SyntheticWorkload(cfg.knobs, cfg.seed, style)
        profile = parse_profile(cfg.profile)
        self.profile = profile
        # The engine holds speculative decoding to the same roofline slack, step by step.
        engine = replace(cfg.engine, spec_step_slack=cfg.tpot_slack) if cfg.speculating else cfg.engine
        self.gen = SimEngine(profile, engine)
        self.gen.trace = [] if cfg.batch_size == 1 else None
        self.prm = SimEngine(parse_profile(cfg.reward_profile_name)) if cfg.reward == "prm" else None
        self.specs = [self.workload.query(i) for i in range(cfg.questions)]
        self.machines: dict[str, QueryMachine] = {}
        self.records: dict[str, QueryRecord] = {}
        self.next_query = 0
        self.tpots: list[float] = []
        self.on_finish = on_finish
        self.needs: list[tuple[int, float, float]] = []  # (width, issued, last generated), B = 1
        self.jobs: dict[str, _Job] = {}  # generator rid -> job
        self.score_paths: dict[str, list[str]] = {}  # reward rid -> node path
        self.primary_in_flight = 0
        self.primary_ctx = 0  # summed prompt tokens of primary jobs in flight
        self.pool_peak = 0
        self.tokens_all = 0
        self.spec_tokens = 0
        self.cancel_latencies: list[float] = []
        self.spec = SpecTotals()
        self.critical = CriticalPath()
        self.last_t = 0.0

    def run(self) -> BenchResult:
        wall0 = time.perf_counter()
        now = 0.0
        for _ in range(min(self.cfg.batch_size, self.cfg.questions)):
            self._start_query(now)
        self._rebudget(now)
        engines = [e for e in (self.gen, self.prm) if e is not None]
        while self.machines:
            times = [t for t in (e.next_event_s() for e in engines) if t is not None]
            if not times:
                raise RuntimeError("simulation stalled: queries are waiting but no engine has work")
            now = min(times)
            self._account(now)
            done: list[tuple[int, Completion]] = []
            for i, engine in enumerate(engines):
                done.extend((i, c) for c in engine.advance_to(now))
            done.sort(key=lambda item: (item[1].time_s, item[0], item[1].rid))
            for i, completion in done:
                if engines[i] is self.gen:
                    self._on_generated(completion, now)
                else:
                    self._on_scored(completion, now)
            self._rebudget(now)
        return BenchResult(
            config=self.cfg,
            records=[self.records[s.query_id] for s in self.specs],
            makespan_s=now,
            wall_s=time.perf_counter() - wall0,
            gen=self.gen,
            prm=self.prm,
            tpots_s=self.tpots,
            level_batches=self._level_batches(),
            tokens_all=self.tokens_all,
            spec_tokens=self.spec_tokens,
            cancel_latencies_s=self.cancel_latencies,
            spec=self.spec,
            critical_path=self.critical,
            pool_peak=self.pool_peak,
        )

    # ------------------------------------------------------------------ queries
    def _start_query(self, now: float) -> None:
        spec = self.specs[self.next_query]
        self.next_query += 1
        machine = QueryMachine(
            spec.query_id,
            spec.prompt_tokens,
            self.config,
            self.cfg.seed,
            self.cfg.reward,
            spec=self.spec_policy,
            early_stop=self.cfg.early_stop,
        )
        self.machines[spec.query_id] = machine
        self._execute(spec, machine.start(now), now)

    def _spec(self, query_id: str) -> QuerySpec:
        return self.specs[int(query_id[1:])]

    def _on_generated(self, c: Completion, now: float) -> None:
        job = self.jobs.pop(c.rid)
        self.tokens_all += c.generated
        if job.primary:
            self.primary_in_flight -= 1
            self.primary_ctx -= job.prompt_tokens
        if job.primary and not job.promoted:
            if c.tpot_s is not None:
                self.tpots.append(c.tpot_s)
        else:
            self.spec_tokens += c.generated
        machine = self.machines.get(job.query_id)
        if c.reason == "abort":
            if job.cancelled_s is not None:
                self.cancel_latencies.append(c.time_s - job.cancelled_s)
            if machine is not None:
                machine.on_cancelled(c.generated)
            return
        if machine is None:
            return
        spec = self._spec(job.query_id)
        gen = self.workload.generate(spec, job.path)
        if self.gen.trace is not None and self.needs:
            width, issued, _ = self.needs[-1]
            self.needs[-1] = (width, issued, now)
        commands = machine.on_generated(
            job.job_id, job.node_id, gen.text, c.generated, gen.finish_reason, gen.mean_logprob, now
        )
        self._execute(spec, commands, now)

    def _on_scored(self, c: Completion, now: float) -> None:
        path = self.score_paths.pop(c.rid)
        query_id = c.rid.split(":")[1]
        machine = self.machines.get(query_id)
        if machine is None:
            return
        spec = self._spec(query_id)
        self._execute(spec, machine.on_scored(path[-1], self.workload.prm_reward(spec, path), now), now)

    def _execute(self, spec: QuerySpec, commands: list[Command], now: float) -> None:
        qid = spec.query_id
        generates = 0
        for cmd in commands:
            if isinstance(cmd, GenerateCommand):
                path = [n.id for n in cmd.node.path()]
                rid = f"g:{qid}:{cmd.job_id}"
                primary = cmd.priority == PRIMARY
                prompt_tokens = sum(t for _, t in cmd.prompt)
                self.jobs[rid] = _Job(qid, cmd.node.id, cmd.job_id, path, primary, prompt_tokens)
                if primary:
                    generates += 1
                    self.primary_in_flight += 1
                    self.primary_ctx += prompt_tokens
                tokens = min(self.workload.generate(spec, path).tokens, cmd.max_new_tokens)
                request = SimRequest(rid, cmd.prompt, cmd.node.id, tokens, cmd.max_new_tokens, cmd.priority)
                self.gen.submit(request, now)
            elif isinstance(cmd, ScoreCommand):
                if self.prm is None:
                    raise RuntimeError("score command without a reward engine")
                rid = f"s:{qid}:{cmd.node.id}"
                if rid in self.score_paths:
                    continue
                self.score_paths[rid] = [n.id for n in cmd.node.path()]
                self.prm.submit(
                    SimRequest(rid, cmd.prompt, cmd.node.id + "/s", 0, priority=cmd.priority), now
                )
            elif isinstance(cmd, CancelCommand):
                rid = f"g:{qid}:{cmd.job_id}"
                job = self.jobs.get(rid)
                if job is not None and job.cancelled_s is None:
                    job.cancelled_s = now
                    for c in self.gen.abort(rid, now):
                        self._on_generated(c, now)
            elif isinstance(cmd, PromoteCommand):
                rid = f"g:{qid}:{cmd.job_id}"
                self.gen.promote(rid, now)
                job = self.jobs.get(rid)
                if job is not None and not job.primary:  # the search waits on it now
                    job.primary = True
                    self.primary_in_flight += 1
                    self.primary_ctx += job.prompt_tokens
                    job.promoted = True
            elif isinstance(cmd, FinishCommand):
                self._finish(qid, now)
        if generates and self.gen.trace is not None:
            self.needs.append((generates, now, now))

    def _pool(self) -> int:
        """Speculative jobs the generator can take now (see `spare_concurrency`)."""
        if self.cfg.k_total is not None:
            return max(0, self.cfg.k_total - self.primary_in_flight)
        contexts = [m.context_tokens for m in self.machines.values()]
        spec_jobs = sum(1 for j in self.jobs.values() if not j.primary)
        return speculative_pool(
            self.profile,
            self.primary_in_flight,
            self.primary_ctx,
            sum(contexts) / len(contexts),
            self.cfg.tpot_slack,
            self.gen.held_tokens,
            spec_jobs,
            self.config.max_step_tokens,
        )

    def _account(self, now: float) -> None:
        """Attribute [last event, now] of every active query to what it is blocked on."""
        dt, self.last_t = now - self.last_t, now
        if dt <= 0:
            return
        for qid, machine in self.machines.items():
            blocked = machine.waiting_on()
            if blocked is None:
                continue
            kind, node_ids = blocked
            if kind == "score":
                self.critical.add("reward_s", dt)
                continue
            jobs = [j for j in (machine.job_of(n) for n in node_ids) if j is not None]
            if any(self.gen.is_waiting(f"g:{qid}:{job_id}") for job_id, _ in jobs):
                self.critical.add("admission_s", dt)
            elif jobs and all(spec for _, spec in jobs):
                self.critical.add("adopted_s", dt)
            else:
                self.critical.add("generation_s", dt)

    def _rebudget(self, now: float) -> None:
        """T2: divide the speculative pool among the queries."""
        if not self.cfg.speculating or not self.machines:
            return
        pool = self._pool()
        self.pool_peak = max(self.pool_peak, pool)
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
                self._execute(self._spec(qid), commands, now)

    def _finish(self, query_id: str, now: float) -> None:
        machine = self.machines.pop(query_id)
        spec = self._spec(query_id)
        st = machine.stats
        self.spec.issued += st.spec_issued
        self.spec.adopted += st.spec_adopted
        self.spec.cancelled += st.spec_cancelled
        self.spec.evicted += st.spec_evicted
        self.spec.tokens_consumed += st.spec_tokens_consumed
        for d, (n, a) in st.spec_by_distance.items():
            row = self.spec.by_distance.setdefault(d, [0, 0])
            row[0] += n
            row[1] += a
        self.records[query_id] = QueryRecord(
            query_id=query_id,
            answer=machine.answer,
            correct=machine.answer == spec.reference_answer,
            latency_s=now - machine.started_s,
            nodes=len(machine.tree) - 1,
            tokens=st.tokens_generated,
            digest=digest(machine.tree.digest(), machine.answer),
            early_stopped=machine.early_stopped,
        )
        if self.on_finish is not None:
            self.on_finish(len(self.records))
        if self.next_query < len(self.specs):
            self._start_query(now)

    def _level_batches(self) -> list[tuple[int, float, float]]:
        """At B = 1: the decode batch in the first and last quarter of each multi-node need."""
        trace = self.gen.trace
        if trace is None:
            return []
        out = []
        for width, start, end in self.needs:
            if width < 2 or end <= start:
                continue
            q = (end - start) / 4
            out.append((width, _mean_batch(trace, start, start + q), _mean_batch(trace, end - q, end)))
        return out


def _mean_batch(trace: list[tuple[float, float, int]], lo: float, hi: float) -> float:
    """Time-weighted decode batch over [lo, hi] (idle and prefill time count as zero)."""
    total = 0.0
    for start, end, batch in trace:
        overlap = min(end, hi) - max(start, lo)
        if overlap > 0:
            total += overlap * batch
    return total / (hi - lo) if hi > lo else 0.0


def run_bench(cfg: BenchConfig, on_finish: Callable[[int], None] | None = None) -> BenchResult:
    return _Run(cfg, on_finish).run()
