"""The engine's own forward pass over a transformers model's weights (Llama, Qwen2 and Qwen3
architectures): one pass a step over every row the step has, decode rows and prompt rows
together.

A row is one token: a sequence's newest token (decode) or a token of a prompt piece
(prefill). `forward` runs the embedding, then per layer the norms and linear layers once over
all the pass's rows (`linear`: q, k and v fused, gate and up fused) and the attention over each
row's own segments of KV (prompt pieces by reference, then the segment the row's token goes
into), and the final norm and head over the rows whose logits are wanted. A prompt piece costs
its rows in a pass that reads the weights anyway, not a pass of its own.

Two ways to run it, chosen by the model's device and dtype:
- the C kernels (`kernels`; CPU, float32 or bfloat16, the default there): attention per row in
  an order set by the row's own length, linear layers that sum each output in one fixed order
  whatever the row count — batch-invariant by construction. Each segment holds its own tensors.
- torch on any device (`SPEX_KERNELS=torch` on a CPU): a KV pool addressed by slot tables
  (`paged`), attention for a whole pass in a fixed number of launches per layer whatever the
  batch, torch's GEMM for the linear layers, and on CUDA the decode attention read in place
  (`triton_attention`), the norms, rotary embedding and activation fused
  (`triton_elementwise`), and decode passes replayed from CUDA graphs (`graphs`). Deterministic
  mode pads each pass to the row count from which torch's GEMM is batch-invariant
  (`linear.invariant_rows`, measured at start over every row count a pass can have).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from spex.shared.hf.attention import KV, KernelAttention, Pass, Segment, make_attention
from spex.shared.hf.elementwise import Elementwise, TorchElementwise
from spex.shared.hf.linear import TorchLinear, invariant_rows, make_linear
from spex.shared.hf.paged import DecodeKernel, KVPool, PagedAttention, PagedSegment

__all__ = ["ARCHITECTURES", "LlamaRunner"]

if TYPE_CHECKING:
    from transformers import PretrainedConfig

    from spex.shared.hf.graphs import DecodeGraphs

log = logging.getLogger(__name__)

ARCHITECTURES = ("llama", "qwen2", "qwen3")  # `config.model_type`s this forward pass runs


class LlamaRunner:
    def __init__(
        self,
        model: Any,
        deterministic: bool = False,
        max_rows: int = 16,
        max_logits: int = 0,
        kv_tokens: int = 4096,
        cuda_graphs: bool = True,
    ) -> None:
        """`max_rows`: the most rows a pass has; `max_logits`: the most rows whose logits a
        pass asks for (default `max_rows`); both bound what deterministic mode checks when it
        runs on torch. `kv_tokens`: what the torch path's KV pool holds at first (it grows).
        `cuda_graphs`: replay decode passes from CUDA graphs where the model is on CUDA."""
        config = model.config
        _check_architecture(config)
        self.model = model
        self.layers = list(model.model.layers)
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.qk_norm = hasattr(self.layers[0].self_attn, "q_norm")  # Qwen3: RMSNorm per head
        weight = model.model.embed_tokens.weight
        self.dtype, self.device = weight.dtype, weight.device
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
        self.pool: KVPool | None = None
        c_attention = make_attention(self.heads, self.kv_heads, self.head_dim, self.dtype, self.device)
        self.attention: KernelAttention | PagedAttention
        if c_attention is not None:
            self.attention = c_attention
        else:
            self.pool = KVPool(
                len(self.layers), self.kv_heads, self.head_dim, kv_tokens, self.dtype, self.device
            )
            kernel = _decode_kernel(self.device, self.dtype, self.heads, self.kv_heads, self.head_dim)
            self.attention = PagedAttention(
                self.pool, self.heads, self.kv_heads, self.head_dim, kernel, deterministic
            )
        self.kernels = self.pool is None and not isinstance(self.head, TorchLinear)
        silu = config.hidden_act == "silu"  # every architecture this pass runs declares it
        shape = (self.heads, self.kv_heads, self.head_dim, config.intermediate_size)
        self.elementwise = make_elementwise(self.device, self.dtype, self.layers[0].mlp.act_fn, silu, shape)
        if deterministic:
            self._pad_to_invariance(max_rows, max_logits or max_rows)
        self.graphs: DecodeGraphs | None = None
        # Deterministic mode replays only where the decode kernel runs: a graph's padded
        # decode pass on the gather path would give a row other bits than an eager pass.
        paged = self.attention if isinstance(self.attention, PagedAttention) else None
        invariant = not deterministic or (paged is not None and paged.decode_kernel is not None)
        if cuda_graphs and paged is not None and self.device.type == "cuda" and invariant:
            from spex.shared.hf.graphs import DecodeGraphs

            self.graphs = DecodeGraphs(self, paged, max_logits or max_rows)

    @property
    def rows(self) -> int:
        """The fewest rows the linear layers see (1: no padding)."""
        return max(op.rows for op in [*(op for ops in self.ops for op in ops), self.head])

    @property
    def paged(self) -> bool:
        return self.pool is not None

    @property
    def path(self) -> str:
        """Which forward pass runs: the C kernels, or torch's with its decode attention (the
        Triton kernel in place, or gathered for SDPA), its norms, rotary embedding and
        activation (fused Triton kernels, or torch's), and whether CUDA graphs replay it."""
        if not isinstance(self.attention, PagedAttention):
            return "C kernels"
        decode = "Triton in place" if self.attention.decode_kernel is not None else "gathered for SDPA"
        fused = ", fused elementwise" if not isinstance(self.elementwise, TorchElementwise) else ""
        return f"torch, decode attention {decode}{fused}" + (
            ", CUDA graphs" if self.graphs is not None else ""
        )

    @property
    def startup_s(self) -> float:
        """Time spent so far on start-up work inside passes: capturing CUDA graphs."""
        return self.graphs.capture_s if self.graphs is not None else 0.0

    def _pad_to_invariance(self, max_rows: int, max_logits: int) -> None:
        """Torch's linear layers (not the kernels, invariant as built): pad each pass to the
        row count from which every fused weight's GEMM is batch-invariant."""
        torch_ops = [op for ops in self.ops for op in ops if isinstance(op, TorchLinear)]
        checks = [(op, max_rows) for op in torch_ops]
        if isinstance(self.head, TorchLinear):
            checks.append((self.head, max_logits))
        counts = {id(op): _invariant_rows_of(op, most) for op, most in checks}
        if any(n == 0 for n in counts.values()):
            raise ValueError(
                f"deterministic mode: this machine's GEMM gives a row different bits at every batch size "
                f"up to {max_rows} for one of the model's weights; run without --deterministic"
            )
        rows = max(counts.values(), default=1)
        for op, _ in checks:
            op.rows = rows

    def new_segment(self, tokens: int) -> Segment | PagedSegment:
        """Room for at least `tokens` of keys and values."""
        if self.pool is not None:
            return PagedSegment(self.pool, tokens)
        return Segment.empty(len(self.layers), self.kv_heads, self.head_dim, tokens, self.dtype, self.device)

    def forward(self, batch: Pass[KV], logits_of: list[int]) -> torch.Tensor:
        """Run the pass's rows (writing their keys and values into their segments): the
        logits [len(logits_of), vocab] of the rows `logits_of`, float32."""
        logits = None
        every = logits_of == list(range(batch.rows))
        if self.graphs is not None and every:
            logits = self.graphs.run(batch)
        if logits is None:
            want = None if every else torch.tensor(logits_of, dtype=torch.long, device=self.device)
            ids = torch.tensor(batch.tokens, device=self.device)
            positions = torch.tensor(batch.positions, device=self.device)
            logits = self.compute(ids, positions, self.attention.plan(batch), want)  # type: ignore[arg-type]
        batch.finish()
        if self.device.type == "cuda":  # the pass's time is this step's, not the next read's
            torch.cuda.synchronize(self.device)
        return logits

    def compute(
        self, ids: torch.Tensor, positions: torch.Tensor, plan: Any, want: torch.Tensor | None
    ) -> torch.Tensor:
        """The forward pass on tensors (what a CUDA graph captures): ids and positions [rows],
        the attention's plan, the rows whose logits are wanted (None: all) -> logits, float32."""
        n = ids.shape[0]
        ew = self.elementwise
        residual = self.model.model.embed_tokens(ids)
        cos, sin = self.model.model.rotary_emb(residual[None], positions[None])
        cos, sin = cos[0], sin[0]  # [rows, head_dim]
        width_q, width_kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        hidden = ew.norm(residual, self.layers[0].input_layernorm)
        for i, (layer, (qkv, o, gate_up, down)) in enumerate(zip(self.layers, self.ops, strict=True)):
            fused = qkv(hidden)
            q = fused[:, :width_q].view(n, self.heads, self.head_dim)
            k = fused[:, width_q : width_q + width_kv].view(n, self.kv_heads, self.head_dim)
            v = fused[:, width_q + width_kv :].view(n, self.kv_heads, self.head_dim)
            if self.qk_norm:
                q, k = ew.norm(q, layer.self_attn.q_norm), ew.norm(k, layer.self_attn.k_norm)
            q, k = ew.rope(q, k, cos, sin)
            hidden, residual = ew.add_norm(
                o(self.attention(i, q, k, v, plan)), residual, layer.post_attention_layernorm
            )
            after = self.layers[i + 1].input_layernorm if i + 1 < len(self.layers) else self.model.model.norm
            hidden, residual = ew.add_norm(down(ew.silu_mul(gate_up(hidden))), residual, after)
        if want is not None:  # the final norm ran over every row: per row, so the same numbers
            hidden = hidden.index_select(0, want)
        return self.head(hidden).float()

    # ------------------------------------------------------------------ one sequence at a time
    def prefill(self, segments: list[KV], ids: tuple[int, ...] | list[int]) -> torch.Tensor:
        """A piece's tokens after `segments[-1]`'s, alone in a pass: the logits after its last."""
        segments[-1].grow(segments[-1].length + len(ids))
        batch: Pass[KV] = Pass()
        batch.add(segments, segments[-1].length, list(ids))
        return self.forward(batch, [batch.rows - 1])[0]

    def decode(self, sequences: list[list[KV]], tokens: list[int]) -> torch.Tensor:
        """One token per sequence (its segments), in one pass: logits [len(sequences), vocab]."""
        batch: Pass[KV] = Pass()
        for segments, token in zip(sequences, tokens, strict=True):
            segments[-1].grow(segments[-1].length + 1)
            batch.add(segments, segments[-1].length, [token])
        return self.forward(batch, list(range(batch.rows)))


def _check_architecture(config: PretrainedConfig) -> None:
    kind = config.model_type
    if kind not in ARCHITECTURES:
        raise ValueError(
            f"the hf engine runs Llama-architecture models ({', '.join(ARCHITECTURES)}); this one is {kind!r}"
        )
    layer_types = getattr(config, "layer_types", None) or []
    if getattr(config, "use_sliding_window", False) or any(t != "full_attention" for t in layer_types):
        raise ValueError(f"the hf engine attends over the whole context; this {kind} model slides a window")


def _decode_kernel(
    device: torch.device, dtype: torch.dtype, heads: int, kv_heads: int, head_dim: int
) -> DecodeKernel | None:
    """The in-place decode attention where Triton runs (CUDA), else None (gather and SDPA)."""
    if device.type != "cuda":
        return None
    try:
        from spex.shared.hf import triton_attention
    except ImportError as exc:  # no Triton here: the gather path serves
        log.warning("no triton (%s): decode attention is gathered for SDPA", exc)
        return None
    return triton_attention.decode_kernel(dtype, device, heads, kv_heads, head_dim)


_MEASURED: dict[tuple[object, ...], int] = {}


def _invariant_rows_of(op: TorchLinear, most: int) -> int:
    """`invariant_rows`, measured once per process for each kind of linear layer (its shape,
    bias, dtype, device and the thread count choose the kernel)."""
    w = op.weight
    key = (tuple(w.shape), op.bias is not None, w.dtype, w.device.type, torch.get_num_threads(), most)
    if key not in _MEASURED:
        _MEASURED[key] = invariant_rows(op, most)
    return _MEASURED[key]


def make_elementwise(
    device: torch.device,
    dtype: torch.dtype,
    act: Callable[[torch.Tensor], torch.Tensor],
    silu: bool,
    shape: tuple[int, int, int, int],
) -> Elementwise:
    """The fused kernels on CUDA for a SiLU-gated model, where Triton runs them right
    (checked against torch's on random rows of the model's `shape` — heads, KV heads, head
    dimension, MLP width — at start); torch's everywhere else."""
    if device.type == "cuda" and silu:
        try:
            from spex.shared.hf import triton_elementwise
        except ImportError:
            return TorchElementwise(act)
        fused = triton_elementwise.checked(dtype, device, shape)
        if fused is not None:
            return fused
    return TorchElementwise(act)
