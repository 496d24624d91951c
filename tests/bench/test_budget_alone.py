"""The virtual-time run's speculative budget on its own, with no run around it: given an engine,
its book and the queries' machines, it gives each query a share, none past what the query
offers, the pool within a static `k_total`; without speculation it gives no round at all."""

from spex.bench.vtime.bookkeeping import EngineBook
from spex.bench.vtime.budget import Budget
from spex.bench.vtime.config import BenchConfig
from spex.bench.vtime.content import sim_generator
from spex.bench.vtime.metrics import RunMetrics
from spex.shared.core.commands import GenerateCommand, ScoreCommand
from spex.shared.core.machine import QueryMachine
from spex.shared.core.speculation import SpecPolicy


def _budget(cfg: BenchConfig) -> tuple[Budget, dict[str, QueryMachine]]:
    gen = sim_generator(cfg)
    budget = Budget(cfg, cfg.sim_profile(), None, [gen], [EngineBook()], RunMetrics(False))
    machines = {}
    for i in range(3):
        m = QueryMachine(f"q{i}", 50, cfg.search_config(), i, speculation=SpecPolicy(cfg.speculating))
        scores = []  # the first level generated, all but one of it scored
        for first in m.start(0.0):
            if isinstance(first, GenerateCommand):
                scores += m.on_generated(first.job_id, first.node.id, "a step", 20, "stop", -0.5, 1.0)
        for k, score in enumerate(c for c in scores[:-1] if isinstance(c, ScoreCommand)):
            m.on_scored(score.node.id, 0.1 * k, 2.0)
        machines[m.query_id] = m
    return budget, machines


def test_each_query_gets_a_share_within_what_it_offers():
    cfg = BenchConfig(algorithm="rebase", target=8, mode="spex")
    budget, machines = _budget(cfg)
    shares = budget.shares(0.0, machines, {})
    assert shares is not None and set(shares) == set(machines)
    offered = {q: len(m.spec_offers(cfg.max_offers)[1]) for q, m in machines.items()}
    assert all(0 <= shares[q] <= offered[q] for q in machines) and sum(shares.values()) > 0
    assert budget.metrics.pool_peak >= sum(shares.values())
    assert budget.slack(0) == budget.governors[0].slack  # the governor's, with no fixed slack


def test_a_static_pool_bounds_the_shares():
    cfg = BenchConfig(algorithm="rebase", target=8, mode="spex", k_total=2)
    budget, machines = _budget(cfg)
    shares = budget.shares(0.0, machines, {})
    assert shares is not None and sum(shares.values()) == 2


def test_without_speculation_there_is_no_round():
    cfg = BenchConfig(algorithm="rebase", target=8, mode="baseline")
    budget, machines = _budget(cfg)
    assert budget.shares(0.0, machines, {}) is None
