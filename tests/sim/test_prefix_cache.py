"""A child's prompt extends its parent's: the shared prefix comes from the radix cache."""

from tests.sim.conftest import req, run_all


def test_child_hits_parent_path(engine_factory):
    engine = engine_factory()
    engine.submit(req("parent", [("q", 200)], 80, segment="n1"), 0.0)
    (done,) = run_all(engine)
    assert done.cached_tokens == 0
    engine.submit(req("child", [("q", 200), ("n1", 80)], 10, segment="n2"), engine.clock_s)
    (child,) = run_all(engine)
    assert child.prompt_tokens == 280
    assert child.cached_tokens == 279  # SGLang matches at most len(prompt) - 1


def test_siblings_share_the_question(engine_factory):
    engine = engine_factory()
    engine.submit(req("a", [("q", 300)], 5), 0.0)
    run_all(engine)
    engine.submit(req("b", [("q", 300), ("other", 40)], 5), engine.clock_s)
    (b,) = run_all(engine)
    assert b.cached_tokens == 300
    assert engine.stats.cache_hit_rate == 300 / 640


def test_aborted_partial_output_is_reused(engine_factory):
    engine = engine_factory()
    engine.submit(req("a", [("q", 100)], 200, segment="n1"), 0.0)
    t = engine.next_event_s()
    engine.advance_to(t)  # prefill done
    engine.advance_to(t + 0.5)  # some decode steps
    engine.abort("a", t + 0.5)
    (aborted,) = run_all(engine)
    assert aborted.reason == "abort" and 0 < aborted.generated < 200
    # The partial output stays cached: a prompt over it reuses what was computed.
    engine.submit(req("again", [("q", 100), ("n1", 200)], 1, segment="x"), engine.clock_s)
    (again,) = run_all(engine)
    assert again.cached_tokens == 100 + aborted.generated
