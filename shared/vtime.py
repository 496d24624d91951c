"""The virtual-time driver: Q questions, B in flight, through the coordinator core, the
simulated generator engine and the simulated reward engine.

Discrete-event loop: advance every engine to the earliest next event, feed the completions
to their queries' machines in a fixed order, submit the commands they return at that same
instant, and start a new question whenever one finishes. Nothing reads the wall clock but
the `wall_s` field, so the same arguments give the same results.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from shared.coordinator import Command, FinishCommand, GenerateCommand, QueryMachine, ScoreCommand
from shared.ids import digest
from shared.search import SearchConfig, make_algorithm
from shared.search.base import ALGORITHMS
from shared.sim.engine import Completion, EngineConfig, SimEngine, SimRequest
from shared.sim.hardware import parse_profile
from shared.sim.workload import QuerySpec, SyntheticWorkload, WorkloadKnobs
from shared.tree import Tree

__all__ = ["BenchConfig", "BenchResult", "run_bench"]


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

    def validate(self) -> None:
        """Raise ValueError naming the first bad field."""
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm: unknown {self.algorithm!r}; known: {', '.join(sorted(ALGORITHMS))}")
        for name in ("target", "batch_size", "questions"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be at least 1, not {getattr(self, name)}")
        if self.reward not in ("prm", "logprob"):
            raise ValueError(f"reward: must be 'prm' or 'logprob', not {self.reward!r}")
        parse_profile(self.profile)
        parse_profile(self.reward_profile_name)
        # Build one algorithm to check its parameters (unknown names fail here, by name).
        config = SearchConfig(self.algorithm, self.target, self.answer_selection, params=dict(self.params))
        make_algorithm(Tree("check", 0, 1), config)

    @property
    def reward_profile_name(self) -> str:
        return self.reward_profile or f"Llemma-7B@{self.profile.partition('@')[2]}"


@dataclass
class QueryRecord:
    query_id: str
    answer: str | None
    correct: bool
    latency_s: float
    nodes: int
    tokens: int
    digest: str


@dataclass
class BenchResult:
    config: BenchConfig
    records: list[QueryRecord]
    makespan_s: float
    wall_s: float
    gen: SimEngine
    prm: SimEngine | None
    tpots_s: list[float]
    level_batches: list[tuple[int, float, float]]  # (width, first-quarter batch, last-quarter batch)


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
        style = ALGORITHMS[cfg.algorithm].family
        self.workload = SyntheticWorkload(cfg.knobs, cfg.seed, style)
        self.gen = SimEngine(parse_profile(cfg.profile), cfg.engine)
        self.gen.trace = [] if cfg.batch_size == 1 else None
        self.prm = SimEngine(parse_profile(cfg.reward_profile_name)) if cfg.reward == "prm" else None
        self.specs = [self.workload.query(i) for i in range(cfg.questions)]
        self.machines: dict[str, QueryMachine] = {}
        self.records: dict[str, QueryRecord] = {}
        self.next_query = 0
        self.tpots: list[float] = []
        self.on_finish = on_finish
        self.needs: list[tuple[int, float, float]] = []  # (width, issued, last generated), B = 1

    def run(self) -> BenchResult:
        wall0 = time.perf_counter()
        now = 0.0
        for _ in range(min(self.cfg.batch_size, self.cfg.questions)):
            self._start_query(now)
        engines = [e for e in (self.gen, self.prm) if e is not None]
        while self.machines:
            times = [t for t in (e.next_event_s() for e in engines) if t is not None]
            if not times:
                raise RuntimeError("simulation stalled: queries are waiting but no engine has work")
            now = min(times)
            done: list[tuple[int, Completion]] = []
            for i, engine in enumerate(engines):
                done.extend((i, c) for c in engine.advance_to(now))
            done.sort(key=lambda item: (item[1].time_s, item[0], item[1].rid))
            for i, completion in done:
                self._on_completion(engines[i] is self.gen, completion, now)
        return BenchResult(
            config=self.cfg,
            records=[self.records[s.query_id] for s in self.specs],
            makespan_s=now,
            wall_s=time.perf_counter() - wall0,
            gen=self.gen,
            prm=self.prm,
            tpots_s=self.tpots,
            level_batches=self._level_batches(),
        )

    # ------------------------------------------------------------------ queries
    def _start_query(self, now: float) -> None:
        spec = self.specs[self.next_query]
        self.next_query += 1
        machine = QueryMachine(spec.query_id, spec.prompt_tokens, self.config, self.cfg.seed, self.cfg.reward)
        self.machines[spec.query_id] = machine
        self._execute(spec, machine.start(now), now)

    def _spec(self, query_id: str) -> QuerySpec:
        return self.specs[int(query_id[1:])]

    def _on_completion(self, from_gen: bool, c: Completion, now: float) -> None:
        kind, query_id, node_id = c.rid.split(":")
        machine = self.machines.get(query_id)
        if machine is None:
            return
        spec = self._spec(query_id)
        node = machine.tree.nodes[node_id]
        path = [n.id for n in node.path()]
        if from_gen:
            gen = self.workload.generate(spec, path)
            if c.tpot_s is not None:
                self.tpots.append(c.tpot_s)
            if self.gen.trace is not None and self.needs:
                width, issued, _ = self.needs[-1]
                self.needs[-1] = (width, issued, now)
            commands = machine.on_generated(
                node_id, gen.text, c.generated, gen.finish_reason, gen.mean_logprob, now
            )
        else:
            commands = machine.on_scored(node_id, self.workload.prm_reward(spec, path), now)
        self._execute(spec, commands, now)

    def _execute(self, spec: QuerySpec, commands: list[Command], now: float) -> None:
        qid = spec.query_id
        generates = 0
        for cmd in commands:
            if isinstance(cmd, GenerateCommand):
                generates += 1
                path = [n.id for n in cmd.node.path()]
                gen = self.workload.generate(spec, path)
                tokens = min(gen.tokens, cmd.max_new_tokens)
                self.gen.submit(
                    SimRequest(
                        f"g:{qid}:{cmd.node.id}",
                        cmd.prompt,
                        cmd.node.id,
                        tokens,
                        cmd.max_new_tokens,
                        cmd.priority,
                    ),
                    now,
                )
            elif isinstance(cmd, ScoreCommand):
                if self.prm is None:
                    raise RuntimeError("score command without a reward engine")
                self.prm.submit(SimRequest(f"s:{qid}:{cmd.node.id}", cmd.prompt, cmd.node.id + "/s", 0), now)
            elif isinstance(cmd, FinishCommand):
                self._finish(qid, now)
        if generates and self.gen.trace is not None:
            self.needs.append((generates, now, now))

    def _finish(self, query_id: str, now: float) -> None:
        machine = self.machines.pop(query_id)
        spec = self._spec(query_id)
        self.records[query_id] = QueryRecord(
            query_id=query_id,
            answer=machine.answer,
            correct=machine.answer == spec.reference_answer,
            latency_s=now - machine.started_s,
            nodes=len(machine.tree) - 1,
            tokens=machine.stats.tokens_generated,
            digest=digest(machine.tree.digest(), machine.answer),
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
