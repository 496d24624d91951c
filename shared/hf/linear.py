"""The forward pass's linear layers: several torch `Linear`s that read the same input, fused
into one (q, k and v; gate and up), run by `linear.c` over packed weights — batch-invariant by
construction, at any row count — or, where the kernels do not build, by torch.
"""

from __future__ import annotations

import ctypes
from typing import Any

import torch

from spex.shared.hf import kernels

__all__ = ["PackedLinear", "TorchLinear", "make_linear"]


def _fused(modules: list[torch.nn.Linear]) -> tuple[torch.Tensor, torch.Tensor | None]:
    weight = (
        torch.cat([m.weight.detach() for m in modules]) if len(modules) > 1 else modules[0].weight.detach()
    )
    if all(m.bias is None for m in modules):
        return weight.contiguous(), None
    biases = [m.bias.detach() if m.bias is not None else weight.new_zeros(m.out_features) for m in modules]
    return weight.contiguous(), torch.cat(biases).contiguous()


class PackedLinear:
    """`modules` fused, their weights packed once for `spex_linear`: x [rows, in] -> [rows, out]."""

    def __init__(self, library: ctypes.CDLL, modules: list[torch.nn.Linear]) -> None:
        weight, self.bias = _fused(modules)
        self.fn = library.spex_linear
        self.out_features, self.in_features = weight.shape
        self.dtype = weight.dtype
        code = ctypes.c_int(kernels.DTYPES[weight.dtype])
        size = library.spex_packed_size(
            ctypes.c_int64(self.out_features), ctypes.c_int64(self.in_features), code
        )
        self.packed = torch.empty(size, dtype=weight.dtype)
        library.spex_pack(
            ctypes.c_void_p(weight.data_ptr()), ctypes.c_int64(self.out_features),
            ctypes.c_int64(self.in_features), code, ctypes.c_void_p(self.packed.data_ptr()),
        )  # fmt: skip
        self._code = code
        self._bias = ctypes.c_void_p(self.bias.data_ptr() if self.bias is not None else None)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        rows = x.shape[0]
        y = torch.empty(rows, self.out_features, dtype=self.dtype)
        self.fn(
            ctypes.c_int64(rows), ctypes.c_int64(self.out_features), ctypes.c_int64(self.in_features),
            self._code, ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(self.packed.data_ptr()),
            self._bias, ctypes.c_void_p(y.data_ptr()), ctypes.c_int(torch.get_num_threads()),
        )  # fmt: skip
        return y


class TorchLinear:
    """`modules` fused, run by torch; a pass of fewer than `rows` rows is padded to it (the row
    count from which this CPU's GEMM is batch-invariant, measured by the runner)."""

    def __init__(self, modules: list[torch.nn.Linear]) -> None:
        weight, bias = _fused(modules)
        self.linear = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
        self.linear.weight = torch.nn.Parameter(weight, requires_grad=False)
        if bias is not None:
            self.linear.bias = torch.nn.Parameter(bias, requires_grad=False)
        self.rows = 1

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        if n < self.rows:
            x = torch.cat([x, x.new_zeros(self.rows - n, *x.shape[1:])])
        return self.linear(x)[:n]


def make_linear(modules: list[torch.nn.Linear]) -> Any:
    weight = modules[0].weight
    library = kernels.library(weight.dtype, weight.device)
    return PackedLinear(library, modules) if library is not None else TorchLinear(modules)
