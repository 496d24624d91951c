"""The forward pass's linear layers: several torch `Linear`s that read the same input, fused
into one (q, k and v; gate and up), run by `linear.c` over packed weights — batch-invariant by
construction, at any row count — or, where the kernels do not build (or on a GPU), by torch.

Torch's GEMM is batch-invariant only from some number of rows up (this CPU's takes another
kernel for 1 to 3 rows in float32): deterministic mode measures that number for each fused
weight (`invariant_rows`) and pads a smaller pass to it — a check of the machine's kernels over
random inputs, not a proof.
"""

from __future__ import annotations

import ctypes

import torch
import torch.nn.functional as F

from spex.shared.hf import kernels

__all__ = ["PackedLinear", "TorchLinear", "checked_counts", "invariant_rows", "make_linear"]


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

    rows = 1  # batch-invariant at any row count: never padded

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
    count from which the machine's GEMM is batch-invariant, measured in deterministic mode).
    The modules' own weights become views of the fused one, so the weights are held once."""

    def __init__(self, modules: list[torch.nn.Linear]) -> None:
        self.weight, self.bias = _fused(modules)
        at = 0
        for m in modules:  # each module's weight and bias now a slice of the fused ones
            size = m.out_features
            m.weight = torch.nn.Parameter(self.weight[at : at + size], requires_grad=False)
            if m.bias is not None and self.bias is not None:
                m.bias = torch.nn.Parameter(self.bias[at : at + size], requires_grad=False)
            at += size
        self.rows = 1

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        if n < self.rows:
            x = torch.cat([x, x.new_zeros(self.rows - n, *x.shape[1:])])
        return F.linear(x, self.weight, self.bias)[:n]


def make_linear(modules: list[torch.nn.Linear]) -> PackedLinear | TorchLinear:
    weight = modules[0].weight
    library = kernels.library(weight.dtype, weight.device)
    return PackedLinear(library, modules) if library is not None else TorchLinear(modules)


def checked_counts(most: int) -> list[int]:
    """The row counts `invariant_rows` checks: every one up to 32, then steps of 8, and `most`."""
    return sorted({*range(1, min(most, 32) + 1), *range(40, most, 8), most})


def invariant_rows(linear: torch.nn.Linear | TorchLinear, most: int = 16, trials: int = 8) -> int:
    """The fewest rows from which `linear` (a `torch.nn.Linear` or a `TorchLinear`: its
    `weight` and a call) computes each row the same bits whatever the number of rows (checked
    at `checked_counts(most)`, against a batch of twice the most or of 32) and wherever the row
    sits; 0 if none. Over `trials` random batches (two past 32 rows, whose every check already
    sees that many rows), and a lone row at each of a batch's first 32 places: a different
    accumulation order shows only where it moves a rounding of the output, which one batch can
    miss (bfloat16 on this CPU: a lone row of a 1536-wide down-projection differs for about one
    random input in ten)."""
    weight = linear.weight
    gen = torch.Generator(device=weight.device).manual_seed(0)
    counts = checked_counts(most)
    big = max(2 * most, 32)
    same = dict.fromkeys(counts, True)
    with torch.inference_mode():
        for trial in range(trials):
            x = torch.randn(big, weight.shape[1], generator=gen, device=weight.device).to(weight.dtype)
            ref = linear(x)
            alone = (torch.equal(linear(x[i : i + 1]), ref[i : i + 1]) for i in range(min(big, 32)))
            same[1] = same[1] and all(alone)
            for m in counts[1:] if trial < 2 else [c for c in counts[1:] if c <= 32]:
                same[m] = same[m] and (
                    torch.equal(linear(x[:m]), ref[:m]) and torch.equal(linear(x[big - m :]), ref[big - m :])
                )
    return next((m for m in counts if all(same[c] for c in counts if c >= m)), 0)
