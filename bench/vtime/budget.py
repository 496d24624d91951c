"""T2 in the virtual-time loop: each worker's admission of the speculative offers of the queries
routed to it, under the run's objective and within what its KV (or batch) holds; each
worker's TPOT governor fed from its engine's primary steps; and the shares that come of it.
The loop (`loop._Run`) owns one `Budget`, asks it for the shares of each round and hands them
to the queries' machines; the budget owns the governors, and reads the engines, their books and
the machines it is given.
"""

from __future__ import annotations

from spex.bench.vtime.bookkeeping import EngineBook
from spex.bench.vtime.config import BenchConfig
from spex.bench.vtime.metrics import RunMetrics
from spex.shared.core.machine import QueryMachine
from spex.shared.engine.api import Engine
from spex.shared.roofline.admission import FLAT, Admission, Objective, Offer, admit, divide, even_split
from spex.shared.roofline.capacity import StepCurve, TpotGovernor, kv_room
from spex.shared.roofline.hardware import Profile
from spex.shared.roofline.measured import MeasuredProfile
from spex.shared.sim.engine import SimEngine

__all__ = ["Budget"]


class Budget:
    """The speculative budget of each round of a run: `gens` are its generator workers'
    engines, `books` what each has in flight; `metrics` records the pools and the governor."""

    def __init__(
        self,
        cfg: BenchConfig,
        profile: Profile,
        measured: MeasuredProfile | None,
        gens: list[Engine],
        books: list[EngineBook],
        metrics: RunMetrics,
    ) -> None:
        self.cfg, self.config, self.profile, self.measured = cfg, cfg.search_config(), profile, measured
        self.gens, self.books, self.metrics = gens, books, metrics
        start = cfg.tpot_slack if cfg.tpot_slack is not None else 0.10
        self.governors = [TpotGovernor(cfg.tpot_target, start) for _ in gens]
        self.machines: dict[str, QueryMachine] = {}
        self.placed: dict[str, int] = {}

    def _room(self, w: int) -> tuple[StepCurve, int, bool]:
        """Worker `w`'s step curve, the speculative jobs its KV (or batch) holds at most, and
        whether the objective decides on that curve (False: no budget, or a static pool: filled
        as it is)."""
        book, gen = self.books[w], self.gens[w]
        real = not isinstance(gen, SimEngine)
        batch_room = max(0, self.cfg.max_running - book.primary_in_flight)
        if self.cfg.k_total is not None:
            return FLAT, max(0, self.cfg.k_total - book.primary_in_flight), False
        if real:  # the measured curve, within the engine's batch; none: its batch is the pool
            curve = self.measured if self.measured is not None else FLAT
            return curve, batch_room, self.measured is not None and self.cfg.tpot_budget
        room = kv_room(
            self.profile.kv_capacity_tokens,
            gen.held_tokens,
            book.speculative_jobs,
            self.config.max_step_tokens,
        )
        return self.profile, room, self.cfg.tpot_budget

    def _admit(self, w: int, offers: list[Offer]) -> Admission:
        """Worker `w`'s admission of `offers` under the run's objective."""
        book = self.books[w]
        curve, limit, budgeted = self._room(w)
        objective: Objective
        if not budgeted:  # every candidate worth anything, up to the limit
            curve, objective = FLAT, "throughput"
        else:
            objective = self.cfg.objective
        return admit(curve, book.primary_in_flight, book.primary_ctx, offers, objective, self.slack(w), limit)

    def slack(self, w: int) -> float:
        """Worker `w`'s TPOT slack: the governor's, or the run's fixed one."""
        return self.cfg.tpot_slack if self.cfg.tpot_slack is not None else self.governors[w].slack

    def _govern(self) -> None:
        """Feed each worker's governor the primary decode steps since the last feed."""
        if self.cfg.tpot_slack is not None:
            return
        for w, gen in enumerate(self.gens):
            s = gen.stats
            self.governors[w].feed(s.primary_steps, s.primary_step_s, s.primary_alone_s)
            if isinstance(gen, SimEngine):
                gen.spec_step_slack = self.governors[w].slack  # for scheduling="paused"

    def shares(
        self, now: float, machines: dict[str, QueryMachine], placed: dict[str, int]
    ) -> dict[str, int] | None:
        """T2: each worker's controller admits the speculative candidates of the queries routed
        to it (with affinity: `placed`, query id -> worker); without, each worker's admission
        of all of them sets a pool, and the workers' summed pool is shared in value order. Each
        query's share (None: no round, nothing speculates or nothing runs)."""
        self.machines, self.placed = machines, placed
        if not self.cfg.speculating or not self.machines:
            return None
        self._govern()
        if len(self.gens) == 1:
            groups = {0: list(self.machines)}
        elif self.cfg.affinity:
            groups = {}
            for qid in self.machines:
                groups.setdefault(self.placed.get(qid, 0), []).append(qid)
        else:
            groups = {-1: list(self.machines)}
        shares: dict[str, int] = {}
        for w, qids in groups.items():
            offers = [self._offer(q, len(qids)) for q in qids]
            workers = range(len(self.gens)) if w < 0 else [w]
            admissions = [self._admit(i, offers) for i in workers]
            running = sum(len(o.running) for o in offers)
            pool = running + sum(a.admitted for a in admissions)
            share = admissions[0].shares if w >= 0 else divide(offers, pool)
            if not self.cfg.t2:  # the ablation: the same pool split evenly
                share = even_split(offers, pool)
            self.metrics.pool_peak = max(self.metrics.pool_peak, pool)
            if 0 in workers:
                self._trace_governor(now, pool, admissions[0].bound)
            self.metrics.count_shares(share, [o.query_id for o in offers if o.running or o.candidates])
            shares |= share
            demand = running + sum(len(o.candidates) for o in offers)
            for i, a in zip(workers, admissions, strict=True):
                self.governors[i].note_pool(demand, pool, a.bound == "slack")
        return shares

    def _offer(self, qid: str, sharing: int) -> Offer:
        """Query `qid`'s speculative jobs in flight and new candidates, with their values on
        an engine `sharing` queries share."""
        m = self.machines[qid]
        running, new = m.spec_offers(self.cfg.max_offers, sharing)
        prompts = tuple(m.spec_prompts(self.cfg.max_offers))
        return Offer(qid, tuple(running), tuple(new), float(m.context_tokens), prompts, m.step_tokens)

    def _trace_governor(self, now: float, pool: int, bound: str) -> None:
        """A row of worker 0's governor trace when its slack, pool or bound moved (the pool of
        the group it is in: all workers' together without affinity)."""
        trace, slack, governor = self.metrics.governor, self.slack(0), self.governors[0]
        if not trace or (trace[-1][1], trace[-1][2], trace[-1][5]) != (slack, pool, bound):
            trace.append((now, slack, pool, governor.last_growth, governor.windows, bound))
