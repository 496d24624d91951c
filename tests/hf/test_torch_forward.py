"""The engine's forward pass on torch (the path a GPU runs; `SPEX_KERNELS=torch` here): its
logits agree with the transformers model's own forward for Llama, Qwen2 and Qwen3 (GQA, q/k
norms, biases), a sequence alone and in passes that mix decode rows with prompt pieces; and a
pass's operator count does not grow with its batch."""

import pytest
import torch

from spex.bench.forward_check import ARCHITECTURES, Sequences, check, small_model
from spex.shared.hf.llama import LlamaRunner


@pytest.fixture(autouse=True)
def on_torch(monkeypatch):
    monkeypatch.setenv("SPEX_KERNELS", "torch")


@pytest.mark.parametrize("kind", ARCHITECTURES)
def test_logits_agree_with_transformers_alone_and_in_mixed_passes(kind):
    model = small_model(kind)
    runner = LlamaRunner(model, kv_tokens=32)  # a small pool: it grows on the way
    assert runner.paged and not runner.kernels
    seqs = Sequences(runner, 4)
    with torch.inference_mode():
        seqs.prefill_head()
        seqs.run(pieces=[0])  # alone
        seqs.run(decodes=[0])
        seqs.run(pieces=[1, 2], decodes=[0])  # two prompt pieces beside a decode row
        seqs.run(pieces=[3], decodes=[0, 1, 2])
        for _ in range(2):
            seqs.run(decodes=[2, 0, 3, 1])
        assert max(seqs.errors(model)) < 1e-4
    assert sorted(len(s) for s in seqs.logits) == [3, 4, 4, 6]  # every row checked


def test_the_gpu_check_s_first_stage_runs_the_same_check_here():
    rows = check()
    assert set(rows) == set(ARCHITECTURES)
    assert all(r["path"].startswith("torch") and r["vs_transformers"] < 1e-4 for r in rows.values())


def test_in_bfloat16_too():
    model = small_model("qwen3", torch.bfloat16)
    seqs = Sequences(LlamaRunner(model), 2)
    with torch.inference_mode():
        seqs.prefill_head()
        seqs.run(pieces=[0, 1])
        seqs.run(decodes=[0, 1])
        seqs.run(decodes=[1, 0])
        assert max(seqs.errors(model)) < 0.1


@pytest.mark.parametrize("kind", ["llama", "qwen3"])
def test_a_pass_runs_as_many_operators_whatever_its_batch(kind):
    runner = LlamaRunner(small_model(kind))
    seqs = Sequences(runner, 16)
    with torch.inference_mode():
        seqs.prefill_head()
        seqs.run(pieces=list(range(16)))
        counts = [seqs.run(decodes=list(range(n)), profiled=True) for n in (1, 4, 16)]
    assert counts[0] == counts[1] == counts[2], counts
    exact = LlamaRunner(small_model(kind), deterministic=True)  # each run alone: the count shows it
    seqs = Sequences(exact, 4)
    with torch.inference_mode():
        seqs.prefill_head()
        seqs.run(pieces=list(range(4)))
        assert seqs.run(decodes=[0], profiled=True) < seqs.run(decodes=[0, 1, 2, 3], profiled=True)


def test_a_mixed_pass_s_operators_do_not_grow_with_its_pieces_or_rows():
    runner = LlamaRunner(small_model("llama"))
    counts = []
    for pieces, decodes in (([0], [4]), ([0, 1, 2], [4, 5, 6, 7])):
        seqs = Sequences(runner, 8)
        with torch.inference_mode():
            seqs.prefill_head()
            seqs.run(pieces=decodes)
            seqs.run(decodes=decodes)
            counts.append(seqs.run(pieces=pieces, decodes=decodes, profiled=True))
    assert counts[0] == counts[1], counts


def test_the_pool_gets_every_page_back_once_segments_are_released():
    runner = LlamaRunner(small_model("llama"), kv_tokens=256)
    free = runner.pool.free_pages
    seqs = Sequences(runner, 3)
    with torch.inference_mode():
        seqs.prefill_head()
        seqs.run(pieces=[0, 1, 2])
        for _ in range(4):
            seqs.run(decodes=[0, 1, 2])
    for s in [seqs.head_kv, *seqs.piece_kv, *seqs.own]:
        s.release()
    assert runner.pool.free_pages == free
