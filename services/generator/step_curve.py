"""The step curve a generator's engine is budgeted by, published for the allocator.

A real engine's curve comes from SPEX_PROFILE_FILE (`spex profile --json`), or else, for the
in-process engine, from a short sweep of the engine itself at the generator's start, cached
per model, engine settings and machine (`spex.shared.hf.sweep.startup_curve`). A worker that
publishes none (the simulated engine; a server with no profile file) is budgeted by the
catalog's SPEX_PROFILE, which the allocator reads itself — for a server, a guess. `spex up` says
which (`spex.shared.runtime.stack.describe_step_curve`).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from structlog.typing import FilteringBoundLogger

from spex.proto.names import Partitions, worker_curve
from spex.shared.engine.api import SERVERS
from spex.shared.roofline.measured import Cell, parse_measured
from spex.shared.runtime.settings import Settings
from spex.shared.runtime.stack import SWEEP_CACHE

__all__ = ["CURVE_TTL_S", "publish_curve"]

CURVE_TTL_S = 7 * 86_400  # a curve outlives no worker by long (a restarted one writes it again)


async def publish_curve(
    r: aioredis.Redis, settings: Settings, engine: Any, log: FilteringBoundLogger
) -> None:
    """Publish this worker's curve under `worker_curve`, measuring it first if it must; a
    profile file that does not parse is a one-line ValueError naming it."""
    text, source = None, f"worker {settings.consumer}'s curve"
    if settings.profile_file:
        text, source = Path(settings.profile_file).read_text(), f"SPEX_PROFILE_FILE {settings.profile_file!r}"
        log.info("step_curve", source="profile_file", path=settings.profile_file)
    elif settings.engine == "hf" and settings.startup_sweep:
        from spex.shared.hf.sweep import startup_curve

        inner = engine.engine  # the HFEngine in its ThreadedEngine, not yet started
        start = time.perf_counter()

        def measured_cell(cell: Cell) -> None:  # progress, in the log `spex up` quotes while it waits
            log.info(
                "step_curve_cell", batch=cell.batch, context=cell.context, tpot_ms=round(cell.tpot_s * 1e3, 1)
            )

        text, path, measured = await asyncio.to_thread(
            startup_curve, inner, settings.model, SWEEP_CACHE, measured_cell
        )
        took = round(time.perf_counter() - start, 2)
        log.info("step_curve", source="startup_sweep", path=str(path), measured_now=measured, took_s=took)
    key = Partitions(settings.partitions).home(worker_curve(settings.consumer))
    if text is None:
        await r.delete(key)  # an earlier run's curve under this name is not this engine's
        return
    # The engine counts its primary steps against the same curve (what they would have taken
    # without speculative rows): the allocator's TPOT governor reads both from its load.
    curve = parse_measured(text, source)
    if settings.engine == "hf":
        differs = curve.mode_differs(settings.deterministic, settings.dtype or None)
        if differs:
            raise ValueError(
                f"{source}: {differs}; measure it in the engine's mode (SPEX_DETERMINISTIC, SPEX_DTYPE)"
            )
        engine.engine.step_model = curve
    elif settings.engine in SERVERS:
        engine.step_model = curve
    await r.set(key, text, ex=CURVE_TTL_S)
