"""Torch's attention over the KV pool (`paged`): the independent reference for rows of every
kind (decode rows over shared pieces, a piece in two runs of one pass, the next piece in the
same pass), batched or each run alone (exact mode, bit-identical alone and in any batch);
the pool's pages handed out and back."""

import pytest
import torch

from spex.shared.hf.paged import NULL_SLOT, PAGE, KVPool, PagedAttention, PagedSegment
from tests.hf.attention_cases import RUNS, kv_data, reference, rows_data
from tests.hf.paged_cases import paged_pass

SHAPES = [(9, 3, 64), (4, 4, 32), (8, 2, 128), (6, 1, 16)]  # heads, kv heads, head dimension


@pytest.mark.parametrize("exact", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("heads", "kv_heads", "head_dim"), SHAPES)
def test_paged_attention_computes_the_reference(exact, dtype, heads, kv_heads, head_dim):
    pool = KVPool(2, kv_heads, head_dim, 64, dtype, "cpu")  # too small: it grows as segments come
    attention = PagedAttention(pool, heads, kv_heads, head_dim, exact=exact)
    data = kv_data(2, kv_heads, head_dim, dtype)
    q, k, v = rows_data(heads, kv_heads, head_dim, dtype)
    batch, _ = paged_pass(pool, data)
    got = attention(1, q, k, v, attention.plan(batch)).double()
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2  # bfloat16: the output's last bits
    assert torch.allclose(got, reference(1, data, q, k, v), atol=tolerance, rtol=tolerance)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_in_exact_mode_a_row_is_bit_identical_alone_and_in_any_batch(dtype):
    pool = KVPool(2, 3, 64, 512, dtype, "cpu")
    attention = PagedAttention(pool, 9, 3, 64, exact=True)
    data = kv_data(2, 3, 64, dtype)
    q, k, v = rows_data(9, 3, 64, dtype)
    batch, _ = paged_pass(pool, data)
    together = attention(0, q, k, v, attention.plan(batch))
    alone, _ = paged_pass(pool, data, RUNS[:1])
    assert torch.equal(attention(0, q[:1], k[:1], v[:1], attention.plan(alone)), together[:1])


def test_a_pass_s_keys_and_values_land_in_its_rows_segments_and_nowhere_else():
    pool = KVPool(1, 2, 16, 256, torch.float32, "cpu")
    attention = PagedAttention(pool, 2, 2, 16)
    batch, segments = paged_pass(pool, kv_data(1, 2, 16, torch.float32))
    before_keys = pool.keys.clone()
    q, k, v = rows_data(2, 2, 16, torch.float32)
    attention(0, q, k, v, attention.plan(batch))
    written = torch.zeros(pool.keys.shape[1], dtype=torch.bool)
    row = 0
    for names, start, n in RUNS:
        at = torch.from_numpy(segments[names[-1]].slots()[start : start + n])
        assert torch.equal(pool.keys[0, at], k[row : row + n]) and torch.equal(
            pool.values[0, at], v[row : row + n]
        )
        written[at] = True
        row += n
    assert torch.equal(pool.keys[0, ~written], before_keys[0, ~written])


def test_pages_go_back_to_the_pool_and_page_0_is_never_handed_out():
    pool = KVPool(1, 1, 16, 4 * PAGE, torch.float32, "cpu")
    first = PagedSegment(pool, 3 * PAGE)
    grown = PagedSegment(pool, 1)
    grown.grow(5 * PAGE)  # past what the pool had: it doubles
    taken = first.pages + grown.pages
    assert NULL_SLOT // PAGE not in taken and len(set(taken)) == len(taken)
    assert grown.capacity >= 5 * PAGE and first.capacity == 3 * PAGE
    free = pool.free_pages
    grown.release()
    assert pool.free_pages == free + len(taken) - len(first.pages) and grown.pages == []
    again = PagedSegment(pool, len(taken) * PAGE)  # the released pages are handed out again
    assert set(taken) - set(first.pages) <= set(again.pages)


def test_a_grown_pool_keeps_what_its_segments_hold():
    pool = KVPool(2, 1, 16, PAGE, torch.float32, "cpu")
    s = PagedSegment(pool, PAGE)
    at = torch.from_numpy(s.slots())
    data = torch.randn(2, PAGE, 1, 16)
    pool.keys[:, at] = data
    version = pool.version
    PagedSegment(pool, 10 * PAGE)
    assert pool.version > version and torch.equal(pool.keys[:, at], data)
