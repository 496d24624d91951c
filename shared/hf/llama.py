"""The engine's own forward pass over a transformers Llama model's weights: batched decode
over per-sequence KV buffers written in place, and prefill of one prompt piece at a time.

transformers' generic path keeps a sequence's KV as a tensor that each step concatenates a
token onto, and batches sequences by left-padding copies of them into one tensor: three
copies of every sequence's KV per step, which cost more than the model's matmuls at batch
16. Here each sequence owns, per layer, a buffer of keys and values with room to spare
(`SeqKV`; doubled when full); a step writes its token's keys and values in place, runs the
linear layers once over the batch's rows, and attends row by row over each sequence's own
length. Nothing is padded or copied per step.

Batch invariance — a request's numbers do not depend on its batch mates. The attention
already has it: each row attends alone, over exactly its own tokens, and a prompt piece is
always run alone. The linear layers have it from some number of rows up: here the GEMM
reduces a row the same way for 4 rows as for 64, wherever the row sits, while 1 to 3 rows
take another kernel. Deterministic mode measures that number for each of the model's
weight shapes when it starts (`invariant_rows`) and pads a smaller decode batch to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["LlamaRunner", "SeqKV", "invariant_rows"]


@dataclass(eq=False)
class SeqKV:
    """One sequence's keys and values, per layer [kv_heads, capacity, head_dim]."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    length: int = 0

    @property
    def capacity(self) -> int:
        return int(self.keys[0].shape[1])

    def reserve(self, tokens: int) -> None:
        """Room for `tokens` in all; grown to at least double, keeping what is there."""
        if tokens <= self.capacity:
            return
        size = max(tokens, 2 * self.capacity)
        for layer in range(len(self.keys)):
            for store in (self.keys, self.values):
                old = store[layer]
                new = old.new_empty(old.shape[0], size, old.shape[2])
                new[:, : self.length] = old[:, : self.length]
                store[layer] = new

    def append(self, kv: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Copy a piece's KV (per layer [1, kv_heads, tokens, head_dim]) in after ours."""
        tokens = int(kv[0][0].shape[2])
        self.reserve(self.length + tokens)
        end = self.length + tokens
        for layer, (k, v) in enumerate(kv):
            self.keys[layer][:, self.length : end] = k[0]
            self.values[layer][:, self.length : end] = v[0]
        self.length = end

    def piece(self, start: int, end: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """A copy of positions [start, end), per layer [1, kv_heads, tokens, head_dim]."""
        return [
            (k[None, :, start:end].clone(), v[None, :, start:end].clone())
            for k, v in zip(self.keys, self.values, strict=True)
        ]


class LlamaRunner:
    def __init__(self, model: Any, deterministic: bool = False, max_rows: int = 16) -> None:
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
        self.rows = 1  # the fewest rows a decode step's linear layers see
        if deterministic:
            linears = {
                (tuple(m.weight.shape), m.bias is not None): m
                for m in model.modules()
                if isinstance(m, torch.nn.Linear)
            }
            counts = {kind: _invariant_rows_of(m, max_rows) for kind, m in linears.items()}
            bad = [shape for (shape, _), n in counts.items() if n == 0]
            if bad:
                raise ValueError(
                    f"deterministic mode: this machine's GEMM gives a row different bits at every batch "
                    f"size up to {max_rows} for weight shape {bad[0]}; run without --deterministic"
                )
            self.rows = max(counts.values())

    def new_kv(self, capacity: int) -> SeqKV:
        shape = (self.kv_heads, max(capacity, 16), self.head_dim)
        new = lambda: torch.empty(shape, dtype=self.dtype, device=self.device)  # noqa: E731
        return SeqKV([new() for _ in self.layers], [new() for _ in self.layers])

    def prefill(self, kv: SeqKV, ids: tuple[int, ...]) -> torch.Tensor:
        """Run a piece's tokens after what `kv` holds (writing theirs into it); the logits
        after its last token."""
        start, count = kv.length, len(ids)
        kv.reserve(start + count)
        positions = torch.arange(start, start + count, device=self.device)
        causal = torch.ones(count, start + count, dtype=torch.bool, device=self.device).tril(start)

        def attend(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            keys, values = kv.keys[layer], kv.values[layer]
            keys[:, start : start + count] = k.transpose(0, 1)
            values[:, start : start + count] = v.transpose(0, 1)
            end = start + count
            out = _attention(q.transpose(0, 1), keys[:, :end], values[:, :end], causal)
            return out.transpose(0, 1).reshape(count, -1)

        hidden = self._run(torch.tensor(ids, device=self.device), positions, attend, rows=1, last_only=True)
        kv.length = start + count
        return hidden[-1]

    def decode(self, kvs: list[SeqKV], tokens: list[int]) -> torch.Tensor:
        """One token per sequence, each after what its `kv` holds: logits [len(kvs), vocab]."""
        lengths = [kv.length for kv in kvs]
        for kv in kvs:
            kv.reserve(kv.length + 1)
        positions = torch.tensor(lengths, device=self.device)

        def attend(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            rows = []
            for b, (kv, n) in enumerate(zip(kvs, lengths, strict=True)):
                keys, values = kv.keys[layer], kv.values[layer]
                keys[:, n] = k[b]
                values[:, n] = v[b]
                # One token: each kv head's group of query heads are its queries.
                group = q[b].view(1, self.kv_heads, -1, self.head_dim)
                rows.append(
                    F.scaled_dot_product_attention(group, keys[None, :, : n + 1], values[None, :, : n + 1])[0]
                )
            return torch.stack(rows).reshape(len(kvs), -1)

        logits = self._run(
            torch.tensor(tokens, device=self.device), positions, attend, rows=self.rows, last_only=False
        )
        for kv in kvs:
            kv.length += 1
        return logits

    def _run(
        self, ids: torch.Tensor, positions: torch.Tensor, attend: Any, rows: int, last_only: bool
    ) -> torch.Tensor:
        """The layers over `ids` at `positions`, one row each (a decode batch; padded to
        `rows` for the linear layers), with `attend(layer, q, k, v)` ([rows, heads, head_dim]
        each, rotated) giving the attention output; the final logits (of the last row only
        if `last_only`)."""
        n = int(ids.shape[0])
        hidden = self.model.model.embed_tokens(ids)
        cos, sin = self.model.model.rotary_emb(hidden[None], positions[None])
        cos, sin = cos[0, :, None], sin[0, :, None]  # [rows, 1, head_dim]
        pad = max(0, rows - n)
        for i, layer in enumerate(self.layers):
            attn = layer.self_attn
            x = _rows(layer.input_layernorm(hidden), pad)
            q = attn.q_proj(x)[:n].view(n, self.heads, self.head_dim)
            k = attn.k_proj(x)[:n].view(n, self.kv_heads, self.head_dim)
            v = attn.v_proj(x)[:n].view(n, self.kv_heads, self.head_dim)
            q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
            out = attend(i, q, k, v)
            hidden = hidden + attn.o_proj(_rows(out, pad))[:n]
            hidden = hidden + layer.mlp(_rows(layer.post_attention_layernorm(hidden), pad))[:n]
        if last_only:
            hidden = hidden[-1:]
            n = 1
        final = self.model.model.norm(hidden)
        return self.model.lm_head(_rows(final, max(0, rows - n)))[:n].float()


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """q [heads, tokens, head_dim] over k, v [kv_heads, length, head_dim] (grouped-query)."""
    return F.scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=mask, enable_gqa=True)[0]


def _rows(x: torch.Tensor, pad: int) -> torch.Tensor:
    return x if pad <= 0 else torch.cat([x, x.new_zeros(pad, *x.shape[1:])])


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


def invariant_rows(linear: torch.nn.Linear, most: int = 16, trials: int = 8) -> int:
    """The fewest rows from which `linear` computes each row the same bits whatever the number
    of rows (up to `most`, against a batch of twice that) and wherever the row sits; 0 if
    none. Over `trials` random batches, and a lone row at each of a batch's first 32 places:
    a different accumulation order shows only where it moves a rounding of the output, which
    one batch can miss (bfloat16 on this CPU: a lone row of a 1536-wide down-projection
    differs for about one random input in ten)."""
    weight = linear.weight
    gen = torch.Generator(device=weight.device).manual_seed(0)
    big = 2 * most
    same = [True] * most
    with torch.inference_mode():
        for _ in range(trials):
            x = torch.randn(big, weight.shape[1], generator=gen, device=weight.device).to(weight.dtype)
            ref = linear(x)
            alone = (torch.equal(linear(x[i : i + 1]), ref[i : i + 1]) for i in range(min(big, 32)))
            same[0] = same[0] and all(alone)
            for m in range(2, most + 1):
                same[m - 1] = same[m - 1] and (
                    torch.equal(linear(x[:m]), ref[:m]) and torch.equal(linear(x[big - m :]), ref[big - m :])
                )
    return next((m for m in range(1, most + 1) if all(same[m - 1 :])), 0)
