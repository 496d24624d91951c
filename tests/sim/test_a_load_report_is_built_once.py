"""An engine's load and the worker's report of it come from one builder: the simulated engine's
load counts its primary requests and their context, its speculative ones and its counters, and
the report carries every field of the load unchanged, with what the worker holds."""

from dataclasses import asdict

from spex.proto.messages import PRIMARY
from tests.sim.conftest import req, run_all


def test_the_load_and_its_report(engine_factory):
    engine = engine_factory()
    engine.submit(req("p", [("q", 200)], 100, priority=PRIMARY, max_new_tokens=64), 0.0)
    for i in range(3):
        engine.submit(req(f"s{i}", [("q", 200)], 100, segment=f"s{i}", priority=1), 0.0)
    load = engine.load()
    assert (load.primary, load.spec, load.running + load.waiting) == (1, 3, 4)
    assert load.primary_ctx == 200  # its prompt, nothing generated yet
    run_all(engine)
    done = engine.load()
    assert (done.primary, done.spec, done.running, done.waiting, done.primary_ctx) == (0, 0, 0, 0, 0)
    assert done.primary_steps == engine.stats.primary_steps > 0
    assert done.prefix_cache_hit_rate == engine.stats.cache_hit_rate
    event = load.event("load/w/1", "w", jobs_done=7, jobs=4, slots=8, queries=2)
    assert {k: getattr(event, k) for k in asdict(load)} == asdict(load)
    assert (event.worker, event.jobs_done, event.jobs, event.slots, event.queries) == ("w", 7, 4, 8, 2)
