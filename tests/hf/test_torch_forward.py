"""The engine's forward pass on torch (the path a GPU runs; `SPEX_KERNELS=torch` here): its
logits agree with the transformers model's own forward for Llama, Qwen2 and Qwen3 (GQA, q/k
norms, biases), a sequence alone and in passes that mix decode rows with prompt pieces; and a
pass's operator count does not grow with its batch."""

import contextlib

import pytest
import torch
from torch.profiler import ProfilerActivity, profile
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from spex.shared.hf.attention import Pass
from spex.shared.hf.llama import LlamaRunner

SMALL = dict(
    vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=512, tie_word_embeddings=False,
)  # fmt: skip
ARCHITECTURES = {
    "llama": (LlamaConfig, LlamaForCausalLM, {}),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM, {}),  # biased q, k and v
    "qwen3": (Qwen3Config, Qwen3ForCausalLM, {"head_dim": 16}),  # RMSNorm on q and k per head
}


@pytest.fixture(autouse=True)
def on_torch(monkeypatch):
    monkeypatch.setenv("SPEX_KERNELS", "torch")


def small_model(kind, dtype=torch.float32):
    config_cls, model_cls, extra = ARCHITECTURES[kind]
    torch.manual_seed(0)
    model = model_cls(config_cls(**SMALL, **extra)).to(dtype).eval()
    for name, p in model.named_parameters():  # norms and biases away from their initial values
        if "norm" in name or "bias" in name:
            p.data.add_(0.1 * torch.randn_like(p))
    return model


class Sequences:
    """Sequences sharing a head piece, each with its own piece, then decoding: drives passes
    of the runner and keeps every logit it gave each sequence, by position."""

    def __init__(self, runner, count, seed=1):
        gen = torch.Generator().manual_seed(seed)
        self.runner = runner
        self.head = torch.randint(0, 300, (9,), generator=gen).tolist()
        self.pieces = [torch.randint(0, 300, (5 + 3 * i,), generator=gen).tolist() for i in range(count)]
        self.tokens = [torch.randint(0, 300, (6,), generator=gen).tolist() for _ in range(count)]
        self.head_kv = runner.new_segment(len(self.head))
        self.piece_kv = [runner.new_segment(len(p)) for p in self.pieces]
        self.own = [runner.new_segment(2) for _ in range(count)]
        self.logits: list[dict[int, torch.Tensor]] = [{} for _ in range(count)]
        self.decoded = [0] * count

    def ids(self, i):
        return self.head + self.pieces[i] + self.tokens[i][: self.decoded[i]]

    def prefill_head(self):
        batch = Pass()
        batch.add([self.head_kv], 0, self.head)
        self.runner.forward(batch, [])

    def run(self, pieces=(), decodes=(), profiled=False):
        """One pass: the pieces of sequences `pieces` (whole) and a decode row for each of
        `decodes`; with `profiled`, the torch operators its forward ran."""
        batch, owners = Pass(), []
        for kind, i in [*(("decode", i) for i in decodes), *(("piece", i) for i in pieces)]:
            if kind == "piece":
                row = batch.add([self.head_kv, self.piece_kv[i]], 0, self.pieces[i]) + len(self.pieces[i]) - 1
                owners.append((row, i, len(self.head) + len(self.pieces[i]) - 1))
            else:
                own = self.own[i]
                own.grow(own.length + 1)
                row = batch.add(
                    [self.head_kv, self.piece_kv[i], own], own.length, [self.tokens[i][self.decoded[i]]]
                )
                owners.append((row, i, len(self.head) + len(self.pieces[i]) + self.decoded[i]))
                self.decoded[i] += 1
        with profile(activities=[ProfilerActivity.CPU]) if profiled else contextlib.nullcontext() as prof:
            logits = self.runner.forward(batch, [row for row, _, _ in owners])
        for (_, i, position), row in zip(owners, logits):
            self.logits[i][position] = row
        return sum(e.count for e in prof.key_averages() if e.key.startswith("aten::")) if profiled else None


@pytest.mark.parametrize("kind", list(ARCHITECTURES))
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
        for i in range(4):
            ref = model(input_ids=torch.tensor([seqs.ids(i)])).logits[0].float()
            for position, got in seqs.logits[i].items():
                assert torch.allclose(got, ref[position], atol=1e-4), (kind, i, position)
    assert sorted(len(s) for s in seqs.logits) == [3, 4, 4, 6]  # every row checked


def test_in_bfloat16_too():
    model = small_model("qwen3", torch.bfloat16)
    seqs = Sequences(LlamaRunner(model), 2)
    with torch.inference_mode():
        seqs.prefill_head()
        seqs.run(pieces=[0, 1])
        seqs.run(decodes=[0, 1])
        seqs.run(decodes=[1, 0])
        for i in range(2):
            ref = model(input_ids=torch.tensor([seqs.ids(i)])).logits[0].float()
            for position, got in seqs.logits[i].items():
                assert torch.allclose(got, ref[position], atol=0.1, rtol=0.05), (i, position)


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
