"""The GPU's Triton kernels, run by Triton's interpreter on this CPU (float32: the
interpreter has no bfloat16): the decode attention (`triton_attention`) against the
independent reference for decode rows over shared pieces, through the same pool and plan the
GPU uses, and a row's bits alone and in any batch whatever the table's padding; the fused
elementwise kernels (`triton_elementwise`) against torch's; the self-checks that guard both
on a device; and the GPU's whole forward path, but for its CUDA graphs, against transformers."""

import os

import pytest
import torch

from spex.shared.hf.paged import KVPool, PagedAttention
from tests.hf.attention_cases import RUNS, kv_data, reference, rows_data
from tests.hf.paged_cases import paged_pass

pytest.importorskip("triton")
assert os.environ.get("TRITON_INTERPRET") == "1", "tests/conftest.py sets it before Triton is imported"

DECODE = [run for run in RUNS if run[2] == 1]  # the decode rows of the cases


@pytest.fixture(scope="module")
def triton_attention():
    from spex.shared.hf import triton_attention

    return triton_attention


@pytest.mark.parametrize(("heads", "kv_heads", "head_dim"), [(9, 3, 64), (4, 4, 32), (8, 2, 128), (6, 1, 80)])
def test_the_kernel_computes_the_reference_for_decode_rows(triton_attention, heads, kv_heads, head_dim):
    pool = KVPool(2, kv_heads, head_dim, 256, torch.float32, "cpu")
    attention = PagedAttention(pool, heads, kv_heads, head_dim, triton_attention.TritonDecode())
    data = kv_data(2, kv_heads, head_dim, torch.float32)
    q, k, v = rows_data(heads, kv_heads, head_dim, torch.float32, runs=DECODE)
    batch, _ = paged_pass(pool, data, DECODE)
    got = attention(1, q, k, v, attention.plan(batch)).double()
    assert torch.allclose(got, reference(1, data, q, k, v, DECODE), atol=1e-5, rtol=1e-5)


def test_a_long_row_spans_chunks_and_keeps_its_bits_alone_in_a_batch_and_behind_padding(triton_attention):
    kernel = triton_attention.TritonDecode()
    chunk = triton_attention.CHUNK
    gen = torch.Generator().manual_seed(3)
    keys, values = (torch.randn(4 * chunk, 2, 32, generator=gen) for _ in range(2))
    q = torch.randn(3, 4, 32, generator=gen)
    table = torch.randperm(4 * chunk, generator=gen)[: 3 * chunk].repeat(3, 1)
    lengths = torch.tensor([2 * chunk + 7, 5, chunk], dtype=torch.int32)
    together = kernel(q, keys, values, table, lengths)
    alone = kernel(q[:1], keys, values, table[:1, : 2 * chunk + 7], lengths[:1])
    assert torch.equal(alone, together[:1])
    at = table[0, : 2 * chunk + 7]
    ref = torch.nn.functional.scaled_dot_product_attention(
        q[0][None, :, None], keys[at].transpose(0, 1)[None], values[at].transpose(0, 1)[None], enable_gqa=True
    )[0, :, 0].reshape(-1)
    assert torch.allclose(together[0], ref, atol=1e-5)


def test_the_self_check_passes_a_right_kernel_and_turns_a_wrong_one_away(triton_attention, monkeypatch):
    kernel, cpu = triton_attention.TritonDecode(), torch.device("cpu")
    assert triton_attention._check(kernel, torch.float32, cpu, 8, 2, 128) < 1e-5
    assert triton_attention._check(kernel, torch.float32, cpu, 6, 1, 80) < 1e-5  # the model's own layout
    assert isinstance(triton_attention.decode_kernel(torch.float32, "cpu"), triton_attention.TritonDecode)

    def off_by_a_bit(self, *args):
        return original(self, *args) * 1.01

    original = triton_attention.TritonDecode.__call__
    monkeypatch.setattr(triton_attention.TritonDecode, "__call__", off_by_a_bit)
    assert triton_attention.decode_kernel(torch.float32, "cpu") is None


def test_the_fused_elementwise_kernels_match_torch_s_and_a_wrong_one_is_turned_away(monkeypatch):
    from spex.shared.hf import triton_elementwise

    assert (
        triton_elementwise._check(
            triton_elementwise.TritonElementwise(), torch.float32, torch.device("cpu"), 6, 2, 80, 96
        )
        < 1e-5
    )
    assert isinstance(triton_elementwise.checked(torch.float32, "cpu"), triton_elementwise.TritonElementwise)
    original = triton_elementwise.TritonElementwise.silu_mul
    monkeypatch.setattr(
        triton_elementwise.TritonElementwise, "silu_mul", lambda self, gu: original(self, gu) * 1.01
    )
    assert triton_elementwise.checked(torch.float32, "cpu") is None


@pytest.mark.parametrize("kind", ["llama", "qwen2", "qwen3"])
def test_the_gpu_s_whole_forward_path_agrees_with_transformers(triton_attention, monkeypatch, kind):
    """The path a GPU runs, but for the CUDA graphs: Triton's decode attention and fused
    elementwise kernels, through the interpreter."""
    from spex.bench.forward_check import drive, small_model
    from spex.shared.hf.llama import LlamaRunner
    from spex.shared.hf.triton_elementwise import TritonElementwise

    monkeypatch.setenv("SPEX_KERNELS", "torch")
    model = small_model(kind)
    runner = LlamaRunner(model, kv_tokens=64)
    runner.attention.decode_kernel = triton_attention.TritonDecode()
    runner.elementwise = TritonElementwise()
    seqs = drive(runner)
    with torch.inference_mode():
        assert max(seqs.errors(model)) < 1e-4


def test_in_exact_mode_decode_rows_go_to_the_kernel_and_keep_their_bits_beside_prompt_rows(triton_attention):
    pool = KVPool(2, 3, 64, 512, torch.float32, "cpu")
    attention = PagedAttention(pool, 9, 3, 64, triton_attention.TritonDecode(), exact=True)
    data = kv_data(2, 3, 64, torch.float32)
    q, k, v = rows_data(9, 3, 64, torch.float32)
    batch, _ = paged_pass(pool, data)  # two decode rows, then prompt runs (each alone)
    plan = attention.plan(batch)
    assert len(plan.groups) == 1 and plan.groups[0].queries == 1 and len(plan.alone) == 3
    together = attention(1, q, k, v, plan)
    assert torch.allclose(together.double(), reference(1, data, q, k, v), atol=1e-5)
    alone, _ = paged_pass(pool, data, RUNS[:1])
    assert torch.equal(attention(1, q[:1], k[:1], v[:1], attention.plan(alone)), together[:1])
