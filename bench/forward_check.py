"""The engine's forward pass checked against transformers' own, on any device: small
random-weight models of each architecture it runs, driven through passes that mix decode rows
with prompt pieces over a shared head, every logit compared with the model's own forward over
the whole sequence. The tests run it on a CPU (`tests/hf/test_torch_forward.py`); the GPU
check runs it first on the device (`check`), where it meets the Triton kernel and the CUDA
graphs before anything is timed.
"""

from __future__ import annotations

import contextlib
from typing import Any, NotRequired, TypedDict

import torch

from spex.shared.hf.attention import KV, Pass
from spex.shared.hf.llama import LlamaRunner

__all__ = ["ARCHITECTURES", "ForwardRow", "Sequences", "check", "drive", "small_model"]

SMALL = {
    "vocab_size": 300,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 512,
    "tie_word_embeddings": False,
}
ARCHITECTURES = ("llama", "qwen2", "qwen3")  # qwen2: biased q, k and v; qwen3: q and k normalized per head


class ForwardRow(TypedDict):
    """An architecture's check: the path that ran and the largest logit differences."""

    path: str
    vs_transformers: float  # from transformers' own forward
    graphs_vs_eager: NotRequired[float]  # the CUDA graphs' decode passes from the same passes eager


def small_model(kind: str, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> Any:
    """A two-layer GQA model of `kind`, its norms and biases moved off their initial values."""
    import transformers

    config_cls, model_cls = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
        "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
    }[kind]
    extra = {"head_dim": 16} if kind == "qwen3" else {}
    torch.manual_seed(0)
    model = model_cls(config_cls(**SMALL, **extra)).to(dtype).eval()
    for name, p in model.named_parameters():
        if "norm" in name or "bias" in name:
            p.data.add_(0.1 * torch.randn_like(p))
    return model.to(device)


class Sequences:
    """Sequences sharing a head piece, each with its own piece, then decoding: drives passes
    of the runner and keeps every logit it gave each sequence, by position."""

    def __init__(self, runner: LlamaRunner, count: int, seed: int = 1) -> None:
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

    def ids(self, i: int) -> list[int]:
        return self.head + self.pieces[i] + self.tokens[i][: self.decoded[i]]

    def prefill_head(self) -> None:
        batch: Pass[KV] = Pass()
        batch.add([self.head_kv], 0, self.head)
        self.runner.forward(batch, [])

    def run(
        self,
        pieces: list[int] | tuple[int, ...] = (),
        decodes: list[int] | tuple[int, ...] = (),
        profiled: bool = False,
    ) -> int | None:
        """One pass: the pieces of sequences `pieces` (whole) and a decode row for each of
        `decodes`; with `profiled`, the count of torch operators its forward ran."""
        batch: Pass[KV] = Pass()
        owners = []
        for kind, i in [*(("decode", i) for i in decodes), *(("piece", i) for i in pieces)]:
            if kind == "piece":
                row = batch.add([self.head_kv, self.piece_kv[i]], 0, self.pieces[i]) + len(self.pieces[i]) - 1
                owners.append((row, i, len(self.head) + len(self.pieces[i]) - 1))
            else:
                own = self.own[i]
                own.grow(own.length + 1)
                token = self.tokens[i][self.decoded[i]]
                row = batch.add([self.head_kv, self.piece_kv[i], own], own.length, [token])
                owners.append((row, i, len(self.head) + len(self.pieces[i]) + self.decoded[i]))
                self.decoded[i] += 1
        profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
        with profiler if profiled else contextlib.nullcontext() as prof:
            logits = self.runner.forward(batch, [row for row, _, _ in owners])
        for (_, i, position), row in zip(owners, logits, strict=True):
            self.logits[i][position] = row
        if prof is None:
            return None
        return sum(e.count for e in prof.key_averages() if e.key.startswith("aten::"))

    def errors(self, model: Any) -> list[float]:
        """Each logit's largest difference from the model's own forward over the sequence."""
        out = []
        for i in range(len(self.logits)):
            device = model.model.embed_tokens.weight.device
            ref = model(input_ids=torch.tensor([self.ids(i)], device=device)).logits[0].float()
            out += [float((got - ref[position]).abs().max()) for position, got in self.logits[i].items()]
        return out


PASSES: list[dict[str, list[int]]] = [
    {"pieces": [0]},
    {"decodes": [0]},
    {"pieces": [1, 2], "decodes": [0]},
    {"pieces": [3], "decodes": [0, 1, 2]},
    {"decodes": [2, 0, 3, 1]},
    {"decodes": [2, 0, 3, 1]},
]


def drive(runner: LlamaRunner, passes: list[dict[str, list[int]]] = PASSES, count: int = 4) -> Sequences:
    """`count` sequences through `passes` (after their shared head): their logits kept."""
    seqs = Sequences(runner, count)
    with torch.inference_mode():
        seqs.prefill_head()
        for rows in passes:
            seqs.run(rows.get("pieces", ()), rows.get("decodes", ()))
    return seqs


def check(
    device: str = "cpu", dtype: torch.dtype = torch.float32, cuda_graphs: bool = True
) -> dict[str, ForwardRow]:
    """Per architecture on `device`: the path that ran, the largest logit difference from
    transformers, and (where CUDA graphs replay decode passes) from the same passes run eagerly."""
    out: dict[str, ForwardRow] = {}
    for kind in ARCHITECTURES:
        model = small_model(kind, dtype, device)
        runner = LlamaRunner(model, kv_tokens=64, cuda_graphs=cuda_graphs)
        seqs = drive(runner)
        with torch.inference_mode():
            row: ForwardRow = {"path": runner.path, "vs_transformers": max(seqs.errors(model))}
        if runner.graphs is not None:
            eager = LlamaRunner(model, kv_tokens=64, cuda_graphs=False)
            plain = drive(eager)
            row["graphs_vs_eager"] = max(
                float((mine[p] - theirs[p]).abs().max())
                for mine, theirs in zip(seqs.logits, plain.logits, strict=True)
                for p in mine
            )
        out[kind] = row
    return out
