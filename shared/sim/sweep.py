"""Measure an engine's concurrency knee by sweeping concurrency (the roofline T2 uses).

Runs `n` requests of `ctx` prompt tokens each through a fresh engine and measures the mean
decode step (time per output token). The knee is the largest `n` whose step stays within
(1 + slack) of the single-request step. For the simulated engine this is a measurement of the
model in `spex.shared.roofline.hardware`; the same procedure applies to a real engine.
"""

from __future__ import annotations

from spex.shared.roofline.hardware import Profile
from spex.shared.sim.engine import EngineConfig, SimEngine, SimRequest

__all__ = ["measure_knee", "measure_tpot_s"]


def measure_tpot_s(profile: Profile, concurrency: int, ctx: int, tokens: int = 32) -> float:
    engine = SimEngine(profile, EngineConfig(max_running=max(256, concurrency)))
    for i in range(concurrency):
        engine.submit(SimRequest(f"r{i}", ((f"p{i}", ctx),), f"o{i}", tokens, tokens), 0.0)
    tpots = []
    while (t := engine.next_event_s()) is not None:
        tpots += [c.tpot_s for c in engine.advance_to(t) if c.tpot_s is not None]
    return sum(tpots) / len(tpots)


def measure_knee(profile: Profile, ctx: int = 512, slack: float = 0.10, limit: int = 512) -> int:
    base = measure_tpot_s(profile, 1, ctx)
    knee = 1
    for n in range(2, limit + 1):
        if profile.kv_capacity_tokens < n * (ctx + 64):
            break
        if measure_tpot_s(profile, n, ctx) > (1 + slack) * base:
            break
        knee = n
    return knee
