"""The forward pass's per-row operations between its matrix products: RMSNorm (with the
residual add before it), the rotary embedding of q and k, and the gated activation.

`TorchElementwise` runs them as the transformers modules do (the CPU's path). On a GPU each is
several small kernels — HF's RMSNorm alone is eight — and a decode step of a 7B model would
launch over a thousand, most of them on a few kilobytes: under a CUDA graph the launches still
cost a few microseconds each, milliseconds a step, which would flatten the measured step curve
for the wrong reason. `triton_elementwise.TritonElementwise` fuses each into one kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch

__all__ = ["Elementwise", "RMSNorm", "TorchElementwise"]


class RMSNorm(Protocol):
    """A model's RMSNorm module (`LlamaRMSNorm`, `Qwen3RMSNorm`): called on a tensor; its weight
    and epsilon are what the fused kernel reads."""

    @property
    def weight(self) -> torch.Tensor: ...

    @property
    def variance_epsilon(self) -> float: ...

    def __call__(self, x: torch.Tensor) -> torch.Tensor: ...


class Elementwise(Protocol):
    def norm(self, x: torch.Tensor, module: RMSNorm) -> torch.Tensor:
        """`module`'s RMSNorm over `x`'s last dimension."""
        ...

    def add_norm(
        self, x: torch.Tensor, residual: torch.Tensor, module: RMSNorm
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(RMSNorm of `residual + x`, `residual + x`)."""
        ...

    def rope(
        self, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """q [rows, heads, d] and k [rows, kv_heads, d] rotated; cos and sin [rows, d]."""
        ...

    def silu_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        """[rows, 2 × width] -> act(gate) × up [rows, width] (act: SiLU, but for a model with
        another activation on torch's path)."""
        ...


class TorchElementwise:
    def __init__(self, act: Callable[[torch.Tensor], torch.Tensor] = torch.nn.functional.silu) -> None:
        self.act = act  # the model's gate activation (`mlp.act_fn`)

    def norm(self, x: torch.Tensor, module: RMSNorm) -> torch.Tensor:
        return module(x)

    def add_norm(
        self, x: torch.Tensor, residual: torch.Tensor, module: RMSNorm
    ) -> tuple[torch.Tensor, torch.Tensor]:
        residual = residual + x
        return module(residual), residual

    def rope(
        self, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin = cos[:, None], sin[:, None]
        return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin

    def silu_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        gate, up = gate_up.chunk(2, dim=-1)
        return self.act(gate) * up


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
