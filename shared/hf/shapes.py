"""Model shapes: the simulator catalog's generator models by their published configs, for
random-weight models of the same size (`spex model init --shape NAME`). No torch or
transformers at import: the CLI reads the names.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedTokenizerBase

__all__ = ["RANDOM_WEIGHTS", "SHAPES", "Shape"]

RANDOM_WEIGHTS = "spex_random_weights_seed"  # a config field: no weights saved, build them from this seed


@dataclass(frozen=True)
class Shape:
    """A model's dimensions, as its published config gives them."""

    architecture: str  # a transformers `model_type`: llama, qwen3
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    rope_theta: float
    max_positions: int

    def config(self, tokenizer: PreTrainedTokenizerBase) -> PretrainedConfig:
        from transformers import LlamaConfig, Qwen3Config

        config_cls = {"llama": LlamaConfig, "qwen3": Qwen3Config}[self.architecture]
        return config_cls(
            vocab_size=self.vocab,
            hidden_size=self.hidden,
            intermediate_size=self.intermediate,
            num_hidden_layers=self.layers,
            num_attention_heads=self.heads,
            num_key_value_heads=self.kv_heads,
            head_dim=self.head_dim,
            max_position_embeddings=self.max_positions,
            rope_theta=self.rope_theta,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
            tie_word_embeddings=False,
        )

    def tiny(self) -> Shape:
        """The same architecture and head grouping at a size a CPU runs in seconds (dry runs)."""
        group = self.heads // self.kv_heads
        return replace(
            self,
            layers=2,
            hidden=128,
            intermediate=256,
            heads=4,
            kv_heads=max(1, 4 // group),
            head_dim=32,
            vocab=4096,
        )


# The simulator catalog's generator models (`roofline.hardware.MODELS`), by their published
# configs: Llemma-7B is Code Llama 7B (Llama-2-7B's layers, multi-head attention), R1-Qwen3-8B
# is Qwen3-8B (grouped-query attention, 8 KV heads, q and k normalized per head).
SHAPES: dict[str, Shape] = {
    "Llemma-7B": Shape("llama", 32, 4096, 11008, 32, 32, 128, 32016, 1e6, 4096),
    "R1-Qwen3-8B": Shape("qwen3", 36, 4096, 12288, 32, 8, 128, 151936, 1e6, 40960),
}
