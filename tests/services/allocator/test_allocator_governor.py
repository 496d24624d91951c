"""The allocator admits each worker's speculation on the curve it published, and steers its
slack from the step times its generator reports: more speculation while primaries pay less
than SPEX_TPOT_TARGET for it, less once they pay more."""

import asyncio

from spex.proto import QueryStatsEvent, WorkerLoadEvent
from spex.proto.names import SINGLE, worker_curve
from spex.services.allocator import Allocator
from spex.shared.roofline.measured import Cell, profile_json
from spex.shared.runtime.settings import Settings


class NoRedis:
    """What the allocator's constructor touches of a client (no round trip is made here)."""

    def register_script(self, script):
        return None


def load(worker, steps, measured, alone):
    return WorkerLoadEvent(
        msg_id="m", query_id="", worker=worker, primary=1, primary_ctx=500, spec=4, running=5,
        waiting=0, kv_held=1000, kv_capacity=100_000,
        primary_steps=steps, primary_step_s=measured, primary_alone_s=alone,
    )  # fmt: skip


def test_each_workers_slack_follows_its_own_measured_inflation():
    a = Allocator(NoRedis(), Settings(consumer="alloc-0", tpot_target=0.05, tpot_slack=0.10))
    a._govern({"idle": load("idle", 0, 0.0, 0.0), "busy": load("busy", 0, 0.0, 0.0)})
    for w in ("idle", "busy"):
        a.governors[w].note_pool(demand=8, pool=4, set_by_slack=True)  # speculation wanted more
    # 32 primary steps each: the idle worker's cost +1% (room), the busy one's +30% (over).
    a._govern({"idle": load("idle", 32, 1.01, 1.0), "busy": load("busy", 32, 1.30, 1.0)})
    assert a.slack("idle") > 0.10 > a.slack("busy")
    before = a.slack("idle")
    a._govern({"idle": load("idle", 10, 0.5, 0.5)})  # a restarted generator: counters reset
    assert a.slack("idle") == before and "busy" not in a.governors  # gone: forgotten


def test_a_fixed_slack_is_kept_and_nonsense_counters_are_ignored():
    fixed = Allocator(NoRedis(), Settings(consumer="alloc-0", tpot_fixed=True, tpot_slack=0.25))
    assert fixed.slack("gen-0") == 0.25
    a = Allocator(NoRedis(), Settings(consumer="alloc-0"))
    a._govern({"w": load("w", 0, 0.0, 0.0)})
    a._govern({"w": load("w", 64, float("nan"), 1.0)})
    assert a.slack("w") == 0.10


class Curves(NoRedis):
    """Published curves by key, as the allocator reads them."""

    def __init__(self, curves):
        self.curves = curves

    async def get(self, key):
        return self.curves.get(key)


def steep_profile() -> str:
    """A CPU-like curve: a decode step grows 9% per added sequence."""
    step = {b: 0.02 * (1 + 0.09 * (b - 1)) for b in (1, 2, 4, 8, 16)}
    cells = [Cell(b, c, t, b / t) for b, t in step.items() for c in (128, 1024)]
    return profile_json(cells, {"engine": "steep"})


def stats(qid, worker, *offers):
    return QueryStatsEvent(
        msg_id="s",
        query_id=qid,
        running=[],
        offers=list(offers),
        prefix_tokens=200,
        active_jobs=1,
        worker=worker,
    )


def test_each_worker_is_admitted_on_the_curve_it_published_under_the_objective():
    r = Curves(
        {SINGLE.home(worker_curve("cpu")): steep_profile().encode(), SINGLE.home(worker_curve("bad")): b"{"}
    )
    loads = {w: load(w, 0, 0.0, 0.0) for w in ("cpu", "bad", "sim")}
    offers = [stats("q", "", 1.0, 1.0, 1.0, 0.02, 0.02)]
    for objective, expected in (("slo", 1), ("throughput", 3)):
        a = Allocator(r, Settings(consumer="alloc-0", objective=objective))
        asyncio.run(a._fetch_curves(loads))
        assert a.curves["cpu"] is not None and a.curves["bad"] is None and a.curves["sim"] is None
        cpu = loads["cpu"]
        # The governor's starting slack (+10%) buys one sequence of the steep curve, whatever
        # it is worth; the throughput objective takes the likely three.
        assert a._admit(cpu, [a._offer(m) for m in offers]).admitted == expected
        # A worker with no curve (or a bad one) is budgeted by the catalog's simulated GPU,
        # on which a 7B model's step is flat far past these few sequences.
        assert a._admit(loads["sim"], [a._offer(m) for m in offers]).admitted >= 3


def test_fuzzed_values_are_clamped():
    a = Allocator(NoRedis(), Settings(consumer="alloc-0"))
    o = a._offer(stats("q", "", float("nan"), -1.0, 7.0, 0.5))
    assert o.candidates == (0.0, 0.0, 1.0, 0.5)
