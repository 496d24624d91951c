"""Decode speed of the in-process engine by batch × context: what `spex profile --engine hf`
measures and writes.

A cell submits `batch` requests at once, each with its own prompt of `context` tokens (no
prefix shared: every prompt starts with its own number) and exactly `new_tokens` to make,
and runs the engine until all finish. Its figure is the decode rate: `batch` over the mean
time per output token after the first (TPOT), the same definition a serving engine's
streamed replies give. Each cell is run `repeats` times; the median is reported.

The engine is sized to the grid (`profile_engine`): on a CPU its KV pool holds the largest
cell; on a GPU it takes what memory the model leaves (`GPU_KV_SHARE` of it), and a cell whose
prompts and outputs do not fit is skipped and named in the report (`meta.skipped`; a profile
file's reader extrapolates it along the batch). A cell's prompts are prefilled in one pass
where memory allows, so its decode steps carry no prompt rows.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from spex.bench.engine_speed import Cell
from spex.shared.content.prompts import fewest_words, filler
from spex.shared.engine.api import EngineRequest

__all__ = ["GPU_KV_SHARE", "measure_hf", "profile_engine"]

GPU_KV_SHARE = 0.8  # of the device memory the model leaves: the KV pool's (the rest: activations, graphs)
GPU_PREFILL_ROWS = 65_536  # prompt rows a GPU pass takes at most (its activations' memory)
HEAD_TOKENS = 64  # a prompt's tokens beyond `context`, at most (its number, the words' rounding)


def profile_engine(
    model_dir: str | Path,
    batches: list[int],
    contexts: list[int],
    new_tokens: int,
    device: str = "cpu",
    dtype: str | None = None,
    deterministic: bool = False,
    cuda_graphs: bool = True,
) -> Any:
    """An HFEngine that runs the grid's cells one at a time: every cell's sequences decoding
    together, its KV pool sized as the module docstring says."""
    import torch

    from spex.shared.hf.engine import HFConfig, HFEngine
    from spex.shared.hf.models import load_lm, load_tokenizer

    model = load_lm(model_dir, device, dtype)
    need = max(batches) * (max(contexts) + HEAD_TOKENS + new_tokens)
    prefill = max(batches) * (max(contexts) + HEAD_TOKENS)
    capacity = max(need, 65_536)
    if torch.device(device).type == "cuda":
        free, _ = torch.cuda.mem_get_info(torch.device(device))
        capacity = min(need, int(GPU_KV_SHARE * free / kv_bytes_per_token(model)))
        prefill = min(prefill, GPU_PREFILL_ROWS)
    config = HFConfig(
        max(batches),
        capacity,
        deterministic=deterministic,
        device=device,
        dtype=dtype,
        prefill_tokens=prefill,
        cuda_graphs=cuda_graphs,
    )
    return HFEngine(model, load_tokenizer(model_dir), config)


def kv_bytes_per_token(model: Any) -> int:
    """Keys and values of one token over all layers, in the model's dtype."""
    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    size = model.model.embed_tokens.weight.element_size()
    return 2 * c.num_hidden_layers * c.num_key_value_heads * head_dim * size


def fits(engine: Any, batch: int, context: int, new_tokens: int) -> bool:
    return batch * (context + HEAD_TOKENS + new_tokens) <= engine.capacity_tokens


def _prompt(engine: Any, head: str, context: int) -> str:
    """`context` tokens or a few more of plain text, unique from its first words."""
    return fewest_words(
        filler(context), lambda words: f"{head} " + " ".join(words), engine.count_tokens, context
    )


def _cell(engine: Any, batch: int, context: int, new_tokens: int, tag: str) -> tuple[float, float]:
    """(time per output token, time to the first token) of one run of the cell. The time per
    token is the mean step while all `batch` sequences decode and no prompt rows ride along:
    after the last first token, before the first finish (a GPU cell's prompts may take several
    passes, and a sequence done with its own decodes beside the others' prompts meanwhile)."""
    done: list[Any] = []
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
    trace, engine.trace = engine.trace, None
    together = max(c.first_token_s for c in done)
    first_done = min(c.time_s for c in done)
    steps = [t1 - t0 for t0, t1, n in trace if n == batch and t0 >= together and t1 < first_done]
    if not steps:
        raise RuntimeError(f"cell {tag}: no step with all {batch} sequences decoding (too few tokens?)")
    firsts = [c.first_token_s - c.arrival_s for c in done]
    return statistics.fmean(steps), statistics.fmean(firsts)


def measure_hf(
    engine: Any,
    batches: list[int],
    contexts: list[int],
    new_tokens: int = 32,
    repeats: int = 3,
    on_cell: Any = None,
) -> tuple[list[Cell], list[tuple[int, int]]]:
    """Each batch × context cell that fits on `engine` (an HFEngine with max_running ≥ the
    batch): the cells measured, and (batch, context) of those skipped. `on_cell(cell)` is
    called after each (progress)."""
    cells, skipped = [], []
    # Unrecorded, a cell of the first shape: the first run of a shape is slow (kernels built,
    # caches filled), and one repeat would keep it.
    _cell(engine, batches[0], contexts[0], new_tokens, "warm")
    for context in contexts:
        for batch in batches:
            if not fits(engine, batch, context, new_tokens):
                skipped.append((batch, context))
                continue
            runs = [
                _cell(engine, batch, context, new_tokens, f"{batch}x{context}/{r}") for r in range(repeats)
            ]
            tpot, first = statistics.median(t for t, _ in runs), statistics.median(f for _, f in runs)
            cells.append(Cell(batch, context, tpot, batch / tpot, first))
            engine.cache.evict(engine.cache.evictable_tokens)  # no cell reuses another's prompts
            if on_cell is not None:
                on_cell(cells[-1])
    return cells, skipped
