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

from pathlib import Path
from typing import Any

from spex.shared.hf.sweep import HEAD_TOKENS

__all__ = ["GPU_KV_SHARE", "profile_engine"]

GPU_KV_SHARE = 0.8  # of the device memory the model leaves: the KV pool's (the rest: activations, graphs)
GPU_PREFILL_ROWS = 65_536  # prompt rows a GPU pass takes at most (its activations' memory)


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
