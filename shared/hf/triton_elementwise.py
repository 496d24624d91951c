"""The forward pass's per-row operations fused, one Triton kernel each (`elementwise`): on a
GPU, where the step of a decode pass is mostly the launches of small kernels otherwise.

Each computes in float32 and rounds where the transformers modules round (the residual sum
to the model's dtype before it is normalized; the normalized row before its weight; the
activation before its product), so it stays within a rounding of torch's; `checked` compares
the three with torch's on random rows before the engine uses them. Tested here through
Triton's interpreter, in float32.
"""

from __future__ import annotations

from functools import partial

import torch
import triton
import triton.language as tl

from spex.shared.hf.elementwise import RMSNorm, TorchElementwise
from spex.shared.hf.selfcheck import passes

__all__ = ["TritonElementwise", "checked"]


@triton.jit
def _rms_norm(
    X, R, W, Y, RO, inner, stride_xa, stride_xb, stride_ra, stride_ya, stride_yb, n, eps,
    HAS_RESIDUAL: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """Row i of X (rows a × inner, row (a, b) at a·stride_xa + b·stride_xb): Y = RMSNorm(X + R)
    × W; with HAS_RESIDUAL, X + R is written to RO too (rows of R and RO: a·stride_ra)."""
    i = tl.program_id(0)
    a = i // inner
    b = i % inner
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    x = tl.load(X + a * stride_xa + b * stride_xb + cols, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        x = (x.to(tl.float32) + tl.load(R + a * stride_ra + cols, mask=mask, other=0.0).to(tl.float32)).to(
            RO.dtype.element_ty
        )
        tl.store(RO + a * stride_ra + cols, x, mask=mask)
    xf = x.to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(xf * xf, axis=0) / n + eps)
    normed = (xf * rstd).to(Y.dtype.element_ty).to(tl.float32)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + a * stride_ya + b * stride_yb + cols, (normed * w).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _rope(
    X, COS, SIN, heads, half, stride_xr, stride_xh, stride_cr,
    HALF_PAD: tl.constexpr, HEADS: tl.constexpr,
):  # fmt: skip
    """X [rows, heads, 2·half] rotated in place by its row's cos and sin [rows, 2·half]."""
    row = tl.program_id(0)
    h = tl.arange(0, HEADS)
    d = tl.arange(0, HALF_PAD)
    dmask = d < half
    mask = (h < heads)[:, None] & dmask[None, :]
    at = X + row * stride_xr + h[:, None] * stride_xh + d[None, :]
    x1 = tl.load(at, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(at + half, mask=mask, other=0.0).to(tl.float32)
    c1 = tl.load(COS + row * stride_cr + d, mask=dmask, other=0.0).to(tl.float32)[None, :]
    c2 = tl.load(COS + row * stride_cr + half + d, mask=dmask, other=0.0).to(tl.float32)[None, :]
    s1 = tl.load(SIN + row * stride_cr + d, mask=dmask, other=0.0).to(tl.float32)[None, :]
    s2 = tl.load(SIN + row * stride_cr + half + d, mask=dmask, other=0.0).to(tl.float32)[None, :]
    tl.store(at, (x1 * c1 - x2 * s1).to(X.dtype.element_ty), mask=mask)
    tl.store(at + half, (x2 * c2 + x1 * s2).to(X.dtype.element_ty), mask=mask)


@triton.jit
def _silu_mul(GU, OUT, width, stride_g, stride_o, BLOCK: tl.constexpr):
    """OUT[row] = silu(GU[row, :width]) × GU[row, width:], the activation rounded first."""
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < width
    g = tl.load(GU + row * stride_g + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(GU + row * stride_g + width + cols, mask=mask, other=0.0).to(tl.float32)
    act = (g / (1.0 + tl.exp(-g))).to(OUT.dtype.element_ty).to(tl.float32)
    tl.store(OUT + row * stride_o + cols, (act * u).to(OUT.dtype.element_ty), mask=mask)


class TritonElementwise:
    def norm(self, x: torch.Tensor, module: RMSNorm) -> torch.Tensor:
        """In place where it can be: a q or k slice of the fused projection is normalized
        where it lies."""
        return self._norm(x, None, module, out=x if x.dim() == 3 else None)[0]

    def add_norm(
        self, x: torch.Tensor, residual: torch.Tensor, module: RMSNorm
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self._norm(x, residual, module)

    def _norm(
        self, x: torch.Tensor, residual: torch.Tensor | None, module: RMSNorm, out: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        n = x.shape[-1]
        rows, inner = (x.shape[0] * x.shape[1], x.shape[1]) if x.dim() == 3 else (x.shape[0], 1)
        stride_b = x.stride(1) if x.dim() == 3 else 0
        y = torch.empty(x.shape, dtype=x.dtype, device=x.device) if out is None else out
        summed = torch.empty_like(x) if residual is not None else x
        r = residual if residual is not None else x
        _rms_norm[(rows,)](
            x, r, module.weight, y, summed, inner, x.stride(0), stride_b, r.stride(0),
            y.stride(0), y.stride(1) if y.dim() == 3 else 0, n, module.variance_epsilon,
            HAS_RESIDUAL=residual is not None, BLOCK=triton.next_power_of_2(n),
        )  # fmt: skip
        return y, summed

    def rope(
        self, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """In place: q and k are slices of the fused projection, rotated where they lie."""
        cos, sin = cos.contiguous(), sin.contiguous()
        for x in (q, k):
            half = x.shape[2] // 2
            _rope[(x.shape[0],)](
                x, cos, sin, x.shape[1], half, x.stride(0), x.stride(1), cos.stride(0),
                HALF_PAD=triton.next_power_of_2(half), HEADS=triton.next_power_of_2(x.shape[1]),
            )  # fmt: skip
        return q, k

    def silu_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        rows, width = gate_up.shape[0], gate_up.shape[1] // 2
        out = torch.empty(rows, width, dtype=gate_up.dtype, device=gate_up.device)
        block = 1024
        _silu_mul[(rows, triton.cdiv(width, block))](
            gate_up, out, width, gate_up.stride(0), out.stride(0), BLOCK=block
        )
        return out


def checked(
    dtype: torch.dtype, device: torch.device | str, shape: tuple[int, int, int, int] = (8, 2, 128, 3000)
) -> TritonElementwise | None:
    """The fused kernels, once each has computed what torch's do on random rows of the
    model's `shape` (heads, KV heads, head dimension, MLP width) here (in the model's dtype:
    within a rounding); else None, and torch's run."""
    fused = TritonElementwise()
    check = partial(_check, fused, dtype, torch.device(device), *shape)
    return fused if passes("triton fused elementwise", "torch's kernels", check, dtype, 1e-5) else None


@torch.inference_mode()
def _check(
    fused: TritonElementwise,
    dtype: torch.dtype,
    device: torch.device,
    heads: int,
    kv_heads: int,
    d: int,
    width: int,
) -> float:
    """The largest relative error of the three against `TorchElementwise`, on a q/k pair
    sliced from one fused projection (as the forward pass slices them)."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    gen = torch.Generator(device=device).manual_seed(0)
    rows = 5

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, device=device).to(dtype)

    norm = LlamaRMSNorm(heads * d).to(device=device, dtype=dtype)
    norm.weight.data = rand(heads * d)
    ref, errors = TorchElementwise(), []
    x, residual = rand(rows, heads * d), rand(rows, heads * d)
    errors += [
        _error(a, b)
        for a, b in zip(fused.add_norm(x, residual, norm), ref.add_norm(x, residual, norm), strict=True)
    ]
    errors.append(_error(fused.norm(x, norm), ref.norm(x, norm)))
    projection = rand(rows, (heads + 2 * kv_heads) * d)
    cos, sin = rand(rows, d), rand(rows, d)

    def qk(p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q = p[:, : heads * d].view(rows, heads, d)
        return q, p[:, heads * d : (heads + kv_heads) * d].view(rows, kv_heads, d)

    want = ref.rope(*qk(projection.clone()), cos, sin)
    errors += [_error(a, b) for a, b in zip(fused.rope(*qk(projection.clone()), cos, sin), want, strict=True)]
    head_norm = LlamaRMSNorm(d).to(device=device, dtype=dtype)
    head_norm.weight.data = rand(d)
    q = qk(projection.clone())[0]
    errors.append(_error(ref.norm(q.clone(), head_norm), fused.norm(q, head_norm)))
    gate_up = rand(rows, 2 * width)
    errors.append(_error(fused.silu_mul(gate_up), ref.silu_mul(gate_up)))
    return max(errors)


def _error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.float() - want.float()).norm() / want.float().norm())
