"""A generator's in-process engine is given the step curve it publishes: its primary steps are
counted against it too (what they would have taken without speculative rows), so the load it
reports carries the counterfactual the allocator's TPOT governor feeds on (before: never set
in the services, and the load left the counters out: the governor saw no step and held its
starting slack)."""

import asyncio
import json

import structlog

from spex.proto.messages import SPECULATIVE
from spex.services.generator.step_curve import publish_curve
from spex.shared.hf.engine import HFEngine
from spex.shared.hf.threaded import ThreadedEngine
from spex.shared.runtime.connect import redis_client
from spex.shared.runtime.settings import Settings
from tests.hf.engine_requests import drain, request


def test_the_published_curve_counts_the_engines_primary_steps(redis_url, tiny_model, tmp_path):
    cells = [
        {"batch": b, "context": c, "tpot_s": 0.001 * (1 + b / 8 + c / 4096), "tokens_per_s": 1.0}
        for b in (1, 2, 4, 8)
        for c in (64, 256)
    ]
    curve = tmp_path / "curve.json"
    curve.write_text(json.dumps({"meta": {"engine": "tiny"}, "cells": cells}))
    settings = Settings(redis_url=redis_url, engine="hf", model=tiny_model, profile_file=str(curve))
    engine = ThreadedEngine(HFEngine.from_dir(tiny_model))

    async def publish():
        r = redis_client(settings)
        try:
            await publish_curve(r, settings, engine, structlog.get_logger())
        finally:
            await r.aclose()

    asyncio.run(publish())
    inner = engine.engine
    assert inner.step_model is not None
    inner.submit(request(inner, "p", seed=1, max_new=8), 0.0)
    for i in range(3):
        inner.submit(request(inner, f"s{i}", seed=2 + i, priority=SPECULATIVE, max_new=8), 0.0)
    drain(inner)
    assert inner.stats.primary_steps > 0 and inner.stats.primary_alone_s > 0
    assert inner.stats.primary_alone_s <= inner.stats.primary_step_s
    load = inner.load()  # what the generator reports (before: the counters left out, always 0)
    assert (load.primary_steps, load.primary_step_s, load.primary_alone_s) == (
        inner.stats.primary_steps,
        inner.stats.primary_step_s,
        inner.stats.primary_alone_s,
    )
