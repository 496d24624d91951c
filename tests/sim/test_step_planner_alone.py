"""The simulated engine's step planner on its own, with no engine: it admits waiting requests
primaries first, prefills at most `chunk_tokens` of prompt a step, and decodes once a prompt is
computed."""

from spex.proto.messages import PRIMARY, SPECULATIVE
from spex.shared.engine.api import EngineStats
from spex.shared.roofline.hardware import parse_profile
from spex.shared.sim.planning import StepPlanner
from spex.shared.sim.requests import EngineConfig
from tests.sim.conftest import req


def _planner(capacity_tokens=10_000, chunk_tokens=64):
    profile = parse_profile("Llemma-7B@A6000")
    return StepPlanner(profile, EngineConfig(mixed_chunk=False), capacity_tokens, chunk_tokens, EngineStats())


def test_prompts_are_chunked_and_primaries_admitted_first():
    planner = _planner()
    planner.waiting += [req("s", [("qs", 100)], 8, priority=SPECULATIVE, seq=1),
                        req("p", [("qp", 100)], 8, priority=PRIMARY, seq=2)]  # fmt: skip
    step = planner.plan(0.0)
    assert step is not None and step.kind == "prefill"
    assert [(r.rid, n) for r, n in step.chunks] == [("p", 64)]  # the primary first, one chunk
    assert [r.rid for r in planner.running] == ["p"] and planner.held_tokens > 0
    assert planner.stats.prompt_tokens == 100


def test_a_computed_prompt_decodes():
    planner = _planner()
    planner.waiting.append(req("p", [("q", 40)], 8, seq=1))
    first = planner.plan(0.0)
    (r, n), = first.chunks  # fmt: skip
    r.prefilled += n  # the engine commits the step
    step = planner.plan(first.end_s)
    assert step is not None and step.kind == "decode" and step.batch == [r] and step.primaries == 1

