"""The engine's C kernels: attention over segments (by reference, several per row, a piece's
rows and the next piece in one pass) against an independent reference, and the packed linear
layers against torch; each row's numbers bit-identical alone and in any batch."""

import pytest
import torch
import torch.nn.functional as F

from spex.shared.hf import kernels
from spex.shared.hf.attention import KernelAttention, Pass, Segment
from spex.shared.hf.linear import PackedLinear
from tests.hf.attention_cases import RUNS, SEGMENTS, kv_data, reference, rows_data

DTYPES = [torch.float32, torch.bfloat16]


@pytest.fixture(scope="module")
def library():
    lib = kernels.library(torch.float32, "cpu")
    if lib is None:
        pytest.skip("no C compiler builds the kernels here")
    return lib


def kernel_pass(data, kv_heads, head_dim, dtype, runs=RUNS):
    """The cases' segments in the kernel's layout, and a pass of `runs` over them."""
    segments = {}
    for name, (keys, values) in data.items():
        layers, capacity = keys.shape[:2]
        s = Segment.empty(layers, kv_heads, head_dim, capacity, dtype, "cpu")
        blocks = s.keys.shape[2] * 16
        padded = torch.zeros(layers, blocks, kv_heads, head_dim, dtype=dtype)
        padded[:, :capacity] = keys
        # [layers, positions, kv, d] -> [layers, kv, blocks, d, 16]
        s.keys.copy_(padded.view(layers, blocks // 16, 16, kv_heads, head_dim).permute(0, 3, 1, 4, 2))
        s.values[:, :, :capacity] = values.transpose(1, 2)
        s.length = SEGMENTS[name][0]
        segments[name] = s
    batch = Pass()
    for names, start, n in runs:
        batch.add([segments[name] for name in names], start, list(range(n)))
    return batch


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("heads", "kv_heads", "head_dim"), [(9, 3, 64), (4, 4, 32), (8, 2, 128)])
def test_the_attention_kernel_computes_the_reference(library, dtype, heads, kv_heads, head_dim):
    attention = KernelAttention(library, heads, kv_heads, head_dim, dtype)
    data = kv_data(2, kv_heads, head_dim, dtype)
    q, k, v = rows_data(heads, kv_heads, head_dim, dtype)
    batch = kernel_pass(data, kv_heads, head_dim, dtype)
    got = attention(1, q, k, v, attention.plan(batch)).double()
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2  # bfloat16: the output's last bits
    assert torch.allclose(got, reference(1, data, q, k, v), atol=tolerance, rtol=tolerance)


@pytest.mark.parametrize("dtype", DTYPES)
def test_an_attention_row_is_bit_identical_alone_and_in_any_batch(library, dtype):
    attention = KernelAttention(library, 9, 3, 64, dtype)
    data = kv_data(2, 3, 64, dtype)
    q, k, v = rows_data(9, 3, 64, dtype)
    batch = kernel_pass(data, 3, 64, dtype)  # held: the kernel writes into its segments
    together = attention(0, q, k, v, attention.plan(batch))
    alone = kernel_pass(data, 3, 64, dtype, RUNS[:1])  # the decode row, now alone
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
