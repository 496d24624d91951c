"""The engine's own forward pass over a transformers Llama model's weights: one pass a step
over every row the step has, decode rows and prompt rows together.

A row is one token: a sequence's newest token (decode) or a token of a prompt piece
(prefill). `forward` runs the embedding, then per layer the norms and linear layers once over
all the pass's rows (`linear`: q, k and v fused, gate and up fused) and the attention row by
row over each row's own segments of KV (`attention`: prompt pieces by reference, then the
segment the row's token goes into), and the final norm and head over the rows whose logits
are wanted. Nothing is padded or copied per step, and a prompt piece costs its rows in a pass
that reads the weights anyway, not a pass of its own.

Batch invariance — a row's numbers do not depend on its batch mates — holds by construction
with the C kernels (`kernels`): the attention is per row in an order set by the row's own
length, each linear layer's output sums its products in one fixed order whatever the row
count, and the norms and activations are row-wise. Without the kernels (torch alone), the
linear layers have it only from some number of rows up (this CPU's GEMM takes another kernel
for 1 to 3 rows in float32): deterministic mode then measures that number for each fused
weight when it starts (`invariant_rows`, over every row count up to 32 and steps of 8 beyond,
up to the most rows a pass can have) and pads a smaller pass to it — a check of the CPU's
kernels over random inputs, not a proof.
"""

from __future__ import annotations

from typing import Any

import torch

from spex.shared.hf.attention import Pass, Segment, TorchAttention, make_attention
from spex.shared.hf.linear import TorchLinear, make_linear

__all__ = ["LlamaRunner", "invariant_rows"]


class LlamaRunner:
    def __init__(
        self, model: Any, deterministic: bool = False, max_rows: int = 16, max_logits: int = 0
    ) -> None:
        """`max_rows`: the most rows a pass has; `max_logits`: the most rows whose logits a
        pass asks for (default `max_rows`); both bound what deterministic mode checks when it
        runs on torch alone."""
        config = model.config
        kind = getattr(config, "model_type", None)
        if kind != "llama":
            raise ValueError(f"the hf engine runs Llama-architecture models; this one is {kind!r}")
        self.model = model
        self.layers = list(model.model.layers)
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        weight = model.model.embed_tokens.weight
        self.dtype, self.device = weight.dtype, weight.device
        self.attention = make_attention(self.heads, self.kv_heads, self.head_dim, self.dtype, self.device)
        self.ops = [
            (
                make_linear([layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj]),
                make_linear([layer.self_attn.o_proj]),
                make_linear([layer.mlp.gate_proj, layer.mlp.up_proj]),
                make_linear([layer.mlp.down_proj]),
            )
            for layer in self.layers
        ]
        self.head = make_linear([model.lm_head])
        self.kernels = not isinstance(self.head, TorchLinear) and not isinstance(
            self.attention, TorchAttention
        )
        if deterministic:
            self._pad_to_invariance(max_rows, max_logits or max_rows)

    @property
    def rows(self) -> int:
        """The fewest rows the linear layers see (1: no padding)."""
        return max(getattr(op, "rows", 1) for op in [*(op for ops in self.ops for op in ops), self.head])

    def _pad_to_invariance(self, max_rows: int, max_logits: int) -> None:
        """Torch's linear layers (not the kernels, invariant as built): pad each pass to the
        row count from which every fused weight's GEMM is batch-invariant."""
        torch_ops = [op for ops in self.ops for op in ops if isinstance(op, TorchLinear)]
        checks = [(op, max_rows) for op in torch_ops]
        if isinstance(self.head, TorchLinear):
            checks.append((self.head, max_logits))
        counts = {id(op): _invariant_rows_of(op.linear, most) for op, most in checks}
        if any(n == 0 for n in counts.values()):
            raise ValueError(
                f"deterministic mode: this machine's GEMM gives a row different bits at every batch size "
                f"up to {max_rows} for one of the model's weights; run without --deterministic"
            )
        rows = max(counts.values(), default=1)
        for op, _ in checks:
            op.rows = rows

    def new_segment(self, tokens: int) -> Segment:
        """Room for at least `tokens` of keys and values."""
        return Segment.empty(len(self.layers), self.kv_heads, self.head_dim, tokens, self.dtype, self.device)

    def forward(self, batch: Pass, logits_of: list[int]) -> torch.Tensor:
        """Run the pass's rows (writing their keys and values into their segments): the
        logits [len(logits_of), vocab] of the rows `logits_of`, float32."""
        n = batch.rows
        ids = torch.tensor(batch.tokens, device=self.device)
        hidden = self.model.model.embed_tokens(ids)
        positions = torch.tensor(batch.positions, device=self.device)
        cos, sin = self.model.model.rotary_emb(hidden[None], positions[None])
        cos, sin = cos[0, :, None], sin[0, :, None]  # [rows, 1, head_dim]
        plan = self.attention.plan(batch)
        width_q, width_kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        for i, (layer, (qkv, o, gate_up, down)) in enumerate(zip(self.layers, self.ops, strict=True)):
            fused = qkv(layer.input_layernorm(hidden))
            q = fused[:, :width_q].view(n, self.heads, self.head_dim)
            k = fused[:, width_q : width_q + width_kv].view(n, self.kv_heads, self.head_dim)
            v = fused[:, width_q + width_kv :].view(n, self.kv_heads, self.head_dim)
            q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
            hidden = hidden + o(self.attention(i, q, k, v, plan))
            gate, up = gate_up(layer.post_attention_layernorm(hidden)).chunk(2, dim=-1)
            hidden = hidden + down(layer.mlp.act_fn(gate) * up)
        batch.finish()
        want = hidden[logits_of] if len(logits_of) < n else hidden
        return self.head(self.model.model.norm(want)).float()

    # ------------------------------------------------------------------ one sequence at a time
    def prefill(self, segments: list[Segment], ids: tuple[int, ...] | list[int]) -> torch.Tensor:
        """A piece's tokens after `segments[-1]`'s, alone in a pass: the logits after its last."""
        segments[-1].grow(segments[-1].length + len(ids))
        batch = Pass()
        batch.add(segments, segments[-1].length, list(ids))
        return self.forward(batch, [batch.rows - 1])[0]

    def decode(self, sequences: list[list[Segment]], tokens: list[int]) -> torch.Tensor:
        """One token per sequence (its segments), in one pass: logits [len(sequences), vocab]."""
        batch = Pass()
        for segments, token in zip(sequences, tokens, strict=True):
            segments[-1].grow(segments[-1].length + 1)
            batch.add(segments, segments[-1].length, [token])
        return self.forward(batch, list(range(batch.rows)))


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


_MEASURED: dict[tuple[Any, ...], int] = {}


def _invariant_rows_of(linear: torch.nn.Linear, most: int) -> int:
    """`invariant_rows`, measured once per process for each kind of linear layer (its shape,
    bias, dtype, device and the thread count choose the kernel)."""
    w = linear.weight
    key = (tuple(w.shape), linear.bias is not None, w.dtype, w.device.type, torch.get_num_threads(), most)
    if key not in _MEASURED:
        _MEASURED[key] = invariant_rows(linear, most)
    return _MEASURED[key]


def checked_counts(most: int) -> list[int]:
    """The row counts `invariant_rows` checks: every one up to 32, then steps of 8, and `most`."""
    return sorted({*range(1, min(most, 32) + 1), *range(40, most, 8), most})


def invariant_rows(linear: torch.nn.Linear, most: int = 16, trials: int = 8) -> int:
    """The fewest rows from which `linear` computes each row the same bits whatever the number
    of rows (checked at `checked_counts(most)`, against a batch of twice the most or of 32)
    and wherever the row sits; 0 if none. Over `trials` random batches (two past 32 rows,
    whose every check already sees that many rows), and a lone row at each
    of a batch's first 32 places: a different accumulation order shows only where it moves a
    rounding of the output, which one batch can miss (bfloat16 on this CPU: a lone row of a
    1536-wide down-projection differs for about one random input in ten)."""
    weight = linear.weight
    gen = torch.Generator(device=weight.device).manual_seed(0)
    counts = checked_counts(most)
    big = max(2 * most, 32)
    same = dict.fromkeys(counts, True)
    with torch.inference_mode():
        for trial in range(trials):
            x = torch.randn(big, weight.shape[1], generator=gen, device=weight.device).to(weight.dtype)
            ref = linear(x)
            alone = (torch.equal(linear(x[i : i + 1]), ref[i : i + 1]) for i in range(min(big, 32)))
            same[1] = same[1] and all(alone)
            for m in counts[1:] if trial < 2 else [c for c in counts[1:] if c <= 32]:
                same[m] = same[m] and (
                    torch.equal(linear(x[:m]), ref[:m]) and torch.equal(linear(x[big - m :]), ref[big - m :])
                )
    return next((m for m in counts if all(same[c] for c in counts if c >= m)), 0)
