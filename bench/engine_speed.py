"""Decode speed of the in-process engine by batch × context: what `spex profile --engine hf`
measures and writes.

A cell submits `batch` requests at once, each with its own prompt of `context` tokens (no
prefix shared: every prompt starts with its own number) and exactly `new_tokens` to make,
and runs the engine until all finish. Its figure is the decode rate: `batch` over the mean
time per output token after the first (TPOT), the same definition a serving engine's
streamed replies give. Each cell is run `repeats` times; the median is reported.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from spex.shared.engine.api import EngineRequest

__all__ = ["Cell", "measure_hf", "write_report"]


@dataclass(frozen=True)
class Cell:
    batch: int
    context: int
    tpot_s: float  # median over repeats of the mean time per output token
    tokens_per_s: float  # batch / tpot_s

    @property
    def step_ms(self) -> float:
        return self.tpot_s * 1e3


def _prompt(engine: Any, head: str, context: int) -> str:
    """`context` tokens or a few more of plain text, unique from its first words."""
    words = [f"w{n % 97}" for n in range(context)]
    low, high = 0, context  # the fewest words that reach `context` tokens
    while low < high:
        mid = (low + high) // 2
        if engine.count_tokens(f"{head} " + " ".join(words[:mid])) < context:
            low = mid + 1
        else:
            high = mid
    return f"{head} " + " ".join(words[:low])


def _cell(engine: Any, batch: int, context: int, new_tokens: int, tag: str) -> float:
    done: list[Any] = []
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
    tpots = [(c.time_s - c.first_token_s) / (c.generated - 1) for c in done if c.first_token_s is not None]
    return statistics.fmean(tpots)


def measure_hf(
    engine: Any, batches: list[int], contexts: list[int], new_tokens: int = 32, repeats: int = 3
) -> list[Cell]:
    """Each batch × context cell on `engine` (an HFEngine with max_running ≥ the batch)."""
    cells = []
    _cell(engine, 1, 16, 4, "warm")
    for context in contexts:
        for batch in batches:
            runs = [
                _cell(engine, batch, context, new_tokens, f"{batch}x{context}/{r}") for r in range(repeats)
            ]
            tpot = statistics.median(runs)
            cells.append(Cell(batch, context, tpot, batch / tpot))
            engine.cache.evict(engine.cache.evictable_tokens)  # no cell reuses another's prompts
    return cells


def write_report(cells: list[Cell], meta: dict[str, Any], path: Path) -> None:
    """The cells as JSON at `path`, and a plot of tokens/s by batch beside it (.png)."""
    rows = [{**asdict(c), "step_ms": c.step_ms} for c in cells]
    path.write_text(json.dumps({"meta": meta, "cells": rows}, indent=2))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for context in sorted({c.context for c in cells}):
        mine = [c for c in cells if c.context == context]
        ax.plot(
            [c.batch for c in mine], [c.tokens_per_s for c in mine], marker="o", label=f"context {context}"
        )
    ax.set_xlabel("batch")
    ax.set_ylabel("decode tokens/s")
    ax.set_title(str(meta.get("engine", "")))
    ax.legend()
    fig.tight_layout()
    fig.savefig(path.with_suffix(".png"))
    plt.close(fig)
