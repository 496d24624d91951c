"""Decode passes as a CUDA graph replays them (`graphs`), run here without the graph: padded
to a bucket of rows and of keys, they give each sequence the logits the unpadded pass does;
a pass with prompt rows is left to run eagerly."""

import pytest
import torch

from spex.bench.forward_check import Sequences, drive, small_model
from spex.shared.hf.graphs import DecodeGraphs
from spex.shared.hf.llama import LlamaRunner


@pytest.fixture(autouse=True)
def on_torch(monkeypatch):
    monkeypatch.setenv("SPEX_KERNELS", "torch")


@pytest.mark.parametrize("kind", ["llama", "qwen3"])
def test_a_padded_decode_pass_gives_each_sequence_the_logits_of_the_unpadded_one(kind):
    model = small_model(kind)
    passes = [{"pieces": [0, 1, 2, 3, 4]}] + [
        {"decodes": d} for d in ([0], [1, 2, 3], [4, 0, 2, 1, 3], [3, 1])
    ]
    plain = drive(LlamaRunner(model), passes, count=5)
    padded_runner = LlamaRunner(model)
    padded_runner.graphs = DecodeGraphs(padded_runner, padded_runner.attention, max_batch=16, capture=False)
    calls = []
    run = padded_runner.graphs.run
    padded_runner.graphs.run = lambda batch: calls.append(batch.rows) or run(batch)
    padded = drive(padded_runner, passes, count=5)
    assert calls == [1, 3, 5, 2]  # the decode passes went through the padded path; the prompt pass did not
    for mine, theirs in zip(padded.logits, plain.logits):
        assert mine.keys() == theirs.keys()
        for position in mine:
            assert torch.allclose(mine[position], theirs[position], atol=1e-5), position


def test_a_pass_with_prompt_rows_or_past_the_largest_bucket_is_not_padded():
    runner = LlamaRunner(small_model("llama"))
    graphs = DecodeGraphs(runner, runner.attention, max_batch=2, capture=False)
    seqs = Sequences(runner, 3)
    from spex.shared.hf.attention import Pass

    with torch.inference_mode():
        seqs.prefill_head()
        batch = Pass()
        batch.add([seqs.head_kv, seqs.piece_kv[0]], 0, seqs.pieces[0])
        assert graphs.run(batch) is None
        seqs.run(pieces=[0, 1, 2])
        three = Pass()
        for i in range(3):
            seqs.own[i].grow(1)
            three.add([seqs.head_kv, seqs.piece_kv[i], seqs.own[i]], 0, [seqs.tokens[i][0]])
        assert graphs.run(three) is None  # 3 rows, buckets up to 2
        assert graphs.sizes == [1, 2]


def test_a_pool_that_grows_drops_the_graphs_and_a_bucket_is_captured_once():
    model = small_model("llama")
    runner = LlamaRunner(model, kv_tokens=64)
    runner.graphs = graphs = DecodeGraphs(runner, runner.attention, max_batch=8, capture=False)
    plain = LlamaRunner(model, kv_tokens=4096)
    passes = [{"pieces": [0, 1, 2]}, {"decodes": [0, 1]}, {"decodes": [1, 0]}]
    mine, theirs = Sequences(runner, 3), Sequences(plain, 3)
    with torch.inference_mode():
        for seqs in (mine, theirs):
            seqs.prefill_head()
            for rows in passes:
                seqs.run(rows.get("pieces", ()), rows.get("decodes", ()))
        assert list(graphs.graphs) == [(2, 256)]  # two passes, one bucket: captured once
        version = runner.pool.version
        runner.new_segment(64 * 16)  # past the pool: it grows and moves
        assert runner.pool.version > version
        for seqs in (mine, theirs):
            seqs.run(decodes=[2, 1, 0])
        assert list(graphs.graphs) == [(4, 256)]  # the old ones dropped, the new one captured
    for a, b in zip(mine.logits, theirs.logits):
        assert a.keys() == b.keys() and all(torch.allclose(a[p], b[p], atol=1e-5) for p in a)
