"""The engine a generator runs on, built from the one SPEX_ENGINE names: `sim` (the simulated
GPU in scaled real time), `hf` (the in-process PyTorch engine in a worker thread), `vllm` or
`sglang` (a serving engine at SPEX_ENGINE_URL)."""

from __future__ import annotations

from collections.abc import Callable

from spex.shared.engine.api import ENGINES, EngineName
from spex.shared.engine.live import LiveEngine
from spex.shared.roofline.hardware import parse_profile
from spex.shared.runtime.settings import Settings
from spex.shared.sim.engine import EngineConfig, SimEngine
from spex.shared.sim.realtime import RealtimeEngine

__all__ = ["ENGINE_BUILDERS", "live_engine"]


def live_engine(settings: Settings) -> LiveEngine:
    """The engine SPEX_ENGINE names (an unknown name: a one-line ValueError, never a default)."""
    build = ENGINE_BUILDERS.get(settings.engine)
    if build is None:
        raise ValueError(f"SPEX_ENGINE: unknown engine {settings.engine!r}; known: {' | '.join(ENGINES)}")
    return build(settings)


def _sim_engine(settings: Settings) -> LiveEngine:
    sim = EngineConfig(spec_step_slack=settings.tpot_slack)  # as in the virtual-time bench
    return RealtimeEngine(SimEngine(parse_profile(settings.profile), sim), settings.time_scale)


def _served_engine(settings: Settings) -> LiveEngine:
    from spex.shared.serving import open_engine

    s = settings
    if "," in s.engine_url:  # `spex up` gives each generator its own; a worker alone takes one
        raise ValueError(f"SPEX_ENGINE_URL: one URL per generator, not a list ({s.engine_url!r})")
    engine = open_engine(s.engine, s.engine_url, s.engine_timeout_s, s.model, s.deterministic)
    engine.wait_s = s.engine_wait_s  # a server still loading its model answers after minutes
    return engine


def _hf_engine(settings: Settings) -> LiveEngine:
    from spex.shared.hf.engine import HFConfig, HFEngine
    from spex.shared.hf.threaded import ThreadedEngine

    config = HFConfig(
        settings.max_running,
        deterministic=settings.deterministic,
        device=settings.device,
        dtype=settings.dtype or None,
        cuda_graphs=settings.cuda_graphs,
    )
    return ThreadedEngine(HFEngine.from_dir(settings.model, config))


# Each engine a generator runs on, by its SPEX_ENGINE name (a test holds the keys to ENGINES).
ENGINE_BUILDERS: dict[EngineName, Callable[[Settings], LiveEngine]] = {
    "sim": _sim_engine,
    "hf": _hf_engine,
    "vllm": _served_engine,
    "sglang": _served_engine,
}
