"""The engine's C kernels against torch: attention over segments (by reference, several per
row, a piece's rows and the next piece in one pass) and the packed linear layers; each row's
numbers bit-identical alone and in any batch."""

import pytest
import torch
import torch.nn.functional as F

from spex.shared.hf import kernels
from spex.shared.hf.attention import KernelAttention, Pass, Segment, TorchAttention
from spex.shared.hf.linear import PackedLinear

DTYPES = [torch.float32, torch.bfloat16]


@pytest.fixture(scope="module")
def library():
    lib = kernels.library(torch.float32, "cpu")
    if lib is None:
        pytest.skip("no C compiler builds the kernels here")
    return lib


def segment(layers, kv_heads, head_dim, dtype, length, room=0):
    s = Segment.empty(layers, kv_heads, head_dim, length + room, dtype, "cpu")
    s.keys.normal_()
    s.values.normal_()
    s.length = length
    return s


def runs(layers, kv_heads, head_dim, dtype):
    """Rows of every kind: decode rows over shared prompt pieces, a piece computed in two runs
    of one pass, and the piece after it in the same pass."""
    head, step = segment(layers, kv_heads, head_dim, dtype, 37), segment(layers, kv_heads, head_dim, dtype, 5)
    own = segment(layers, kv_heads, head_dim, dtype, 3, room=30)
    fresh = segment(layers, kv_heads, head_dim, dtype, 0, room=20)
    piece, after = (segment(layers, kv_heads, head_dim, dtype, n) for n in (11, 4))
    return [
        ([head, step, own], 3, [1]),
        ([head, fresh], 0, [2]),
        ([head, piece], 0, list(range(7))),
        ([head, piece], 7, list(range(4))),
        ([head, piece, after], 0, list(range(4))),
    ]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("heads", "kv_heads", "head_dim"), [(9, 3, 64), (4, 4, 32), (8, 2, 128)])
def test_the_attention_kernel_computes_what_torch_does(library, dtype, heads, kv_heads, head_dim):
    torch.manual_seed(0)
    outs = []
    for attention in (
        KernelAttention(library, heads, kv_heads, head_dim, dtype),
        TorchAttention(heads, kv_heads, head_dim),
    ):
        torch.manual_seed(1)  # the same segments for both
        batch = Pass()
        for segments, start, tokens in runs(2, kv_heads, head_dim, dtype):
            batch.add(segments, start, tokens)
        torch.manual_seed(2)
        q = torch.randn(batch.rows, heads, head_dim).to(dtype)
        k, v = (torch.randn(batch.rows, kv_heads, head_dim).to(dtype) for _ in range(2))
        outs.append(attention(1, q, k, v, attention.plan(batch)).float())
    tolerance = 1e-5 if dtype == torch.float32 else 1e-2  # bfloat16: the output's last bit
    assert torch.allclose(outs[0], outs[1], atol=tolerance, rtol=tolerance)


@pytest.mark.parametrize("dtype", DTYPES)
def test_an_attention_row_is_bit_identical_alone_and_in_any_batch(library, dtype):
    attention = KernelAttention(library, 9, 3, 64, dtype)
    torch.manual_seed(1)
    all_runs = runs(2, 3, 64, dtype)
    q = torch.randn(20, 9, 64).to(dtype)
    k, v = (torch.randn(20, 3, 64).to(dtype) for _ in range(2))
    batch = Pass()
    for segments, start, tokens in all_runs:
        batch.add(segments, start, tokens)
    together = attention(0, q[: batch.rows], k[: batch.rows], v[: batch.rows], attention.plan(batch))
    alone = Pass()
    alone.add(*all_runs[0])  # the decode row, now alone
    assert torch.equal(attention(0, q[:1], k[:1], v[:1], attention.plan(alone)), together[:1])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("out_features", "in_features", "bias"), [(96, 64, False), (100, 70, True), (33, 31, True)]
)
def test_a_packed_linear_computes_what_torch_does_and_each_row_alone(
    library, dtype, out_features, in_features, bias
):
    torch.manual_seed(0)
    linear = torch.nn.Linear(in_features, out_features, bias=bias).to(dtype)
    packed = PackedLinear(library, [linear])
    x = torch.randn(41, in_features).to(dtype)
    full = packed(x)
    ref = F.linear(x.float(), linear.weight.float(), None if linear.bias is None else linear.bias.float())
    tolerance = 1e-5 if dtype == torch.float32 else 1e-2
    assert torch.allclose(full.float(), ref, atol=tolerance, rtol=tolerance)
    for rows in range(1, 41):  # every row count: the register tiles' every shape
        assert torch.equal(packed(x[:rows]), full[:rows]), rows
        assert torch.equal(packed(x[41 - rows :]), full[41 - rows :]), rows


def test_fused_linears_give_each_its_own_outputs(library):
    torch.manual_seed(0)
    parts = [torch.nn.Linear(48, n) for n in (32, 16, 16)]
    x = torch.randn(5, 48)
    fused = PackedLinear(library, parts)(x)
    assert torch.allclose(fused, torch.cat([p(x) for p in parts], dim=1), atol=1e-5)
