"""The allocator steers each worker's slack from the step times its generator reports: more
speculation while primaries pay less than SPEX_TPOT_TARGET for it, less once they pay more."""

from spex.proto import WorkerLoadEvent
from spex.services.allocator import Allocator
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
