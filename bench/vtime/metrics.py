"""What the virtual-time driver measures while it runs: per-query records, primary
TPOT, tokens, speculation totals, cancellation latency, the critical path, and the BFS level
batches at B = 1."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from spex.bench.vtime.bookkeeping import GenJob
from spex.shared.core.ids import digest
from spex.shared.core.machine import QueryMachine, QueryStats
from spex.shared.sim.engine import Completion

__all__ = ["CriticalPath", "GovernorRow", "QueryRecord", "RunMetrics", "SpecTotals"]

Trace = list[tuple[float, float, int]]  # (start, end, batch) per decode run
# (time, slack, speculative jobs admitted, growth, windows, what bound the admission)
GovernorRow = tuple[float, float, int, float | None, int, str]


@dataclass
class QueryRecord:
    query_id: str
    answer: str | None
    correct: bool
    latency_s: float
    nodes: int
    tokens: int
    digest: str  # the tree (structure, texts, tokens, answers; synthetic rewards) and the answer
    early_stopped: bool
    rewards: dict[str, float]  # node id -> reward
    step_tokens: tuple[int, ...]  # each generated step's tokens
    capped_steps: int  # steps that ended at the token cap
    solution: tuple[str, ...]  # the steps of the solution the answer came from (the pipeline's, too)
    spec_issued: int  # speculative jobs issued for it
    spec_adopted: int  # ... that its search used


@dataclass
class SpecTotals:
    issued: int = 0
    adopted: int = 0
    cancelled: int = 0
    evicted: int = 0
    tokens_consumed: int = 0  # speculative tokens the searches used
    by_distance: dict[int, list[int]] = field(default_factory=dict)  # distance -> [issued, adopted]

    def add(self, st: QueryStats) -> None:
        self.issued += st.spec_issued
        self.adopted += st.spec_adopted
        self.cancelled += st.spec_cancelled
        self.evicted += st.spec_evicted
        self.tokens_consumed += st.spec_tokens_consumed
        for d, (n, a) in st.spec_by_distance.items():
            row = self.by_distance.setdefault(d, [0, 0])
            row[0] += n
            row[1] += a


@dataclass
class CriticalPath:
    """Query-seconds the searches spent blocked, by what they waited for."""

    generation_s: float = 0.0  # a primary generation running
    adopted_s: float = 0.0  # a speculative generation the search adopted, still running
    admission_s: float = 0.0  # a needed generation queued for an engine slot / KV
    reward_s: float = 0.0  # a reward (PRM score) pending

    def add(self, kind: str, dt: float) -> None:
        setattr(self, kind, getattr(self, kind) + dt)


class RunMetrics:
    def __init__(self, trace_levels: bool, exact_rewards: bool = True) -> None:
        self.exact_rewards = exact_rewards  # synthetic rewards are exact: a tree's digest holds them
        self.records: dict[str, QueryRecord] = {}
        self.tpots_s: list[float] = []  # primary jobs only
        self.tokens_all = 0  # every token the generator produced, cancelled jobs' included
        self.spec_tokens = 0  # tokens of speculative jobs (completed or cancelled)
        self.cancel_latencies_s: list[float] = []
        self.spec = SpecTotals()
        self.critical = CriticalPath()
        self.pool_peak = 0  # the largest speculative pool T2 divided
        self.starved_rounds = 0  # (see `count_shares`)
        self.share_rounds = 0
        # Worker 0's governor as the run went: (time, slack, pool, TPOT growth of the last
        # window it closed, windows closed), a row each time the slack or pool changed.
        self.governor: list[GovernorRow] = []
        self._last_t = 0.0
        self._blocked: dict[str, tuple[int, str | None, list[str]]] = {}  # query -> (events, bucket, jobs)
        # (width, issued, last generated) per multi-node need; None: not traced (B > 1)
        self._needs: list[tuple[int, float, float]] | None = [] if trace_levels else None

    def count_shares(self, shares: dict[str, int], wanting: Sequence[str]) -> None:
        """One budget round: each query that could speculate (`wanting`) counts a round, and a
        starved one if it got nothing while another query got more than one branch."""
        self.share_rounds += len(wanting)
        if any(n > 1 for n in shares.values()):
            self.starved_rounds += sum(1 for q in wanting if shares.get(q, 0) == 0)

    def generation_done(self, job: GenJob, c: Completion) -> None:
        """A generation left the engine, finished or aborted (call after the job is popped)."""
        self.tokens_all += c.generated
        if job.primary and not job.promoted:
            if c.tpot_s is not None:
                self.tpots_s.append(c.tpot_s)
        else:
            self.spec_tokens += c.generated
        if c.reason == "abort" and job.cancelled_s is not None:
            self.cancel_latencies_s.append(c.time_s - job.cancelled_s)

    def need_issued(self, primaries: int, now: float) -> None:
        if primaries and self._needs is not None:
            self._needs.append((primaries, now, now))

    def need_progressed(self, now: float) -> None:
        if self._needs:
            width, issued, _ = self._needs[-1]
            self._needs[-1] = (width, issued, now)

    def account(
        self, now: float, machines: dict[str, QueryMachine], waiting: Callable[[str, str], bool] | None
    ) -> None:
        """Attribute [last event, now] of every active query to what it is blocked on;
        `waiting(query_id, job_id)` tells whether a job is still queued for admission (None:
        no engine has anything queued)."""
        dt, self._last_t = now - self._last_t, now
        if dt <= 0:
            return
        for qid, machine in machines.items():
            known = self._blocked.get(qid)
            if known is None or known[0] != machine.events:  # what it waits on changes by events only
                known = (machine.events, *self._classify(machine))
                self._blocked[qid] = known
            _, kind, jobs = known
            if kind is None:
                continue
            if jobs and waiting is not None and any(waiting(qid, j) for j in jobs):
                kind = "admission_s"
            self.critical.add(kind, dt)

    @staticmethod
    def _classify(machine: QueryMachine) -> tuple[str | None, list[str]]:
        """What `machine` is blocked on, as a critical-path bucket (None: not blocked), and the
        jobs it waits for (to tell a job still queued for admission apart)."""
        blocked = machine.waiting_on()
        if blocked is None:
            return None, []
        kind, node_ids = blocked
        if kind == "score":
            return "reward_s", []
        jobs = [j for j in (machine.job_of(n) for n in node_ids) if j is not None]
        ids = [job_id for job_id, _ in jobs]
        if jobs and all(speculative for _, speculative in jobs):
            return "adopted_s", ids
        return "generation_s", ids

    def query_done(self, machine: QueryMachine, correct: bool, now: float) -> None:
        st = machine.stats
        self.spec.add(st)
        steps = [n for n in machine.tree.nodes.values() if n.parent is not None and n.generated]
        self.records[machine.query_id] = QueryRecord(
            query_id=machine.query_id,
            answer=machine.answer,
            correct=correct,
            latency_s=now - machine.started_s,
            nodes=len(machine.tree) - 1,
            tokens=st.tokens_generated,
            digest=digest(machine.tree.digest(rewards=self.exact_rewards), machine.answer),
            early_stopped=machine.early_stopped,
            rewards=machine.tree.rewards(),
            step_tokens=tuple(n.tokens for n in steps),
            capped_steps=sum(n.finish_reason == "length" for n in steps),
            solution=tuple(machine.solution_steps()),
            spec_issued=st.spec_issued,
            spec_adopted=st.spec_adopted,
        )

    def level_batches(self, trace: Trace | None) -> list[tuple[int, float, float]]:
        """At B = 1: the decode batch in the first and last quarter of each multi-node need,
        as (width, first-quarter batch, last-quarter batch)."""
        if trace is None or self._needs is None:
            return []
        out = []
        for width, start, end in self._needs:
            if width < 2 or end <= start:
                continue
            q = (end - start) / 4
            out.append((width, _mean_batch(trace, start, start + q), _mean_batch(trace, end - q, end)))
        return out

    def ordered(self, query_ids: Iterable[str]) -> list[QueryRecord]:
        return [self.records[q] for q in query_ids]


def _mean_batch(trace: Trace, lo: float, hi: float) -> float:
    """Time-weighted decode batch over [lo, hi] (idle and prefill time count as zero)."""
    total = 0.0
    for start, end, batch in trace:
        overlap = min(end, hi) - max(start, lo)
        if overlap > 0:
            total += overlap * batch
    return total / (hi - lo) if hi > lo else 0.0
