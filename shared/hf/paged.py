"""Attention on any torch device: one KV pool per engine, every row of a pass in a fixed number
of kernel launches per layer.

The pool holds the keys and values of every segment, [layers, slots, kv_heads, head_dim]
each, handed out in pages of `PAGE` slots (page 0 is never handed out: padded rows write and
read its slots). A `PagedSegment` is a list of pages; a row attends to its segments' slots in
order — the prompt pieces it shares with other sequences, by reference, then its own — so a
run's keys are the pool's rows at a slot table, and no KV is ever copied between segments.

`PagedAttention.plan` turns a pass into at most two groups — decode runs (one row each) and
prompt runs (several rows) — each a slot table [runs, keys] padded with the null slot, the
rows' query positions, and a mask. Per layer it then writes the pass's keys and values into the
pool (two index copies), and for each group gathers the keys and values at its table and runs
one `scaled_dot_product_attention` over them, the query heads that share a KV head folded into
the query length (so no head is repeated). A `decode_kernel` (`triton_attention`, on CUDA)
takes the decode group instead and reads the pool where it lies, without the gather.

`exact` (deterministic mode) attends each run alone instead, over exactly its own keys: a
batched kernel can give a row other bits beside other rows or behind more padding (seen with
SDPA on a CPU, in float32; a plain matmul too once the key width changes), so batch
invariance on torch costs a loop over the runs — but for decode rows where the decode kernel
runs, which has it by construction. The C kernels (`attention`) have it too and are
deterministic mode's default on a CPU.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
import torch.nn.functional as F

from spex.shared.hf.attention import Pass

__all__ = [
    "NULL_SLOT",
    "PAGE",
    "WIDTHS",
    "bucket",
    "DecodeKernel",
    "Group",
    "KVPool",
    "PagedAttention",
    "PagedPlan",
    "PagedSegment",
]

PAGE = 16  # slots a page holds: the unit a segment grows by
NULL_SLOT = 0  # in page 0, never handed out: where padded rows write and read
WIDTHS = tuple(256 << i for i in range(10))  # a decode table's keys, bucketed: 256 to 131,072


def bucket(n: int, sizes: tuple[int, ...] | list[int]) -> int:
    """The smallest of `sizes` (ascending) that holds `n`, or `n` past the largest."""
    return sizes[bisect.bisect_left(sizes, n)] if n <= sizes[-1] else n


class KVPool:
    """Keys and values [layers, slots, kv_heads, head_dim] on one device, in pages. Out of
    pages, it doubles (a copy; `version` counts the moves, for anything that holds pointers
    into it, such as a captured CUDA graph)."""

    def __init__(
        self,
        layers: int,
        kv_heads: int,
        head_dim: int,
        tokens: int,
        dtype: torch.dtype,
        device: torch.device | str,
    ) -> None:
        pages = max(2, 1 + -(-tokens // PAGE))
        self.keys = torch.zeros(layers, pages * PAGE, kv_heads, head_dim, dtype=dtype, device=device)
        self.values = torch.zeros_like(self.keys)
        self._free = list(range(pages - 1, 0, -1))  # a stack: the lowest page first; never 0
        self.version = 0

    @property
    def pages(self) -> int:
        return self.keys.shape[1] // PAGE

    @property
    def free_pages(self) -> int:
        return len(self._free)

    def take(self, n: int) -> list[int]:
        if n > len(self._free):
            self._grow(n)
        return [self._free.pop() for _ in range(n)]

    def give(self, pages: list[int]) -> None:
        self._free.extend(reversed(pages))

    def _grow(self, needed: int) -> None:
        old = self.pages
        new = old + max(old, needed)
        shape = (self.keys.shape[0], new * PAGE, *self.keys.shape[2:])
        for name in ("keys", "values"):
            grown = self.keys.new_zeros(shape)
            grown[:, : old * PAGE] = getattr(self, name)
            setattr(self, name, grown)
        self._free = list(range(new - 1, old - 1, -1)) + self._free
        self.version += 1


class PagedSegment:
    """Positions [0, length) of a piece or a sequence's own tokens, in pages of the pool."""

    def __init__(self, pool: KVPool, tokens: int) -> None:
        self.pool = pool
        self.pages: list[int] = pool.take(max(1, -(-tokens // PAGE)))
        self.length = 0
        self._slots: np.ndarray | None = None

    @property
    def capacity(self) -> int:
        return len(self.pages) * PAGE

    def grow(self, tokens: int) -> None:
        """Room for `tokens` in all: at least doubled, the pages it has kept."""
        if tokens > self.capacity:
            more = max(-(-tokens // PAGE), 2 * len(self.pages)) - len(self.pages)
            self.pages += self.pool.take(more)
            self._slots = None

    def slots(self) -> np.ndarray:
        """The pool slot of each position it has room for [capacity]."""
        if self._slots is None:
            pages = np.asarray(self.pages, dtype=np.int64)
            self._slots = (pages[:, None] * PAGE + np.arange(PAGE)).reshape(-1)
        return self._slots

    def release(self) -> None:
        """Its pages back to the pool, once (it holds nothing after)."""
        assert self.pages, "a segment's pages go back to the pool once"
        self.pool.give(self.pages)
        self.pages, self._slots, self.length = [], None, 0


@dataclass
class Group:
    """Runs of one kind in a pass: `runs` runs of `queries` rows each (padded)."""

    runs: int
    queries: int
    rows: torch.Tensor  # [runs × queries] the pass row of each query (padding: a real row)
    table: torch.Tensor  # [runs, keys] pool slot of each key (padding: NULL_SLOT)
    lengths: torch.Tensor  # [runs] int32: keys each run's last row sees
    mask: torch.Tensor | None  # [runs, 1, queries × group, keys] bool: what each query sees
    out: torch.Tensor | None  # [real rows] their place among the runs × queries (None: all)
    dest: torch.Tensor  # [real rows] the pass row each output goes to


@dataclass
class PagedPlan:
    write: torch.Tensor  # [rows] the slot each row's key and value go to
    groups: list[Group]
    rows: int
    in_order: bool  # one group whose outputs are the pass's rows in order (a decode pass)
    alone: list[tuple[int, int, torch.Tensor]]  # exact mode: (first row, rows, key slots) per run


class DecodeKernel(Protocol):
    """Attention of decode rows over the pool where it lies: q [runs, heads, head_dim] ->
    [runs, heads × head_dim]."""

    def __call__(
        self,
        q: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        table: torch.Tensor,
        lengths: torch.Tensor,
    ) -> torch.Tensor: ...


class PagedAttention:
    def __init__(
        self,
        pool: KVPool,
        heads: int,
        kv_heads: int,
        head_dim: int,
        decode_kernel: DecodeKernel | None = None,
        exact: bool = False,
    ) -> None:
        self.pool = pool
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.group = heads // kv_heads  # query heads per KV head
        self.decode_kernel = decode_kernel
        self.exact = exact

    def plan(self, batch: Pass[PagedSegment]) -> PagedPlan:
        """The pass's slot tables and masks, built on the host and moved to the device once."""
        device = self.pool.keys.device
        write: list[np.ndarray] = []
        decode: list[tuple[int, np.ndarray, int]] = []  # (first row, key slots, rows)
        prompt: list[tuple[int, np.ndarray, int]] = []
        row = 0
        for segments, start, n in batch.runs:
            keys = _key_slots(segments, start + n)
            write.append(segments[-1].slots()[start : start + n])
            (decode if n == 1 else prompt).append((row, keys, n))
            row += n
        slots = _to(np.concatenate(write), device)
        batched, alone_runs = [decode, prompt], []
        if self.exact:  # each run alone, but decode rows where the decode kernel takes them
            batched = [decode] if self.decode_kernel is not None else []
            alone_runs = prompt if self.decode_kernel is not None else decode + prompt
        alone = [(first, n, _to(keys, device)) for first, keys, n in alone_runs]
        groups = [self._group(runs, device) for runs in batched if runs]
        in_order = bool(decode) and not prompt and not alone
        return PagedPlan(slots, groups, row, in_order, alone)

    def decode_arrays(self, batch: Pass[PagedSegment], size: int, width: int) -> dict[str, np.ndarray]:
        """A decode pass (one row a run) padded to `size` rows and `width` keys, as host arrays
        (what a CUDA graph's inputs are refilled from): the padded rows write and read the
        null slot. Keys: write, table, lengths, and mask where the gather path needs one."""
        rows = batch.rows
        write = np.full(size, NULL_SLOT, dtype=np.int64)
        table = np.full((size, width), NULL_SLOT, dtype=np.int64)
        lengths = np.ones(size, dtype=np.int32)
        for i, (segments, start, _) in enumerate(batch.runs):
            keys = _key_slots(segments, start + 1)
            write[i], table[i, : len(keys)], lengths[i] = segments[-1].slots()[start], keys, len(keys)
        out: dict[str, np.ndarray] = {"write": write, "table": table, "lengths": lengths}
        if self.decode_kernel is None:
            visible = np.arange(width)[None, :] < lengths[:, None]
            out["mask"] = np.repeat(visible[:, None, None, :], self.group, axis=2)
        assert rows <= size
        return out

    def static_plan(self, arrays: dict[str, Any]) -> PagedPlan:
        """The plan of a padded decode pass over `arrays` (host arrays or device tensors of
        `decode_arrays`' shapes: a graph's inputs)."""
        tensors = {
            k: v if isinstance(v, torch.Tensor) else _to(v, self.pool.keys.device) for k, v in arrays.items()
        }
        size = tensors["write"].shape[0]
        rows = torch.arange(size, device=tensors["write"].device)
        group = Group(size, 1, rows, tensors["table"], tensors["lengths"], tensors.get("mask"), None, rows)
        return PagedPlan(tensors["write"], [group], size, True, [])

    def _group(self, runs: list[tuple[int, np.ndarray, int]], device: torch.device) -> Group:
        count, width = len(runs), max(len(keys) for _, keys, _ in runs)
        queries = max(n for _, _, n in runs)
        if queries == 1 and self.decode_kernel is not None:  # a few table widths: a few kernel builds
            width = bucket(width, WIDTHS)
        table = np.full((count, width), NULL_SLOT, dtype=np.int64)
        rows = np.zeros((count, queries), dtype=np.int64)
        seen = np.zeros((count, queries), dtype=np.int64)  # keys each query sees (padding: 1)
        seen[:] = 1
        for i, (first, keys, n) in enumerate(runs):
            table[i, : len(keys)] = keys
            rows[i, :n] = np.arange(first, first + n)
            seen[i, :n] = np.arange(len(keys) - n + 1, len(keys) + 1)
        real = np.concatenate([np.arange(i * queries, i * queries + n) for i, (_, _, n) in enumerate(runs)])
        dest = np.concatenate([np.arange(first, first + n) for first, _, n in runs])
        mask = None
        if queries > 1 or self.decode_kernel is None:
            visible = np.arange(width)[None, None, :] < seen[:, :, None]  # [runs, queries, keys]
            folded = np.repeat(visible[:, :, None, :], self.group, axis=2)  # each KV head's query heads
            mask = _to(folded.reshape(count, 1, queries * self.group, width), device)
        lengths = _to(seen[:, -1].astype(np.int32) if queries == 1 else seen.max(1).astype(np.int32), device)
        return Group(
            count,
            queries,
            _to(rows.reshape(-1), device),
            _to(table, device),
            lengths,
            mask,
            None if queries == 1 else _to(real, device),
            _to(dest, device),
        )

    def __call__(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: PagedPlan
    ) -> torch.Tensor:
        """q [rows, heads, head_dim], k and v [rows, kv_heads, head_dim] (rotated): the rows'
        attention output [rows, heads × head_dim]; k and v are written into the pool."""
        keys, values = self.pool.keys[layer], self.pool.values[layer]
        keys.index_copy_(0, plan.write, k)
        values.index_copy_(0, plan.write, v)
        if plan.in_order:  # the decode rows are the pass's rows, in order: no gather of q
            return self.attend(q, keys, values, plan.groups[0])
        out = q.new_empty(plan.rows, self.heads * self.head_dim)
        for group in plan.groups:
            got = self.attend(q.index_select(0, group.rows), keys, values, group)
            out.index_copy_(0, group.dest, got if group.out is None else got[group.out])
        for first, n, at in plan.alone:
            out[first : first + n] = self._alone(q[first : first + n], keys[at], values[at])
        return out

    def attend(
        self, queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, group: Group
    ) -> torch.Tensor:
        """One group's attention, its queries [runs × queries, heads, head_dim] in the group's
        order (`group.rows` of the pass): [runs × queries, heads × head_dim]."""
        runs, n, kv, g, d = group.runs, group.queries, self.kv_heads, self.group, self.head_dim
        if n == 1 and self.decode_kernel is not None:
            return self.decode_kernel(queries, keys, values, group.table, group.lengths)
        folded = queries.view(runs, n, kv, g, d).transpose(1, 2).reshape(runs, kv, n * g, d)
        width = group.table.shape[1]
        at = group.table.view(-1)  # index_select: advanced indexing is several times slower on a CPU
        k = (
            keys.index_select(0, at).view(runs, width, kv, d).transpose(1, 2)
        )  # [runs, kv_heads, keys, head_dim]
        v = values.index_select(0, at).view(runs, width, kv, d).transpose(1, 2)
        out = F.scaled_dot_product_attention(folded, k, v, attn_mask=group.mask)
        return out.view(runs, kv, n, g, d).transpose(1, 2).reshape(runs * n, kv * g * d)

    def _alone(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """One run over its own keys [keys, kv_heads, head_dim]: q [n, heads, head_dim] ->
        [n, heads × head_dim]."""
        n, total = q.shape[0], keys.shape[0]
        causal = torch.ones(n, total, dtype=torch.bool, device=q.device).tril(total - n)
        out = F.scaled_dot_product_attention(
            q.transpose(0, 1)[None], keys.transpose(0, 1)[None], values.transpose(0, 1)[None],
            attn_mask=causal, enable_gqa=True,
        )[0]  # fmt: skip
        return out.transpose(0, 1).reshape(n, -1)


def _key_slots(segments: list[PagedSegment], end: int) -> np.ndarray:
    """The pool slots a run's row sees: every segment before the last in full, then the last's
    first `end` positions."""
    return np.concatenate([*(s.slots()[: s.length] for s in segments[:-1]), segments[-1].slots()[:end]])


def _to(array: np.ndarray, device: torch.device | str) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(array)).to(device, non_blocking=True)
