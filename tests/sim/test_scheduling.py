"""The simulated engine's scheduling: SGLang-like by default (priority admission, every admitted
sequence decodes every step), per-step pausing only when asked; and the step accounting the
TPOT governor reads (measured step time vs. the same step without the speculative work)."""

import pytest

from spex.proto.messages import PRIMARY
from spex.shared.roofline.capacity import TpotGovernor
from tests.sim.conftest import req, run_all


def _mix(engine, spec=12, spec_priority=1):
    engine.submit(req("p", [("q", 200)], 100, priority=PRIMARY, max_new_tokens=256), 0.0)
    for i in range(spec):
        engine.submit(req(f"s{i}", [("q", 200)], 100, segment=f"s{i}", priority=spec_priority), 0.0)
    return {c.rid: c for c in run_all(engine)}


def test_sglang_scheduling_decodes_every_admitted_sequence_every_step(engine_factory):
    done = _mix(engine_factory())
    # Same prompt, same length, all admitted at once: they finish in the same step.
    assert len({c.time_s for c in done.values()}) == 1
    paused = _mix(engine_factory(scheduling="paused", spec_step_slack=0.05))
    assert paused["p"].time_s < max(c.time_s for c in paused.values())  # speculation waited


def test_speculation_slows_primary_steps_and_the_engine_says_by_how_much(engine_factory):
    alone = engine_factory()
    _mix(alone, spec=0)
    s = alone.stats
    assert s.primary_steps > 0 and s.primary_step_s == pytest.approx(s.primary_alone_s)
    busy = engine_factory()
    _mix(busy, spec=24)
    s = busy.stats
    inflation = s.primary_step_s / s.primary_alone_s - 1
    assert 0.02 < inflation < 1.0  # 24 extra sequences of full multi-head KV cost a few percent or more
    assert s.primary_alone_s == pytest.approx(alone.stats.primary_alone_s)  # the same primary work


def test_admission_follows_speculative_priority(engine_factory):
    engine = engine_factory(max_running=2)
    engine.submit(req("p", [("q", 50)], 30, priority=PRIMARY), 0.0)
    engine.submit(req("far", [("q", 50)], 30, segment="far", priority=9), 0.0)
    engine.submit(req("near", [("q", 50)], 30, segment="near", priority=2), 0.0)
    done = {c.rid: c.time_s for c in run_all(engine)}
    assert done["near"] < done["far"]  # submitted later, admitted first


def test_governor_raises_slack_under_the_target_and_lowers_it_over():
    g = TpotGovernor(target=0.05, slack=0.10, window=4)
    g.observe(4, measured_s=1.01, alone_s=1.0, limited=True)  # +1%: room for more, gently
    assert g.slack == pytest.approx(0.10 + 0.5 * 0.04)
    g.observe(4, measured_s=1.09, alone_s=1.0, limited=False)  # +9%: back off fast, limited or not
    assert g.slack == pytest.approx(0.12 - 1.0 * 0.04)
    g.observe(4, measured_s=1.10, alone_s=1.0, limited=False)
    assert g.slack == pytest.approx(0.08 - 0.05)
    g.observe(4, measured_s=1.25, alone_s=1.0, limited=False)
    assert g.slack == pytest.approx(g.min_slack) and g.min_slack < 0  # no room beside primaries; clamped
    g.observe(2, measured_s=1.0, alone_s=1.0, limited=True)  # half a window: no move yet
    assert g.slack == g.min_slack and g.inflation == pytest.approx(0.0)


def test_governor_does_not_wind_up_while_speculation_never_filled_its_pool():
    g = TpotGovernor(target=0.05, slack=0.10, window=4)
    for _ in range(10):
        g.observe(4, measured_s=1.0, alone_s=1.0, limited=False)
    assert g.slack == pytest.approx(0.10)
