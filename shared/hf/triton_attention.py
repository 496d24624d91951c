"""Decode attention read from the KV pool where it lies, in Triton (on CUDA; Triton's
interpreter runs the same kernels on a CPU in the tests).

`_chunk` runs one program per decode row, KV head and chunk of `CHUNK` keys: it reads the
chunk's slots from the row's table, then the keys and values at those slots `BLOCK` at a time,
and keeps the online softmax's running maximum, sum and weighted values for the query heads
that share the KV head (padded to 16 rows, the least a `tl.dot` takes). `_combine` then folds
a row's chunks in order into its output (a chunk past the row's length folds in as exactly
nothing). A row's chunks are set by its own length, and no program reads another row's: a
row gets the same bits whatever its batch (batch-invariant by construction). The grid is
(rows, KV heads, chunks of the widest table), so a captured CUDA graph replays it unchanged
for any lengths up to its table's width; a chunk past a row's length does nothing. The chunk
count is a compile-time constant of `_combine` (loop bounds read at run time trip Triton's
interpreter): one build per table width in chunks, which the CUDA graphs' width buckets keep
to a few.

Compared with the gather path (`paged`), the keys and values are read once, not read, copied
and read again, and a long context is split across programs (flash-decoding), so a batch of
one still fills the GPU.
"""

from __future__ import annotations

from functools import partial

import torch
import triton
import triton.language as tl

from spex.shared.hf.selfcheck import passes

__all__ = ["CHUNK", "TritonDecode", "decode_kernel"]


CHUNK = 256  # keys one program reads
BLOCK = 64  # keys it reads at a time
QUERIES = 16  # query rows a program's dot products take (a KV head's query heads, padded)


@triton.jit
def _chunk(
    Q, K, V, Table, Lengths, Acc, Max, Sum,
    stride_qr, stride_qh, stride_ks, stride_kh, stride_tr, stride_ar, stride_ah, stride_ac,
    scale,
    GROUP: tl.constexpr, D: tl.constexpr, D_PAD: tl.constexpr, QROWS: tl.constexpr,
    CHUNK_KEYS: tl.constexpr, BLOCK_KEYS: tl.constexpr, IEEE: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)
    head = tl.program_id(1)
    chunk = tl.program_id(2)
    length = tl.load(Lengths + row)
    start = chunk * CHUNK_KEYS
    if start < length:
        g = tl.arange(0, QROWS)
        d = tl.arange(0, D_PAD)
        gmask = g < GROUP
        dmask = d < D
        q = tl.load(
            Q + row * stride_qr + (head * GROUP + g)[:, None] * stride_qh + d[None, :],
            mask=gmask[:, None] & dmask[None, :],
            other=0.0,
        )
        m = tl.full([QROWS], float("-inf"), tl.float32)
        total = tl.zeros([QROWS], tl.float32)
        acc = tl.zeros([QROWS, D_PAD], tl.float32)
        end = tl.minimum(start + CHUNK_KEYS, length)
        for i in range(0, CHUNK_KEYS // BLOCK_KEYS):  # a block past the end loads nothing, adds nothing
            n = start + i * BLOCK_KEYS + tl.arange(0, BLOCK_KEYS)
            valid = n < end
            slots = tl.load(Table + row * stride_tr + n, mask=valid, other=0).to(tl.int64)
            at = slots[:, None] * stride_ks + head * stride_kh + d[None, :]
            kmask = valid[:, None] & dmask[None, :]
            k = tl.load(K + at, mask=kmask, other=0.0)
            if IEEE:  # noqa: SIM108 - a constexpr branch: Triton compiles the taken one alone
                s = tl.dot(q, tl.trans(k), input_precision="ieee")
            else:
                s = tl.dot(q, tl.trans(k))
            s = tl.where(valid[None, :], s * scale, float("-inf"))
            top = tl.maximum(m, tl.max(s, 1))
            p = tl.exp(s - top[:, None])
            alpha = tl.exp(m - top)
            total = total * alpha + tl.sum(p, 1)
            v = tl.load(V + at, mask=kmask, other=0.0)
            if IEEE:  # noqa: SIM108
                pv = tl.dot(p, v.to(tl.float32), input_precision="ieee")
            else:
                pv = tl.dot(p.to(v.dtype), v)
            acc = acc * alpha[:, None] + pv
            m = top
        # Max and Sum are laid out as Acc without its last dimension: offsets over D_PAD.
        base = row * stride_ar + head * stride_ah + chunk * stride_ac
        tl.store(Acc + base + g[:, None] * D_PAD + d[None, :], acc)
        tl.store(Max + (base // D_PAD) + g, m)
        tl.store(Sum + (base // D_PAD) + g, total)


@triton.jit
def _combine(
    Acc, Max, Sum, Lengths, Out,
    stride_ar, stride_ah, stride_ac, stride_or,
    GROUP: tl.constexpr, D: tl.constexpr, D_PAD: tl.constexpr, QROWS: tl.constexpr, CHUNK_KEYS: tl.constexpr,
    CHUNKS: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)
    head = tl.program_id(1)
    length = tl.load(Lengths + row)
    g = tl.arange(0, QROWS)
    d = tl.arange(0, D_PAD)
    m = tl.full([QROWS], float("-inf"), tl.float32)
    total = tl.zeros([QROWS], tl.float32)
    acc = tl.zeros([QROWS, D_PAD], tl.float32)
    for chunk in range(0, CHUNKS):  # the row's own chunks count; the rest load as nothing
        use = chunk * CHUNK_KEYS < length
        base = row * stride_ar + head * stride_ah + chunk * stride_ac
        mc = tl.load(Max + (base // D_PAD) + g, mask=use, other=float("-inf"))
        top = tl.maximum(m, mc)
        alpha = tl.exp(m - top)
        beta = tl.exp(mc - top)
        total = total * alpha + tl.load(Sum + (base // D_PAD) + g, mask=use, other=0.0) * beta
        part = tl.load(Acc + base + g[:, None] * D_PAD + d[None, :], mask=use, other=0.0)
        acc = acc * alpha[:, None] + part * beta[:, None]
        m = top
    out = acc / total[:, None]
    mask = (g < GROUP)[:, None] & (d < D)[None, :]
    at = Out + row * stride_or + (head * GROUP + g)[:, None] * D + d[None, :]
    tl.store(at, out.to(Out.dtype.element_ty), mask=mask)


class TritonDecode:
    """q [rows, heads, head_dim]; keys and values [slots, kv_heads, head_dim] (a layer of the
    pool); table [rows, width] slots; lengths [rows] int32 -> [rows, heads × head_dim]."""

    def __call__(
        self,
        q: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        table: torch.Tensor,
        lengths: torch.Tensor,
    ) -> torch.Tensor:
        rows, heads, dim = q.shape
        kv_heads = keys.shape[1]
        group = heads // kv_heads
        assert group <= QUERIES and keys.stride(2) == 1 and q.stride(2) == 1
        pad = max(16, triton.next_power_of_2(dim))
        chunks = triton.cdiv(table.shape[1], CHUNK)
        acc = torch.empty(rows, kv_heads, chunks, QUERIES, pad, dtype=torch.float32, device=q.device)
        top = torch.empty(rows, kv_heads, chunks, QUERIES, dtype=torch.float32, device=q.device)
        total = torch.empty_like(top)
        out = torch.empty(rows, heads * dim, dtype=q.dtype, device=q.device)
        ieee = q.dtype == torch.float32
        _chunk[(rows, kv_heads, chunks)](
            q, keys, values, table, lengths, acc, top, total,
            q.stride(0), q.stride(1), keys.stride(0), keys.stride(1), table.stride(0),
            acc.stride(0), acc.stride(1), acc.stride(2), dim**-0.5,
            GROUP=group, D=dim, D_PAD=pad, QROWS=QUERIES, CHUNK_KEYS=CHUNK, BLOCK_KEYS=BLOCK, IEEE=ieee,
        )  # fmt: skip
        _combine[(rows, kv_heads)](
            acc, top, total, lengths, out, acc.stride(0), acc.stride(1), acc.stride(2), out.stride(0),
            GROUP=group, D=dim, D_PAD=pad, QROWS=QUERIES, CHUNK_KEYS=CHUNK, CHUNKS=chunks,
        )  # fmt: skip
        return out


def decode_kernel(
    dtype: torch.dtype, device: torch.device | str = "cuda", heads: int = 8, kv_heads: int = 2, dim: int = 128
) -> TritonDecode | None:
    """The kernel, once it has computed what the gather path does on random rows of the
    model's head layout here (its first build for this device, dtype and shape); else None,
    and the gather path runs."""
    kernel = TritonDecode()
    check = partial(_check, kernel, dtype, torch.device(device), heads, kv_heads, dim)
    return kernel if passes("triton decode attention", "the gather path", check, dtype, 1e-4) else None


def _check(
    kernel: TritonDecode, dtype: torch.dtype, device: torch.device, heads: int, kv_heads: int, dim: int
) -> float:
    """The kernel's largest relative error against gathered keys and SDPA, over rows of
    several lengths (one past a chunk) in the given head layout."""
    gen = torch.Generator(device=device).manual_seed(0)
    rows = 3
    slots = 3 * CHUNK
    keys, values = (
        torch.randn(slots, kv_heads, dim, generator=gen, device=device).to(dtype) for _ in range(2)
    )
    q = torch.randn(rows, heads, dim, generator=gen, device=device).to(dtype)
    lengths = torch.tensor([1, 70, CHUNK + 5], dtype=torch.int32, device=device)
    table = torch.randperm(slots, generator=gen, device=device)[: 2 * CHUNK].repeat(rows, 1)
    got = kernel(q, keys, values, table, lengths).float()
    errors = []
    for r in range(rows):
        at = table[r, : int(lengths[r])]
        k = keys[at].transpose(0, 1).float()[None]
        v = values[at].transpose(0, 1).float()[None]
        ref = torch.nn.functional.scaled_dot_product_attention(
            q[r].float()[None, :, None], k, v, enable_gqa=True
        )
        ref = ref[0, :, 0].reshape(-1)
        errors.append(float((got[r] - ref).norm() / ref.norm()))
    return max(errors)
