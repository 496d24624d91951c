"""Abort semantics: a waiting request ends at once; a running one after one more step."""

from tests.sim.conftest import req, run_all


def test_running_request_frees_its_slot_after_one_more_step(engine_factory):
    engine = engine_factory()
    engine.submit(req("a", [("qa", 100)], 100), 0.0)
    engine.submit(req("b", [("qb", 100)], 100), 0.0)
    engine.advance_to(engine.next_event_s())  # prefill: both running, one token each
    t_prefill = engine.clock_s
    # Decode step j (from 0) has contexts of 101 + j tokens per sequence.
    ends, t = [], t_prefill
    for j in range(100):
        t += engine.profile.decode_step_s(2, 2 * (101 + j))
        ends.append(t)
    abort_at = (ends[9] + ends[10]) / 2  # while step 10 is in flight
    engine.advance_to(abort_at)
    assert engine.abort("a", abort_at) == []
    assert engine.running == 2
    completions = []
    while not completions:
        completions = engine.advance_to(engine.next_event_s())
    (aborted,) = completions
    # Step 10 (in flight) finishes, then exactly one more step (11), then the slot is free.
    assert aborted.reason == "abort"
    assert aborted.time_s == ends[11]
    assert aborted.generated == 1 + 12
    assert engine.running == 1
    (b,) = run_all(engine)
    assert b.rid == "b" and b.reason == "finished" and b.generated == 100


def test_abort_of_waiting_request_is_immediate(engine_factory):
    engine = engine_factory(max_running=1)
    engine.submit(req("a", [("q", 100)], 50), 0.0)
    engine.submit(req("b", [("q", 100)], 50), 0.0)
    (b,) = engine.abort("b", 0.0)
    assert b.reason == "abort" and b.generated == 0
    assert [c.rid for c in run_all(engine)] == ["a"]


def test_unknown_or_repeated_abort_is_a_no_op(engine_factory):
    engine = engine_factory()
    assert engine.abort("nope", 0.0) == []
    engine.submit(req("a", [("q", 100)], 50), 0.0)
    engine.advance_to(engine.next_event_s())
    engine.abort("a", engine.clock_s)
    assert engine.abort("a", engine.clock_s) == []
