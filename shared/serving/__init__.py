"""Serving engines over HTTP: vLLM and SGLang, each a server SPEX's generator sits in front of
(one generator per server, one server per GPU), or that serves the reward model the scorer asks."""

from __future__ import annotations

from spex.shared.content.prompts import chat_template
from spex.shared.content.reward_prompts import RewardFormat
from spex.shared.serving.backend import EngineUnavailable
from spex.shared.serving.engine import ServingEngine
from spex.shared.serving.sglang import SGLangBackend
from spex.shared.serving.vllm import VLLMBackend
from spex.shared.serving.vllm_reward import VLLMRewardBackend

__all__ = ["EngineUnavailable", "ServingEngine", "open_engine"]


def open_engine(
    kind: str,
    url: str,
    timeout_s: float = 600.0,
    tokenizer_dir: str = "",
    deterministic: bool = False,
    reward: bool = False,
    prm: RewardFormat | None = None,
) -> ServingEngine:
    """A serving engine of `kind` ("vllm" | "sglang") at `url`: a generator's, or with `reward`
    a reward model's (SGLang's `/classify`, vLLM's `/pooling`) of the family `prm` says. Prompts
    go through the chat template of the tokenizer in `tokenizer_dir` (the served model's), plain
    without one."""
    backend: VLLMBackend | VLLMRewardBackend | SGLangBackend
    prm = prm or RewardFormat()
    if kind == "vllm":
        backend = VLLMRewardBackend(url, prm=prm) if reward else VLLMBackend(url)
    elif kind == "sglang":
        if reward and prm.kind == "plus-minus":
            raise ValueError("SPEX_PRM_KIND: a plus-minus reward model is served by vllm only")
        backend = SGLangBackend(url, reward=reward, deterministic=deterministic)
    else:
        raise ValueError(f"SPEX_ENGINE: {kind!r} is not a serving engine (vllm, sglang)")
    if not tokenizer_dir:
        return ServingEngine(backend, url, timeout_s)
    from transformers import AutoTokenizer  # the hf extra; to read the chat template and count

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir, local_files_only=True)

    def count_tokens(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False))

    return ServingEngine(backend, url, timeout_s, chat_template(tokenizer), count_tokens=count_tokens)
