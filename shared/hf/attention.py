"""Attention for a pass of the engine's forward: every row at once, over segments of KV.

A row is one token: a decode row (a sequence's newest token) or a prefill row (a token of a
prompt piece). It attends to a list of segments in order — the prompt pieces it shares with
other sequences, by reference, then the segment its own token goes into, up to and including
that token. A `Segment` holds keys [layers, kv_heads, capacity / 16, head_dim, 16] (blocks
of 16 positions, transposed, so the kernel scores a block as 16 vector lanes over memory read
front to back) and values [layers, kv_heads, capacity, head_dim], in the model's dtype.

`KernelAttention` runs `attention.c` (`kernels`): one call per layer for the whole pass,
batch-invariant by construction (each row's reduction order is set by its own length alone).
Where the kernels do not build, or on a GPU, torch runs the attention over a KV pool instead
(`paged`); a `Pass` describes the rows to both.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

import numpy as np
import torch

from spex.shared.hf import kernels

__all__ = ["KV", "Pass", "Segment", "KernelAttention", "make_attention"]


BLOCK = 16  # positions the kernel scores at once: a segment's capacity is a multiple of it


class KV(Protocol):
    """Keys and values of consecutive positions: a `Segment`, or a `paged.PagedSegment`."""

    length: int

    @property
    def capacity(self) -> int: ...

    def grow(self, tokens: int) -> None: ...

    def release(self) -> None: ...


S = TypeVar("S", bound=KV)

# A kernel pass's segment tables (keys, values, capacities, lengths, first segment, segment
# count, visible length per row) and the pointers to them the kernel is called with.
KernelPlan = tuple[list[np.ndarray], list[ctypes.c_void_p]]


@dataclass(eq=False)
class Segment:
    """Positions [0, length) of keys [layers, kv_heads, capacity / BLOCK, head_dim, BLOCK] and
    values [layers, kv_heads, capacity, head_dim]."""

    keys: torch.Tensor
    values: torch.Tensor
    length: int = 0

    @classmethod
    def empty(
        cls,
        layers: int,
        kv_heads: int,
        head_dim: int,
        tokens: int,
        dtype: torch.dtype,
        device: torch.device | str,
    ) -> Segment:
        """Room for at least `tokens` (rounded up to a whole block)."""
        capacity = max(BLOCK, -(-tokens // BLOCK) * BLOCK)
        keys = torch.empty(layers, kv_heads, capacity // BLOCK, head_dim, BLOCK, dtype=dtype, device=device)
        values = torch.empty(layers, kv_heads, capacity, head_dim, dtype=dtype, device=device)
        return cls(keys, values)

    @property
    def capacity(self) -> int:
        return int(self.values.shape[2])

    def release(self) -> None:
        """Nothing to hand back: its tensors go with it."""

    def grow(self, tokens: int) -> None:
        """Room for `tokens` in all; at least doubled, keeping what is there."""
        if tokens <= self.capacity:
            return
        layers, kv_heads, blocks, head_dim, _ = self.keys.shape
        size = max(tokens, 2 * self.capacity)
        new = Segment.empty(layers, kv_heads, head_dim, size, self.keys.dtype, self.keys.device)
        new.keys[:, :, :blocks] = self.keys
        new.values[:, :, : self.length] = self.values[:, :, : self.length]
        self.keys, self.values = new.keys, new.values


@dataclass
class Pass(Generic[S]):
    """The rows of one forward pass, grouped in runs: a run is consecutive tokens of one
    sequence or piece, written into `segments[-1]` from `start` on and attending to every
    segment before it in full. Built with `add`; `positions` are each row's place in its
    sequence (for the rotary embedding)."""

    tokens: list[int] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    runs: list[tuple[list[S], int, int]] = field(default_factory=list)  # segments, start, rows

    def add(self, segments: Sequence[S], start: int, tokens: list[int] | tuple[int, ...]) -> int:
        """Rows for `tokens`, the first at `start` in the last segment; the first row's index."""
        first = len(self.tokens)
        before = sum(s.length for s in segments[:-1])
        self.tokens.extend(tokens)
        self.positions.extend(range(before + start, before + start + len(tokens)))
        self.runs.append((list(segments), start, len(tokens)))
        return first

    @property
    def rows(self) -> int:
        return len(self.tokens)

    def finish(self) -> None:
        """Each run's last segment now holds its rows."""
        for segments, start, n in self.runs:
            last = segments[-1]
            last.length = max(last.length, start + n)


class KernelAttention:
    """`attention.c` over a pass: `plan` once, then one call a layer."""

    def __init__(self, library: ctypes.CDLL, heads: int, kv_heads: int, head_dim: int, dtype: torch.dtype):
        self.fn = library.spex_attend
        self.fn.restype = ctypes.c_int
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.dtype = kernels.DTYPES[dtype]
        self.scale = ctypes.c_float(head_dim**-0.5)

    def plan(self, batch: Pass[Segment]) -> KernelPlan:
        keys: list[int] = []
        values: list[int] = []
        caps: list[int] = []
        lens: list[int] = []
        first: list[int] = []
        nseg: list[int] = []
        last: list[int] = []
        for segments, start, n in batch.runs:
            at = len(keys)
            for s in segments:
                keys.append(s.keys.data_ptr())
                values.append(s.values.data_ptr())
                caps.append(s.capacity)
                lens.append(s.length)
            first.extend([at] * n)
            nseg.extend([len(segments)] * n)
            last.extend(range(start + 1, start + n + 1))
        arrays = [np.asarray(a, dtype=np.int64) for a in (keys, values, caps, lens, first, nseg, last)]
        return arrays, [ctypes.c_void_p(a.ctypes.data) for a in arrays]

    def __call__(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: KernelPlan
    ) -> torch.Tensor:
        """q [rows, heads, head_dim], k and v [rows, kv_heads, head_dim] (rotated): the rows'
        attention output [rows, heads × head_dim]; k and v are written into the segments."""
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        out = torch.empty_like(q)
        rows = q.shape[0]
        code = self.fn(
            ctypes.c_int64(layer), ctypes.c_int64(rows), ctypes.c_int64(self.heads),
            ctypes.c_int64(self.kv_heads), ctypes.c_int64(self.head_dim), ctypes.c_int(self.dtype),
            self.scale, ctypes.c_void_p(q.data_ptr()), ctypes.c_void_p(k.data_ptr()),
            ctypes.c_void_p(v.data_ptr()), ctypes.c_void_p(out.data_ptr()), *plan[1],
            ctypes.c_int(torch.get_num_threads()),
        )  # fmt: skip
        if code != 0:
            raise MemoryError("attention: out of memory for the pass's scores")
        return out.view(rows, -1)


def make_attention(
    heads: int, kv_heads: int, head_dim: int, dtype: torch.dtype, device: torch.device
) -> KernelAttention | None:
    """The kernel where it builds for this dtype, device and shape (CPU, float32 or bfloat16, a
    head dimension that is a multiple of 16); else None: torch's (`paged`). `SPEX_KERNELS=torch`
    asks for torch."""
    shaped = head_dim % BLOCK == 0 and heads % kv_heads == 0 and heads // kv_heads <= 64
    library = kernels.library(dtype, device)
    if library is not None and shaped:
        return KernelAttention(library, heads, kv_heads, head_dim, dtype)
    return None
