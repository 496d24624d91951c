"""GPU and model catalogs, and the calibrated step-time model of an SGLang-like engine.

One decode or prefill step of a continuous-batching engine costs::

    t_step = t_overhead + max( (W_bytes + Σ ctx_i · kv_bytes_per_token) / (BW · η_bw),
                               (2 · N_params · new_tokens + attention_flops) / (PEAK · η_flop) )

with ``t_overhead = overhead_ms + overhead_per_seq_ms · batch`` and
``attention_flops = Σ_i 4 · n_layers · d_model · ctx_i`` per new token.

Calibration (one set per GPU family, fitted to the published measurements each names):

- *Ampere GDDR6* (RTX A6000, A40): η_bw 0.86, η_flop 0.60, 1.0 ms + 30 µs/seq. Anchored on
  Qwen2.5-7B/A6000 under vLLM (21.9 / 27.5 / 53.1 ms at bs 1 / 64 / 256); bs-1 decode of
  Llemma-7B reaches 82% of peak bandwidth end to end.
- *Ampere HBM* (A100-40GB, A100-80GB): η_bw 0.82, η_flop 0.70, 0.5 ms + 20 µs/seq. Anchored on
  LMDeploy's Llama-2-7B grid (9 / 12 ms at bs 1 / 64 short context; 15 / 21 / 30 ms at bs
  16 / 32 / 64 with ~1.1k context); bs-1 decode is 77% of peak bandwidth end to end.
- *Hopper* (H100, H200): η_bw 0.78, η_flop 0.70, 0.6 ms + 26 µs/seq. Anchored on SGLang's
  Llama-3-8B (7.4 / 11.8 ms at bs 1 / 128) and CodeLlama-34B (26 ms at bs 1); bs-1 decode of an
  8B model is 70% of peak bandwidth, the low end of the design range, which leaves the 7.4 ms
  anchor 14% above the model (the measured run had no overlap scheduler).

`tests/sim/test_calibration.py` holds the model to every anchor within 15%.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "GPUS",
    "MODELS",
    "Calibration",
    "Gpu",
    "Model",
    "Profile",
    "list_profiles",
    "parse_profile",
]


@dataclass(frozen=True)
class Calibration:
    eta_bw: float  # achieved fraction of peak memory bandwidth
    eta_flop: float  # achieved fraction of peak dense bf16 FLOP/s
    overhead_ms: float  # fixed CPU/launch cost per engine step
    overhead_per_seq_ms: float  # per-sequence cost (sampling, bookkeeping) per step


FAMILIES: dict[str, Calibration] = {
    "ampere-gddr6": Calibration(eta_bw=0.86, eta_flop=0.60, overhead_ms=1.0, overhead_per_seq_ms=0.030),
    "ampere-hbm": Calibration(eta_bw=0.82, eta_flop=0.70, overhead_ms=0.5, overhead_per_seq_ms=0.020),
    "hopper": Calibration(eta_bw=0.78, eta_flop=0.70, overhead_ms=0.6, overhead_per_seq_ms=0.026),
}


@dataclass(frozen=True)
class Gpu:
    name: str
    bandwidth_gbs: float  # peak memory bandwidth, GB/s
    peak_tflops: float  # dense bf16 tensor TFLOP/s
    memory_gb: float
    family: str

    @property
    def calibration(self) -> Calibration:
        return FAMILIES[self.family]


GPUS: dict[str, Gpu] = {
    g.name: g
    for g in (
        Gpu("A6000", 768.0, 154.8, 48.0, "ampere-gddr6"),
        Gpu("A40", 696.0, 149.7, 48.0, "ampere-gddr6"),
        Gpu("A100-40GB", 1555.0, 312.0, 40.0, "ampere-hbm"),
        Gpu("A100-80GB", 2039.0, 312.0, 80.0, "ampere-hbm"),
        Gpu("H100", 3350.0, 989.0, 80.0, "hopper"),
        Gpu("H200", 4800.0, 989.0, 141.0, "hopper"),
    )
}


@dataclass(frozen=True)
class Model:
    name: str
    read_bytes: float  # weight bytes read per decode step (input-embedding table excluded)
    resident_bytes: float  # weight bytes held in GPU memory
    kv_bytes_per_token: int
    matmul_params: float  # parameters taking part in matmuls (2·N FLOPs per token)
    n_layers: int
    d_model: int


def _llama2_7b(name: str) -> Model:
    return Model(name, 13.2e9, 13.5e9, 524_288, 6.6e9, 32, 4096)


def _codellama_34b(name: str) -> Model:
    return Model(name, 67.0e9, 67.5e9, 196_608, 33.5e9, 48, 8192)


MODELS: dict[str, Model] = {
    m.name: m
    for m in (
        _llama2_7b("Llama-2-7B"),
        _llama2_7b("Llemma-7B"),
        Model("Llama-3-8B", 15.0e9, 16.06e9, 131_072, 7.5e9, 32, 4096),
        Model("Qwen2.5-7B", 14.1e9, 15.2e9, 57_344, 7.07e9, 28, 3584),
        # An 8B GQA reasoning model (Qwen3-8B architecture, e.g. DeepSeek-R1-0528-Qwen3-8B).
        Model("R1-Qwen3-8B", 15.1e9, 16.4e9, 147_456, 7.55e9, 36, 4096),
        _codellama_34b("CodeLlama-34B"),
        _codellama_34b("Llemma-34B"),
    )
}

MEM_FRACTION_STATIC = 0.88  # SGLang's share of GPU memory for weights + KV pool


@dataclass(frozen=True)
class Profile:
    """A model served on a GPU: everything the step-time model needs."""

    gpu: Gpu
    model: Model

    @property
    def name(self) -> str:
        return f"{self.model.name}@{self.gpu.name}"

    @property
    def kv_capacity_tokens(self) -> int:
        pool = self.gpu.memory_gb * 1e9 * MEM_FRACTION_STATIC - self.model.resident_bytes
        return max(0, int(pool // self.model.kv_bytes_per_token))

    @property
    def request_s(self) -> float:
        """Engine time one request costs beside its steps (a measured server's API work); the
        roofline has none."""
        return 0.0

    @property
    def cache_block_tokens(self) -> int:
        """The prefix cache's granularity: SGLang's radix cache hits any prefix."""
        return 1

    @property
    def chunked_prefill_tokens(self) -> int:
        # SGLang's automatic --chunked-prefill-size: 2048 under 35 GB, 8192 under 160 GB.
        return 2048 if self.gpu.memory_gb < 35 else 8192

    def overhead_s(self, batch: int) -> float:
        cal = self.gpu.calibration
        return (cal.overhead_ms + cal.overhead_per_seq_ms * batch) / 1e3

    def memory_s(self, kv_tokens_read: float) -> float:
        cal = self.gpu.calibration
        read = self.model.read_bytes + kv_tokens_read * self.model.kv_bytes_per_token
        return read / (self.gpu.bandwidth_gbs * 1e9 * cal.eta_bw)

    def compute_s(self, flops: float) -> float:
        return flops / (self.gpu.peak_tflops * 1e12 * self.gpu.calibration.eta_flop)

    def attention_flops(self, new_tokens: float, ctx: float) -> float:
        """FLOPs of `new_tokens` attending over `ctx` tokens each (QK^T and AV)."""
        return 4.0 * self.model.n_layers * self.model.d_model * new_tokens * ctx

    def decode_flops(self, batch: int, ctx_sum: float) -> float:
        return 2.0 * self.model.matmul_params * batch + self.attention_flops(1, ctx_sum)

    def decode_step_s(self, batch: int, ctx_sum: float) -> float:
        """One decode step of `batch` sequences whose contexts add up to `ctx_sum` tokens."""
        if batch <= 0:
            return 0.0
        return self.overhead_s(batch) + max(
            self.memory_s(ctx_sum), self.compute_s(self.decode_flops(batch, ctx_sum))
        )

    def prefill_step_s(self, chunks: list[tuple[int, int]]) -> float:
        """One extend step; `chunks` holds (new_tokens, prefix_tokens) per request."""
        return self.mixed_step_s(0, 0.0, chunks)

    def mixed_step_s(self, batch: int, ctx_sum: float, chunks: Sequence[tuple[float, float]]) -> float:
        """One step that decodes `batch` sequences (contexts summing to `ctx_sum`) and extends
        `chunks` (SGLang's --enable-mixed-chunk): the weights are read once for both."""
        if batch <= 0 and not chunks:
            return 0.0
        prefix = sum(p for _, p in chunks)
        flops = self.prefill_flops(chunks) + (self.decode_flops(batch, ctx_sum) if batch else 0.0)
        return self.overhead_s(batch + len(chunks)) + max(
            self.memory_s(ctx_sum + prefix), self.compute_s(flops)
        )

    def prefill_flops(self, chunks: Sequence[tuple[float, float]]) -> float:
        new = sum(n for n, _ in chunks)
        return 2.0 * self.model.matmul_params * new + sum(
            self.attention_flops(n, p + n / 2) for n, p in chunks
        )


def parse_profile(name: str) -> Profile:
    """`MODEL@GPU`, e.g. `Llemma-7B@A6000`; raises ValueError naming what is unknown."""
    model_name, sep, gpu_name = name.partition("@")
    if not sep:
        raise ValueError(f"profile {name!r} must be MODEL@GPU (see --list-profiles)")
    if model_name not in MODELS:
        raise ValueError(f"profile {name!r}: unknown model {model_name!r}; known: {', '.join(MODELS)}")
    if gpu_name not in GPUS:
        raise ValueError(f"profile {name!r}: unknown GPU {gpu_name!r}; known: {', '.join(GPUS)}")
    profile = Profile(GPUS[gpu_name], MODELS[model_name])
    if profile.kv_capacity_tokens < 4096:
        raise ValueError(f"profile {name!r}: {model_name} does not fit on {gpu_name}")
    return profile


def list_profiles() -> list[Profile]:
    out = []
    for m in MODELS.values():
        for g in GPUS.values():
            p = Profile(g, m)
            if p.kv_capacity_tokens >= 4096:
                out.append(p)
    return out
