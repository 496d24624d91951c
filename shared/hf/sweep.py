"""The in-process engine's decode step by batch × context: the cells of a step-curve profile.

A cell submits `batch` requests at once, each with its own prompt of `context` tokens (no
prefix shared: every prompt starts with its own number) and exactly `new_tokens` to make,
and runs the engine until all finish. Its figure is the decode rate: `batch` over the mean
time per output token after the first (TPOT), the same definition a serving engine's
streamed replies give. Each cell is run `repeats` times; the median is reported.

`spex profile --engine hf` sweeps an engine sized to its grid (`bench.hf_profile`); a
generator with no profile file sweeps its own engine at start (`startup_curve`), once per
model, engine settings and machine: the result is cached as a profile file.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from spex.shared.content.prompts import fewest_words, filler
from spex.shared.engine.api import Completion, EngineRequest
from spex.shared.roofline.measured import Cell, profile_json

if TYPE_CHECKING:
    from spex.shared.hf.engine import HFEngine

__all__ = ["HEAD_TOKENS", "fits", "measure_hf", "startup_curve"]

HEAD_TOKENS = 64  # a prompt's tokens beyond `context`, at most (its number, the words' rounding)
# The start-up sweep: short, enough for the controller's batch × context curve — every batch
# up to the engine's at a short context, two at a longer one (the file's reader extends them
# along the batch). A cell decodes a few steps more than its prompts take passes to prefill
# (the engine's `prefill_tokens` a pass), so some steps run all of its sequences.
STARTUP_BATCHES = (1, 2, 4, 8, 16, 32, 64)
STARTUP_CONTEXTS = (64, 256)
STARTUP_LONG_BATCHES = (1, 4)  # at the longer context
STARTUP_STEPS = 4


def fits(engine: HFEngine, batch: int, context: int, new_tokens: int) -> bool:
    return batch * (context + HEAD_TOKENS + new_tokens) <= engine.capacity_tokens


def _prompt(engine: HFEngine, head: str, context: int) -> str:
    """`context` tokens or a few more of plain text, unique from its first words."""
    return fewest_words(
        filler(context), lambda words: f"{head} " + " ".join(words), engine.count_tokens, context
    )


def _cell(engine: HFEngine, batch: int, context: int, new_tokens: int, tag: str) -> tuple[float, float]:
    """(time per output token, time to the first token) of one run of the cell. The time per
    token is the mean step while all `batch` sequences decode and no prompt rows ride along:
    after the last first token, before the first finish (a GPU cell's prompts may take several
    passes, and a sequence done with its own decodes beside the others' prompts meanwhile)."""
    done: list[Completion] = []
    engine.trace = []
    for i in range(batch):
        rid = f"{tag}/{i}"
        text = _prompt(engine, rid, context)
        request = EngineRequest(
            rid, ((rid, 1),), rid, new_tokens, new_tokens, seed=i, temperature=0.0, text=(text,)
        )
        engine.submit(request, engine.clock_s)
    done += engine.advance_to(float("inf"))
    if engine.waiting:  # a cell is `batch` sequences decoding together, or it is not this cell
        raise RuntimeError(f"cell {tag}: {engine.waiting} of {batch} requests could not be admitted at once")
    while len(done) < batch:
        done += engine.advance_to(float("inf"))
    trace, engine.trace = engine.trace or [], None
    first_s = {c.rid: c.first_token_s for c in done if c.first_token_s is not None}
    if len(first_s) < len(done):
        raise RuntimeError(f"cell {tag}: a request ended before its first token")
    together = max(first_s.values())
    first_done = min(c.time_s for c in done)
    steps = [t1 - t0 for t0, t1, n in trace if n == batch and t0 >= together and t1 < first_done]
    if not steps:
        raise RuntimeError(f"cell {tag}: no step with all {batch} sequences decoding (too few tokens?)")
    firsts = [first_s[c.rid] - c.arrival_s for c in done]
    return statistics.fmean(steps), statistics.fmean(firsts)


def measure_hf(
    engine: HFEngine,
    batches: list[int],
    contexts: list[int],
    new_tokens: int | Callable[[int, int], int] = 32,
    repeats: int = 3,
    on_cell: Callable[[Cell], None] | None = None,
    grid: list[tuple[int, int]] | None = None,
) -> tuple[list[Cell], list[tuple[int, int]]]:
    """Each batch × context cell (or each (batch, context) of `grid`) that fits on `engine`
    (an HFEngine with max_running ≥ the batch): the cells measured, and (batch, context) of
    those skipped. `new_tokens`: a count, or a function of (batch, context) giving one.
    `on_cell(cell)` is called after each (progress)."""
    tokens = new_tokens if callable(new_tokens) else lambda _b, _c: new_tokens
    cells, skipped = [], []
    # Unrecorded, a cell of the first shape: the first run of a shape is slow (kernels built,
    # caches filled), and one repeat would keep it.
    _cell(engine, batches[0], contexts[0], tokens(batches[0], contexts[0]), "warm")
    for batch, context in grid or [(b, c) for c in contexts for b in batches]:
        n = tokens(batch, context)
        if not fits(engine, batch, context, n):
            skipped.append((batch, context))
            continue
        runs = [_cell(engine, batch, context, n, f"{batch}x{context}/{r}") for r in range(repeats)]
        tpot, first = statistics.median(t for t, _ in runs), statistics.median(f for _, f in runs)
        cells.append(Cell(batch, context, tpot, batch / tpot, first))
        engine.cache.evict(engine.cache.evictable_tokens)  # no cell reuses another's prompts
        if on_cell is not None:
            on_cell(cells[-1])
    return cells, skipped


def startup_curve(
    engine: HFEngine,
    model_dir: str | Path,
    cache_dir: str | Path,
    on_cell: Callable[[Cell], None] | None = None,
) -> tuple[str, Path, bool]:
    """The step curve of `engine` (an HFEngine loaded from `model_dir`, idle) as a profile
    file's text, the file it is cached in, and whether it was measured now (else read from
    the cache); `on_cell(cell)` after each cell measured (progress). Its stats are reset after
    a sweep, so the TPOT governor never sees it."""
    batches = [b for b in STARTUP_BATCHES if b <= engine.config.max_running] or [1]
    key = _cache_key(engine, model_dir, batches)
    path = Path(cache_dir).expanduser() / f"{key}.json"
    if path.is_file():
        return path.read_text(), path, False

    def new_tokens(batch: int, context: int) -> int:
        return -(-batch * (context + HEAD_TOKENS) // engine.config.prefill_tokens) + STARTUP_STEPS

    short, long = STARTUP_CONTEXTS
    grid = [(b, short) for b in batches] + [(b, long) for b in STARTUP_LONG_BATCHES if b in batches]
    cells, skipped = measure_hf(engine, batches, [short], new_tokens, repeats=1, on_cell=on_cell, grid=grid)
    engine.stats = type(engine.stats)()  # the governor's counters start at the first job
    meta = {
        "engine": f"{Path(model_dir).name}@hf ({_dtype(engine)}, {engine.config.device}, start-up sweep)",
        "steps_beyond_prefill": STARTUP_STEPS,
        "repeats": 1,
        "kv_capacity_tokens": engine.capacity_tokens,
        "skipped": [list(cell) for cell in skipped],
    }
    text = profile_json(cells, meta)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.replace(path)  # whole or not at all: a generator started beside it reads either
    return text, path, True


def _dtype(engine: HFEngine) -> str:
    return str(engine.runner.dtype).removeprefix("torch.")


def _cache_key(engine: HFEngine, model_dir: str | Path, batches: list[int]) -> str:
    """What the curve depends on: the model (its config and weights' sizes and times), the
    engine's settings, this machine and its threads, and the grid."""
    import torch

    model = Path(model_dir).resolve()
    files = sorted((f.name, f.stat().st_size, int(f.stat().st_mtime)) for f in model.iterdir() if f.is_file())
    c = engine.config
    parts = {
        "model": str(model),
        "files": files,
        "engine": [c.max_running, c.deterministic, c.device, _dtype(engine), engine.capacity_tokens],
        "kernels": os.environ.get("SPEX_KERNELS", ""),
        "machine": [platform.node(), platform.machine(), platform.processor(), os.cpu_count()],
        "threads": torch.get_num_threads(),
        "grid": [batches, STARTUP_CONTEXTS, STARTUP_LONG_BATCHES, STARTUP_STEPS, c.prefill_tokens],
    }
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()
    return f"{model.name}-{digest[:16]}"
