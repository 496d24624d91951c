"""A token for every sequence of a step, sampled together on the model's device.

Each row draws one uniform number by inverse CDF over its softmax at its own temperature
(greedy at 0). The number is a counter-based hash of the request's seed and the token's index
in its output (`uniforms`: SplitMix64's finalizer, computed for the whole batch with numpy),
so a request's draws depend on its seed alone — not on its batch mates, the order it was
admitted in, or a generator's state — and a request with the same seed draws the same
numbers on any device. The step's launches do not grow with the batch; the host reads the
tokens and their log-probabilities back once.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["sample", "uniforms"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # SplitMix64's increment
_MIX = (np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB))
_MASK = (1 << 64) - 1


def uniforms(seeds: list[int], counters: list[int]) -> np.ndarray:
    """One number in [0, 1) per (seed, counter), float64: SplitMix64's output for the state
    `seed + (counter + 1) × increment` (wrapping in 64 bits, as the generator does)."""
    seed = np.array([s & _MASK for s in seeds], dtype=np.uint64)
    count = np.array(counters, dtype=np.uint64) + np.uint64(1)
    with np.errstate(over="ignore"):
        z = seed + count * _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _MIX[0]
        z = (z ^ (z >> np.uint64(27))) * _MIX[1]
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * 2.0**-53


def sample(
    logits: torch.Tensor, temperatures: list[float], seeds: list[int], counters: list[int]
) -> tuple[list[int], list[float]]:
    """logits [rows, vocab] float32 -> each row's token and its log-probability (under the
    temperature-1 distribution, as a reward reads it)."""
    device = logits.device
    temps = torch.tensor(temperatures, dtype=logits.dtype).to(device, non_blocking=True)[:, None]
    draws = torch.from_numpy(uniforms(seeds, counters)).to(device=device, dtype=logits.dtype)[:, None]
    greedy = logits.argmax(dim=-1)
    cdf = torch.softmax(logits / torch.where(temps > 0, temps, 1.0), dim=-1).cumsum(dim=-1)
    picked = torch.searchsorted(cdf, draws * cdf[:, -1:], right=True)[:, 0].clamp_(max=cdf.shape[1] - 1)
    tokens = torch.where(temps[:, 0] > 0, picked, greedy)
    logprobs = torch.log_softmax(logits, dim=-1).gather(1, tokens[:, None])[:, 0]
    out = torch.stack([tokens.double(), logprobs.double()]).tolist()  # one read back
    return [int(t) for t in out[0]], out[1]
