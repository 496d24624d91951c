"""The process reward models of each family in process (`spex.shared.content.reward_prompts`
says what each family reads): the model class a directory loads as, random-weight ones built
here from an architecture's config, and the two logits a path's score is read from.

- `token-classification`: transformers' `AutoModelForTokenClassification` (two labels).
- `step-tag`: `Qwen2ForProcessRewardModel`, which transformers does not ship (Qwen's checkpoints
  bring it as remote code, `modeling_qwen2_rm.py`): a Qwen2 body (`model.*`) and a score head
  `score = Sequential(Linear(hidden, hidden), ReLU, Linear(hidden, 2))` (`score.0.*`,
  `score.2.*`) — the layout of Qwen/Qwen2.5-Math-PRM-7B's weights, which vLLM's own
  `Qwen2ForProcessRewardModel` (vllm/model_executor/models/qwen2_rm.py) loads too, so one
  directory is served by vLLM and run here alike.
- `plus-minus`: a causal LM (`AutoModelForCausalLM`); only the good and bad tokens' logits at the
  read position are computed (`logits_to_keep`), not the whole vocabulary at every position.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import nn
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Qwen2Config,
)
from transformers.modeling_outputs import TokenClassifierOutput
from transformers.models.qwen2.modeling_qwen2 import Qwen2Model, Qwen2PreTrainedModel

from spex.shared.content.reward_prompts import PrmKind, RewardFormat

__all__ = [
    "STEP_TAG_ARCHITECTURE",
    "ModelClass",
    "PrmReader",
    "moved",
    "Qwen2ForProcessRewardModel",
    "build_prm",
    "prm_class",
]

STEP_TAG_ARCHITECTURE = "Qwen2ForProcessRewardModel"


class Qwen2ForProcessRewardModel(Qwen2PreTrainedModel):
    """Two logits (wrong, right) at every token, from a Qwen2 body and a two-layer head."""

    def __init__(self, config: Qwen2Config) -> None:
        super().__init__(config)
        self.model = Qwen2Model(config)
        hidden = config.hidden_size
        self.score = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 2))
        self.post_init()

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, **kwargs: object
    ) -> TokenClassifierOutput:
        hidden = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return TokenClassifierOutput(logits=self.score(hidden))


class ModelClass(Protocol):
    """What a model directory loads as: the two calls `models._load` makes of an Auto class."""

    def from_config(
        self, config: PretrainedConfig, /, *, dtype: torch.dtype | None = None
    ) -> PreTrainedModel: ...

    def from_pretrained(self, path: str, /, *, local_files_only: bool) -> PreTrainedModel: ...


def moved(model: PreTrainedModel, to: torch.dtype | str) -> PreTrainedModel:
    """`model.to(to)`: transformers wraps `nn.Module.to` with `functools.wraps`, which types the
    method as the unbound function, so it is called through the model's class."""
    return type(model).to(model, to)


class _StepTagAuto:
    """`Qwen2ForProcessRewardModel` behind the two calls `models._load` makes of an Auto class."""

    @staticmethod
    def from_config(config: PretrainedConfig, /, *, dtype: torch.dtype | None = None) -> PreTrainedModel:
        if not isinstance(config, Qwen2Config):
            raise ValueError(f"a step-tag reward model is a Qwen2 body, not a {type(config).__name__}")
        model = Qwen2ForProcessRewardModel(config)
        return moved(model, dtype) if dtype is not None else model

    @staticmethod
    def from_pretrained(path: str, /, *, local_files_only: bool) -> PreTrainedModel:
        return Qwen2ForProcessRewardModel.from_pretrained(path, local_files_only=local_files_only)


def prm_class(kind: PrmKind) -> ModelClass:
    """What a reward model of `kind` loads as (an Auto class, or one that answers as one)."""
    from transformers import AutoModelForCausalLM, AutoModelForTokenClassification

    classes: dict[PrmKind, ModelClass] = {
        "token-classification": AutoModelForTokenClassification,
        "step-tag": _StepTagAuto(),
        "plus-minus": AutoModelForCausalLM,
    }
    return classes[kind]


def build_prm(
    kind: PrmKind, llama_config: LlamaConfig, tokenizer: PreTrainedTokenizerBase, dtype: torch.dtype
) -> PreTrainedModel:
    """A random-weight reward model of `kind` over the body `llama_config` describes; adds to
    `tokenizer` the token its family tags steps with (`<extra_0>` special, as Qwen's tokenizer
    has it; `ки` plain, a word of Math-Shepherd's vocabulary)."""
    fmt = RewardFormat(kind)
    if kind == "step-tag":
        tokenizer.add_tokens([fmt.tag], special_tokens=True)
    elif kind == "plus-minus":
        tokenizer.add_tokens([fmt.tag])
    llama_config.vocab_size = len(tokenizer)
    model: PreTrainedModel
    if kind == "plus-minus":
        model = LlamaForCausalLM(llama_config)
        return moved(model, dtype)
    if kind == "token-classification":
        from transformers import LlamaForTokenClassification

        model = LlamaForTokenClassification(llama_config)
        return moved(model, dtype)
    c = llama_config
    config = Qwen2Config(
        vocab_size=c.vocab_size,
        hidden_size=c.hidden_size,
        intermediate_size=c.intermediate_size,
        num_hidden_layers=c.num_hidden_layers,
        num_attention_heads=c.num_attention_heads,
        num_key_value_heads=c.num_key_value_heads,
        max_position_embeddings=c.max_position_embeddings,
        bos_token_id=c.bos_token_id,
        eos_token_id=c.eos_token_id,
        pad_token_id=c.pad_token_id,
        tie_word_embeddings=False,
        architectures=[STEP_TAG_ARCHITECTURE],
    )
    config.num_labels = 2  # wrong, right
    model = Qwen2ForProcessRewardModel(config)
    return moved(model, dtype)


def _token_id(tokenizer: PreTrainedTokenizerBase, text: str, what: str) -> int:
    """A token's id: the digits given, else the last id of the text's encoding (as the
    reference code of each family takes it)."""
    if text.isdigit():
        return int(text)
    ids = tokenizer.encode(text, add_special_tokens=False)
    if not ids:
        raise ValueError(f"{what}: {text!r} encodes to no token")
    return int(ids[-1])


class PrmReader:
    """The two logits a path's last step is scored by, at each path's last token: a classifier's
    (wrong, right), or a causal LM's (good, bad). A step-tag family's tag must be one token."""

    def __init__(self, fmt: RewardFormat, tokenizer: PreTrainedTokenizerBase) -> None:
        self.format = fmt
        if fmt.kind == "step-tag" and len(tokenizer.encode(fmt.tag, add_special_tokens=False)) != 1:
            raise ValueError(f"prm_step_tag: {fmt.tag!r} is not one token of the reward model's tokenizer")
        self.token_ids = (
            [_token_id(tokenizer, t, "prm_tokens") for t in fmt.tokens] if fmt.kind == "plus-minus" else []
        )

    def logits(
        self, model: PreTrainedModel, ids: torch.Tensor, mask: torch.Tensor, last: torch.Tensor
    ) -> torch.Tensor:
        """[B, 2] at positions `last` ([B]) of the right-padded batch `ids` ([B, T])."""
        rows = torch.arange(ids.shape[0], device=ids.device)
        if self.format.kind != "plus-minus":
            return model(input_ids=ids, attention_mask=mask).logits[rows, last]  # [B, T, 2] -> [B, 2]
        out = model(input_ids=ids, attention_mask=mask, logits_to_keep=last[:, None]).logits  # [B, 1, V]
        return out[:, 0, self.token_ids]
