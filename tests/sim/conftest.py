import pytest

from spex.shared.roofline.hardware import parse_profile
from spex.shared.sim.engine import EngineConfig, SimEngine, SimRequest


@pytest.fixture
def engine_factory():
    def make(profile="Llemma-7B@A6000", **config):
        return SimEngine(parse_profile(profile), EngineConfig(**config))

    return make


def run_all(engine):
    """Drive an engine with no further arrivals until it is idle; return its completions."""
    out = []
    while (t := engine.next_event_s()) is not None:
        out.extend(engine.advance_to(t))
    return out


def req(rid, prompt, output_tokens, segment=None, **kw):
    return SimRequest(rid, tuple(prompt), segment or rid, output_tokens, **kw)
